package tokenize

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
)

var encodings = []string{CL100kBase, O200kBase}

func testBuilder(t testing.TB, name string, opts BuilderOptions) *Builder {
	t.Helper()
	enc, err := Get(name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBuilder(enc, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustPrompt(t testing.TB, b *Builder, p PromptSpec) string {
	t.Helper()
	out, err := b.AppendPrompt(nil, p)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestWordsSingleToken(t *testing.T) {
	ws := strings.Fields(wordList)
	if len(ws) < 1500 || len(ws) < fillerWords {
		t.Fatalf("only %d words", len(ws))
	}
	seen := map[string]bool{}
	for _, w := range ws {
		if seen[w] {
			t.Errorf("duplicate word %q", w)
		}
		seen[w] = true
		for _, r := range w {
			if r < 'a' || r > 'z' {
				t.Errorf("word %q has %q: only a-z keeps the pre-tokenizer splitting at spaces", w, r)
			}
		}
	}
	for _, name := range encodings {
		enc, _ := Get(name)
		for _, w := range ws {
			if ids := enc.Encode(" " + w); len(ids) != 1 {
				t.Errorf("%s: %q is %d tokens", name, " "+w, len(ids))
			}
		}
		// Every word next to every filler word would be 1.8M pairs; all words in a row,
		// forwards and backwards, put each word beside two different neighbours.
		all := " " + strings.Join(ws, " ")
		rev := slices.Clone(ws)
		slices.Reverse(rev)
		for _, s := range []string{all, " " + strings.Join(rev, " ")} {
			if n := enc.Count(s); n != len(ws) {
				t.Errorf("%s: %d words in a row count %d tokens", name, len(ws), n)
			}
		}
	}
}

// promptLengths is every N up to 256, the edges of blocks and of the filler table, and
// pseudo-random lengths spread log-uniformly up to 200,000.
func promptLengths(short bool) []int {
	var ns []int
	for n := 1; n <= 256; n++ {
		ns = append(ns, n)
	}
	ns = append(ns, 511, 512, 513, 1023, 1024, 1025, 4095, 4096, 4097, 16383, 16384, 16385,
		65535, 65536, 65537, 200000)
	if !raceEnabled {
		ns = append(ns, 131071, 131072, 131073, 199999)
	}
	r := rand.New(rand.NewPCG(4, 4))
	k := 40
	if short || raceEnabled {
		k = 8
	}
	for range k {
		ns = append(ns, int(math.Exp(r.Float64()*math.Log(200000))))
	}
	slices.Sort(ns)
	return slices.Compact(ns)
}

// TestPromptExactCount counts real tiktoken tokens of built prompts: every N up to 256,
// the edges and a log-uniform sample to 200,000, for tails alone and behind blocks.
func TestPromptExactCount(t *testing.T) {
	specs := []PromptSpec{
		{RequestID: 0},
		{RequestID: 123456789},
		{RequestID: -1, Blocks: []int64{3, 99, 7, 1 << 40}, BlockTokens: 512},
		{RequestID: 42, Blocks: []int64{5, 6}, BlockTokens: 16},
	}
	for _, name := range encodings {
		b := testBuilder(t, name, BuilderOptions{Seed: 17})
		enc := b.Encoding()
		for si, spec := range specs {
			lengths := promptLengths(testing.Short())
			if si > 0 {
				// Only the first spec walks the long lengths: tiktoken-go counts about
				// 300k tokens/s, much less under -race.
				lengths = slices.DeleteFunc(lengths, func(n int) bool { return n > 20000 })
			}
			for _, n := range lengths {
				spec.Tokens = n
				p := mustPrompt(t, b, spec)
				if got := enc.Count(p); got != n {
					t.Fatalf("%s %+v: %d tokens, want %d", name, spec, got, n)
				}
			}
		}
	}
}

// TestPromptExactEveryN covers every N in 1..200,000. It tokenizes the 200,000-token prompt
// once and checks that its tokens are its words one for one; the prompt of N tokens must
// then be that prompt's first N words (checked byte for byte for N <= 3000 and every 97th N
// beyond, fewer under -race, and by exact byte length for every N). Since tiktoken splits text into pieces with
// its regex before BPE, and " word" pieces end at the next space, a word-boundary prefix
// tokenizes to the prefix of the tokens.
func TestPromptExactEveryN(t *testing.T) {
	if testing.Short() {
		t.Skip("full sweep skipped in -short")
	}
	const max = 200000
	specs := []PromptSpec{
		{RequestID: 77},
		{RequestID: 5, Blocks: []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, BlockTokens: 512},
	}
	if raceEnabled {
		specs = specs[1:] // one 200,000-token encode per encoding: tiktoken-go is slow under -race
	}
	for _, name := range encodings {
		b := testBuilder(t, name, BuilderOptions{})
		enc := b.Encoding()
		for _, spec := range specs {
			spec.Tokens = max
			full := mustPrompt(t, b, spec)
			ids := enc.Encode(full)
			if len(ids) != max {
				t.Fatalf("%s %+v: %d tokens, want %d", name, spec, len(ids), max)
			}
			ends := make([]int, max+1) // ends[n] = byte length of the first n words
			off := 0
			for i, id := range ids {
				piece := enc.Decode([]int{id})
				if !strings.HasPrefix(full[off:], piece) || len(piece) < 2 || piece[0] != ' ' {
					t.Fatalf("%s: token %d is %q, not a whole word at byte %d", name, i, piece, off)
				}
				off += len(piece)
				if off < len(full) && full[off] != ' ' {
					t.Fatalf("%s: token %d ends inside a word", name, i)
				}
				ends[i+1] = off
			}
			var buf []byte
			for n := 1; n <= max; n++ {
				spec.Tokens = n
				if got := b.promptBytes(spec); got != ends[n] {
					t.Fatalf("%s N=%d: %d bytes, want %d", name, n, got, ends[n])
				}
				if n <= 3000 && !raceEnabled || n <= 300 || n%997 == 0 || n%97 == 0 && !raceEnabled {
					var err error
					buf, err = b.AppendPrompt(buf[:0], spec)
					if err != nil {
						t.Fatal(err)
					}
					if string(buf) != full[:ends[n]] {
						t.Fatalf("%s N=%d: not the first %d words of the longest prompt", name, n, n)
					}
				}
			}
		}
	}
}

func TestPromptValidate(t *testing.T) {
	b := testBuilder(t, CL100kBase, BuilderOptions{})
	for _, p := range []PromptSpec{
		{Tokens: 0}, {Tokens: -3}, {Tokens: MaxPromptTokens + 1},
		{Tokens: 10, Blocks: []int64{1}, BlockTokens: 0},
	} {
		if out, err := b.AppendPrompt([]byte("x"), p); err == nil || string(out) != "x" {
			t.Errorf("AppendPrompt(%+v) = %q, %v; want an error and dst untouched", p, out, err)
		}
		if _, err := b.AppendTokenIDs(nil, p, 32000); err == nil {
			t.Errorf("AppendTokenIDs(%+v) succeeded", p)
		}
	}
	if _, err := b.AppendTokenIDs(nil, PromptSpec{Tokens: 5}, 1000); err == nil {
		t.Error("AppendTokenIDs with vocab 1000 succeeded")
	}
	if _, err := NewBuilder(nil, BuilderOptions{}); err == nil {
		t.Error("NewBuilder(nil) succeeded")
	}
}

func TestAppendPromptKeepsDst(t *testing.T) {
	b := testBuilder(t, O200kBase, BuilderOptions{})
	out, err := b.AppendPrompt([]byte("prefix:"), PromptSpec{RequestID: 1, Tokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	if want := "prefix:" + mustPrompt(t, b, PromptSpec{RequestID: 1, Tokens: 5}); string(out) != want {
		t.Errorf("got %q want %q", out, want)
	}
	for _, p := range []PromptSpec{{RequestID: 1, Tokens: 5}, {RequestID: 2, Tokens: 70000, Blocks: []int64{1, 2, 3}, BlockTokens: 512}} {
		if n, err := b.PromptLen(p); err != nil || n != len(mustPrompt(t, b, p)) {
			t.Errorf("PromptLen(%+v) = %d, %v; text is %d bytes", p, n, err, len(mustPrompt(t, b, p)))
		}
	}
	if _, err := b.PromptLen(PromptSpec{}); err == nil {
		t.Error("PromptLen of an invalid spec succeeded")
	}
	// Deterministic: a second builder gives the same text; another seed does not.
	b2 := testBuilder(t, O200kBase, BuilderOptions{})
	b3 := testBuilder(t, O200kBase, BuilderOptions{Seed: 1 << 50})
	p := PromptSpec{RequestID: 9, Tokens: 3000, Blocks: []int64{4, 5}, BlockTokens: 64}
	if mustPrompt(t, b, p) != mustPrompt(t, b2, p) {
		t.Error("same spec, different text")
	}
	if x, y := mustPrompt(t, b, p), mustPrompt(t, b3, p); firstWords(x, 1) == firstWords(y, 1) {
		t.Error("different seeds start alike")
	}
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	return strings.Join(f[:min(n, len(f))], " ")
}

// requestIDs is many ids: consecutive runs, values near the mixed-radix digit edges,
// extremes and random ones.
func requestIDs() []int64 {
	var ids []int64
	for i := int64(0); i < 20000; i++ {
		ids = append(ids, i)
	}
	for _, base := range []int64{912, 913, 912 * 1824, 1 << 32, math.MaxInt64 - 5000, math.MinInt64} {
		for i := int64(-3); i < 3000; i++ {
			ids = append(ids, base+i)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		ids = append(ids, int64(r.Uint64()))
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// TestUniqueFirstTokens: no two requests without blocks share their first 8 tokens, in text
// (by tokens: first checked to be the words) and in token ids; and no request's tail starts
// like a block.
func TestUniqueFirstTokens(t *testing.T) {
	ids := requestIDs()
	for _, name := range encodings {
		b := testBuilder(t, name, BuilderOptions{Seed: 3})
		enc := b.Encoding()
		seen := make(map[string]int64, len(ids))
		var buf []byte
		for i, id := range ids {
			var err error
			buf, err = b.AppendPrompt(buf[:0], PromptSpec{RequestID: id, Tokens: 8})
			if err != nil {
				t.Fatal(err)
			}
			if i%500 == 0 {
				if n := enc.Count(string(buf)); n != 8 {
					t.Fatalf("%s: request %d: %d tokens", name, id, n)
				}
			}
			if other, dup := seen[string(buf)]; dup {
				t.Fatalf("%s: requests %d and %d share their first 8 tokens %q", name, other, id, buf)
			}
			seen[string(buf)] = id
		}
		// Blocks never start with a tail's first word.
		tailFirst := map[string]bool{}
		for k := range seen {
			tailFirst[strings.Fields(k)[0]] = true
		}
		for id := int64(0); id < 5000; id++ {
			p := mustPrompt(t, b, PromptSpec{RequestID: 1, Tokens: 1, Blocks: []int64{id}, BlockTokens: 16})
			if tailFirst[strings.TrimSpace(p)] {
				t.Fatalf("%s: block %d starts with a tail word %q", name, id, p)
			}
		}
	}
	b := testBuilder(t, CL100kBase, BuilderOptions{})
	seen := make(map[[8]int32]int64, len(ids))
	for _, id := range ids {
		out, err := b.AppendTokenIDs(nil, PromptSpec{RequestID: id, Tokens: 8}, 32000)
		if err != nil {
			t.Fatal(err)
		}
		k := [8]int32(out)
		if other, dup := seen[k]; dup {
			t.Fatalf("token ids: requests %d and %d share their first 8 ids", other, id)
		}
		seen[k] = id
	}
}

// commonWords returns how many leading words a and b share.
func commonWords(a, b string) int {
	n := 0
	for {
		ia, ib := strings.IndexByte(a[1:], ' '), strings.IndexByte(b[1:], ' ')
		if ia < 0 {
			ia = len(a) - 1
		}
		if ib < 0 {
			ib = len(b) - 1
		}
		if len(a) == 0 || len(b) == 0 || a[:ia+1] != b[:ib+1] {
			return n
		}
		n++
		a, b = a[ia+1:], b[ib+1:]
		if len(a) == 0 || len(b) == 0 {
			return n
		}
	}
}

func commonPrefix[E comparable](a, b []E) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func sharedLeading(a, b []int64) int {
	return commonPrefix(a, b)
}

// expectedShared is what two prompts must share: their equal leading blocks, cut at either's end.
func expectedShared(a, b PromptSpec) int {
	s := sharedLeading(a.Blocks, b.Blocks) * a.BlockTokens
	return min(s, a.Tokens, b.Tokens)
}

// congruentNext reports whether the first items after the shared blocks are both blocks, or
// both tails, with ids congruent modulo the first-word alphabet: the one case where two runs
// may start with the same word (documented in docs/prompts.md).
func congruentNext(b *Builder, x, y PromptSpec) bool {
	s := sharedLeading(x.Blocks, y.Blocks)
	nx, xb := nextID(x, s)
	ny, yb := nextID(y, s)
	if xb != yb {
		return false
	}
	m := uint64(len(b.tab.firstTail))
	if xb {
		m = uint64(len(b.tab.firstBlock))
	}
	return (uint64(nx)+b.seed)%m == (uint64(ny)+b.seed)%m
}

func nextID(p PromptSpec, s int) (int64, bool) {
	if s < len(p.Blocks) && s*p.BlockTokens < p.Tokens {
		return p.Blocks[s], true
	}
	return p.RequestID, false
}

// TestSharedBlocksExact: prompts share exactly block_tokens x (shared leading blocks)
// tokens and then diverge at once, checked by real tokens on a sample and by words on many
// pairs, including the Mooncake conversation trace's own hash_ids.
func TestSharedBlocksExact(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var specs []PromptSpec
	for i := range 400 {
		bt := []int{1, 3, 16, 64}[i%4]
		nb := r.IntN(6)
		blocks := make([]int64, nb)
		for j := range blocks {
			// A small pool of ids, and shared stems, so that many pairs share blocks.
			blocks[j] = int64(j*10 + r.IntN(3))
		}
		tokens := 1 + r.IntN(nb*bt+40)
		specs = append(specs, PromptSpec{RequestID: int64(i), Tokens: tokens, Blocks: blocks, BlockTokens: bt})
	}
	for _, name := range encodings {
		b := testBuilder(t, name, BuilderOptions{Seed: 11})
		enc := b.Encoding()
		texts := make([]string, len(specs))
		toks := make([][]int, len(specs))
		for i, p := range specs {
			texts[i] = mustPrompt(t, b, p)
			toks[i] = enc.Encode(texts[i])
		}
		pairs, shared := 0, 0
		for i := range specs {
			for j := i + 1; j < len(specs); j++ {
				x, y := specs[i], specs[j]
				if x.BlockTokens != y.BlockTokens || congruentNext(b, x, y) {
					continue
				}
				want := expectedShared(x, y)
				if got := commonPrefix(toks[i], toks[j]); got != want {
					t.Fatalf("%s: %+v and %+v share %d tokens, want %d", name, x, y, got, want)
				}
				pairs++
				if want > 0 {
					shared++
				}
			}
		}
		if shared < 1000 {
			t.Fatalf("only %d of %d pairs share blocks: the test is too weak", shared, pairs)
		}
	}
	mooncakeSharing(t)
}

// tracesDir is the repository's copy of the real sample traces (testdata/traces).
func tracesDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("..", "testdata", "traces")
	if _, err := os.Stat(filepath.Join(dir, "SOURCES.md")); err != nil {
		t.Fatalf("sample traces missing from the repository: %v", err)
	}
	return dir
}

// mooncakeSharing builds the first 400 requests of the Mooncake conversation trace with its
// hash_ids as 512-token blocks and checks every pair's common word prefix.
func mooncakeSharing(t *testing.T) {
	f, err := os.Open(filepath.Join(tracesDir(t), "mooncake_conversation_trace.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var specs []PromptSpec
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<22)
	for sc.Scan() && len(specs) < 400 {
		var row struct {
			InputLength int     `json:"input_length"`
			HashIDs     []int64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("mooncake line %d: %v", len(specs)+1, err)
		}
		specs = append(specs, PromptSpec{RequestID: int64(len(specs)), Tokens: row.InputLength, Blocks: row.HashIDs, BlockTokens: 512})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	b := testBuilder(t, CL100kBase, BuilderOptions{})
	texts := make([]string, len(specs))
	for i, p := range specs {
		texts[i] = mustPrompt(t, b, p)
	}
	pairs, shared, congruent := 0, 0, 0
	for i := range specs {
		for j := i + 1; j < len(specs); j++ {
			x, y := specs[i], specs[j]
			want := expectedShared(x, y)
			got := commonWords(texts[i], texts[j])
			if congruentNext(b, x, y) {
				congruent++
				if got < want || got >= want+b.HeadTokens() {
					t.Fatalf("mooncake %d,%d (congruent ids): share %d words, want %d..%d", i, j, got, want, want+b.HeadTokens()-1)
				}
				continue
			}
			if got != want {
				t.Fatalf("mooncake requests %d and %d share %d words, want %d", i, j, got, want)
			}
			pairs++
			if want > 0 {
				shared++
			}
		}
	}
	t.Logf("mooncake: %d pairs exact, %d sharing blocks, %d with congruent next ids", pairs, shared, congruent)
	if shared == 0 {
		t.Fatal("no mooncake pair shares a block: the test is too weak")
	}
}

func TestTokenIDs(t *testing.T) {
	b := testBuilder(t, O200kBase, BuilderOptions{Seed: 5})
	for _, vocab := range []int{2048, 32000, 128256, 151936} {
		lo, hi, err := TokenIDRange(vocab)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 2, 7, 8, 100, 513, 200000} {
			p := PromptSpec{RequestID: int64(n), Tokens: n, Blocks: []int64{1, 2}, BlockTokens: 64}
			out, err := b.AppendTokenIDs(make([]int32, 3, 3), p, vocab)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != n+3 || out[0] != 0 {
				t.Fatalf("vocab %d N=%d: %d ids (dst kept: %v)", vocab, n, len(out)-3, out[0] == 0)
			}
			for _, id := range out[3:] {
				if int(id) < lo || int(id) >= hi {
					t.Fatalf("vocab %d: id %d outside [%d,%d)", vocab, id, lo, hi)
				}
			}
		}
	}
	// Sharing, as for text.
	r := rand.New(rand.NewPCG(9, 9))
	var specs []PromptSpec
	for i := range 300 {
		blocks := make([]int64, r.IntN(5))
		for j := range blocks {
			blocks[j] = int64(j*10 + r.IntN(3))
		}
		specs = append(specs, PromptSpec{RequestID: int64(i), Tokens: 1 + r.IntN(300), Blocks: blocks, BlockTokens: 32})
	}
	out := make([][]int32, len(specs))
	for i, p := range specs {
		out[i], _ = b.AppendTokenIDs(nil, p, 32000)
	}
	half := uint64(32000-32000/64-1000) / 2
	for i := range specs {
		for j := i + 1; j < len(specs); j++ {
			x, y := specs[i], specs[j]
			s := sharedLeading(x.Blocks, y.Blocks)
			nx, xb := nextID(x, s)
			ny, yb := nextID(y, s)
			if xb == yb && (uint64(nx)+b.seed)%half == (uint64(ny)+b.seed)%half {
				continue
			}
			if got, want := commonPrefix(out[i], out[j]), expectedShared(x, y); got != want {
				t.Fatalf("ids: %+v and %+v share %d, want %d", x, y, got, want)
			}
		}
	}
}

func TestHeadDigits(t *testing.T) {
	for _, tc := range []struct {
		first, rest uint64
		want        int
	}{
		{1 << 8, 1 << 8, 8}, {1 << 32, 1 << 32, 2}, {2, 2, 64}, {912, 1824, 7}, // 912·1824^5 ≈ 1.841e19 < 2^64 ≈ 1.845e19
	} {
		if got := headDigits(tc.first, tc.rest); got != tc.want {
			t.Errorf("headDigits(%d,%d) = %d, want %d", tc.first, tc.rest, got, tc.want)
		}
	}
}

// TestEnglishish guards the "natural words" promise: only letters and spaces.
func TestEnglishish(t *testing.T) {
	b := testBuilder(t, CL100kBase, BuilderOptions{})
	p := mustPrompt(t, b, PromptSpec{RequestID: 3, Tokens: 5000, Blocks: []int64{8}, BlockTokens: 100})
	for _, r := range p {
		if r != ' ' && !unicode.IsLower(r) {
			t.Fatalf("prompt has %q", r)
		}
	}
	if strings.Contains(p, "  ") || p[0] != ' ' {
		t.Fatal("prompt is not single-space separated words with a leading space")
	}
}

// FuzzAppendPrompt: any spec of up to 2,000 tokens counts exactly, in both encodings, and its
// size pass agrees with the text.
func FuzzAppendPrompt(f *testing.F) {
	f.Add(int64(0), uint16(1), int64(3), int64(4), uint16(16), uint64(0))
	f.Add(int64(-1), uint16(2000), int64(math.MaxInt64), int64(math.MinInt64), uint16(1), uint64(1<<63))
	f.Fuzz(func(t *testing.T, rid int64, tokens uint16, b1, b2 int64, bt uint16, seed uint64) {
		p := PromptSpec{RequestID: rid, Tokens: int(tokens%2000) + 1, BlockTokens: int(bt%600) + 1}
		if b1%3 != 0 {
			p.Blocks = []int64{b1, b2}
		}
		for _, name := range encodings {
			b := testBuilder(t, name, BuilderOptions{Seed: seed})
			text := mustPrompt(t, b, p)
			if got := b.Encoding().Count(text); got != p.Tokens {
				t.Fatalf("%s %+v seed %d: %d tokens", name, p, seed, got)
			}
			if n := b.promptBytes(p); n != len(text) {
				t.Fatalf("size pass %d, text %d bytes", n, len(text))
			}
			ids, err := b.AppendTokenIDs(nil, p, 50000)
			if err != nil || len(ids) != p.Tokens {
				t.Fatalf("token ids: %d, %v", len(ids), err)
			}
		}
	})
}

// TestTableSize keeps the shared tables small and bounded (docs/prompts.md states the size).
func TestTableSize(t *testing.T) {
	tab := loadTable()
	words := 0
	for _, w := range tab.words {
		words += len(w) + 16 // string header
	}
	total := len(tab.filler) + 4*len(tab.fillerOff) + words + 2*(len(tab.firstBlock)+len(tab.firstTail))
	t.Logf("filler %d bytes, offsets %d bytes, words %d bytes, total %d bytes", len(tab.filler), 4*len(tab.fillerOff), words, total)
	if total > 1<<20 {
		t.Errorf("tables are %d bytes, over 1 MiB", total)
	}
}

// TestDumpPrompts writes sample prompts as JSON lines {n, r, text} to the file named by
// LLMREPLAY_DUMP_PROMPTS, for testdata/othertok/measure.mjs. Skipped otherwise.
func TestDumpPrompts(t *testing.T) {
	path := os.Getenv("LLMREPLAY_DUMP_PROMPTS")
	if path == "" {
		t.Skip("LLMREPLAY_DUMP_PROMPTS not set")
	}
	b := testBuilder(t, O200kBase, BuilderOptions{})
	var sb strings.Builder
	enc := json.NewEncoder(&sb)
	for _, n := range []int{16, 64, 128, 400, 1000, 1500, 2500, 4000, 10000, 30000} {
		for r := int64(0); r < 8; r++ {
			text := mustPrompt(t, b, PromptSpec{RequestID: r*7919 + int64(n), Tokens: n})
			if err := enc.Encode(map[string]any{"n": n, "r": r, "text": text}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBuilderConcurrent: one Builder shared by goroutines gives each the same text as a
// sequential build (run under -race by scripts/test).
func TestBuilderConcurrent(t *testing.T) {
	b := testBuilder(t, CL100kBase, BuilderOptions{Seed: 8})
	specs := make([]PromptSpec, 64)
	want := make([]string, len(specs))
	for i := range specs {
		specs[i] = PromptSpec{RequestID: int64(i), Tokens: 100 + 37*i, Blocks: []int64{int64(i % 3), 9}, BlockTokens: 16}
		want[i] = mustPrompt(t, b, specs[i])
	}
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			var buf []byte
			var ids []int32
			for k := range 200 {
				i := (g*31 + k) % len(specs)
				var err error
				if buf, err = b.AppendPrompt(buf[:0], specs[i]); err == nil && string(buf) != want[i] {
					err = fmt.Errorf("goroutine %d: spec %d differs", g, i)
				}
				if err == nil {
					ids, err = b.AppendTokenIDs(ids[:0], specs[i], 32000)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
