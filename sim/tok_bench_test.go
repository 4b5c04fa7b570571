package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/tokenize"
)

// BenchmarkPromptCount is the cost of counting a ~4k-token text prompt, which every
// text (not token-id) request pays once on arrival.
func BenchmarkPromptCount(b *testing.B) {
	enc, _ := tokenize.Get(tokenize.CL100kBase)
	text := strings.Repeat("The quick brown fox jumps over the lazy dog, again and again. ", 320)
	n := enc.Count(text)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		enc.Count(text)
	}
	b.ReportMetric(float64(n), "tokens")
}

// BenchmarkPromptCountCached is the same prompt through the server's count cache.
func BenchmarkPromptCountCached(b *testing.B) {
	cfg, _ := Profile("tiny")
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	text := strings.Repeat("The quick brown fox jumps over the lazy dog, again and again. ", 320)
	s.count(text, nil)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		s.count(text, nil)
	}
}

func TestCountCacheAgrees(t *testing.T) {
	cfg, _ := Profile("tiny")
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, text := range []string{"short", strings.Repeat("lorem ipsum dolor ", 40), strings.Repeat("x", 300), strings.Repeat("lorem ipsum dolor ", 40) + "!"} {
		want := s.enc.Count(text)
		for range 2 {
			if got := s.count(text, nil); got != want {
				t.Fatalf("count(%.20q...) = %d, want %d", text, got, want)
			}
		}
	}
}

// cutsTokenizeApart checks the property textPiece rests on: at every cut it may make
// (pieceCut), the text's tokens are the tokens of the part before it, then those of the
// part after.
func cutsTokenizeApart(t *testing.T, enc *tokenize.Encoding, text string) int {
	t.Helper()
	whole := enc.Encode(text)
	cuts := 0
	for i := range len(text) {
		if !pieceCut(text, i) {
			continue
		}
		cuts++
		parts := append(enc.Encode(text[:i]), enc.Encode(text[i:])...)
		if !slices.Equal(parts, whole) {
			t.Fatalf("cut at byte %d of %q: %d tokens apart, %d whole", i, text[max(0, i-20):min(len(text), i+20)], len(parts), len(whole))
		}
	}
	return cuts
}

// TestTextPiecesTokenize: texts made of what prompts hold (words, code, numbers,
// punctuation, contractions, runs of spaces, tabs and newlines, CRLF, non-Latin
// letters and emoji) tokenize the same whole and cut at every place textPiece may
// cut; and the server's piecewise count equals the whole count, for long texts too.
func TestTextPiecesTokenize(t *testing.T) {
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		t.Fatal(err)
	}
	atoms := []string{"the", "The", " quick", "don't", "we'll", "I'M", "x", "42", "2026", "3.14", "-7",
		" ", "  ", "\t", "\n", "\n\n", " \n", "\r\n", "  \n\n  ", ".", ",", "!", "?\n", "{", "}", "();", " = ", "->",
		"//", "#", "'s", "'", "\"", "é", "naïve", "中文", "Привет", "🙂", "\u00a0", "\u2003", "func", "_id", "x1", "1x"}
	rng := rand.New(rand.NewPCG(3, 4))
	cuts := 0
	for range 200 {
		var sb strings.Builder
		for range 5 + rng.IntN(60) {
			sb.WriteString(atoms[rng.IntN(len(atoms))])
		}
		cuts += cutsTokenizeApart(t, enc, sb.String())
	}
	if cuts < 100 {
		t.Fatalf("only %d cuts tried", cuts)
	}
	cfg, _ := Profile("tiny")
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var long strings.Builder
	for long.Len() < 5*pieceBytes {
		long.WriteString(atoms[rng.IntN(len(atoms))])
	}
	text := long.String()
	if textPiece(text) == len(text) {
		t.Fatal("the long text has no cut")
	}
	for _, h := range []*blockHasher{nil, newBlockHasher(16)} {
		for range 2 { // the second time through the count cache
			if got, want := s.count(text, h), enc.Count(text); got != want {
				t.Fatalf("count %d, tokens %d", got, want)
			}
		}
	}
	wh := newBlockHasher(16)
	wh.addInts(enc.Encode(text))
	h := newBlockHasher(16)
	s.count(text, h)
	if !slices.Equal(h.hashes, wh.hashes) {
		t.Fatal("piecewise block hashes differ from the whole text's")
	}
}

// FuzzTextPieces: any text tokenizes the same whole and cut at textPiece's cuts.
func FuzzTextPieces(f *testing.F) {
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"a\nb", "  \nX", "x'\nS", "1\n2", "\r\nA", "中\nB", "\t\n\n9", "!\nz", "a \n\u00a0\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			return
		}
		cutsTokenizeApart(t, enc, s)
	})
}

// TestCountMemo: with the prefix cache, a long text's block hashes come from the memo
// when it starts at the same point of the hash chain (a session's context sent again:
// nothing is tokenized), and are computed afresh from another starting point; either way
// they are the hashes of its tokens.
func TestCountMemo(t *testing.T) {
	cfg, _ := Profile("tiny")
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var sb strings.Builder
	for i := 0; sb.Len() < 3*pieceBytes; i++ {
		fmt.Fprintf(&sb, "Line %d of the tool's output, with value %d.\n", i, i*i%97)
	}
	text := sb.String()
	ids := s.enc.Encode(text)
	block := ids[:16] // a whole block first: the same offset in a block, another chain
	leads := [][]int{nil, {1, 2, 3, 4, 5}, block}
	for _, lead := range append(leads, leads...) {
		want := newBlockHasher(16)
		want.addInts(lead)
		want.addInts(ids)
		h := newBlockHasher(16)
		h.addInts(lead)
		before := s.counts.encoded.Load()
		if n := s.count(text, h); n != len(ids) || !slices.Equal(h.hashes, want.hashes) || h.state != want.state || h.n != want.n {
			t.Fatalf("lead %v: %d tokens (want %d), hashes equal %v, state equal %v", lead, n, len(ids), slices.Equal(h.hashes, want.hashes), h.state == want.state && h.n == want.n)
		}
		t.Logf("lead %v: %d bytes tokenized", lead, s.counts.encoded.Load()-before)
	}
	// Sent again from the same starting points: nothing tokenized.
	before := s.counts.encoded.Load()
	for _, lead := range leads {
		h := newBlockHasher(16)
		h.addInts(lead)
		s.count(text, h)
		s.count(text, nil)
	}
	if got := s.counts.encoded.Load() - before; got != 0 {
		t.Fatalf("%d bytes tokenized again", got)
	}
}
