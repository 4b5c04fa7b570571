package tokenize

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync"
)

// MaxPromptTokens bounds PromptSpec.Tokens so a corrupt trace cannot ask for gigabytes.
// Exactness is proven by test for 1..200,000 and holds by construction above that.
const MaxPromptTokens = 1 << 24

// fillerWords is the size of the filler vocabulary (the most common words of wordList). A
// small, common vocabulary keeps other tokenizers (Llama, Qwen, Mistral) close to one token a
// word, and bounds how far a window's mix of words can stray from the average: a tokenizer
// that splits a fraction p of the words miscounts a window by about sqrt(fillerWords*p*(1-p)/4)
// tokens at worst, whatever its length (3.4 tokens for p = 0.1), which calibration cannot
// remove.
const fillerWords = 512

// fillerRounds is how many shuffled rounds of the filler vocabulary the filler table holds.
// The table is fillerRounds*fillerWords = 65,536 words (about 370 KB of text plus 256 KB of
// offsets), shared by every Builder; a longer run of filler wraps around.
const fillerRounds = 128

// Domain keys keep block text and request tails apart even when a block id equals a request
// id; they only pick the filler window (the heads are kept apart by disjoint first words).
const (
	domainBlock uint64 = 0x6a09e667f3bcc908
	domainTail  uint64 = 0xbb67ae8584caa73b
)

// PromptSpec describes one prompt: exactly Tokens tokens. When Blocks is non-empty its first
// min(len(Blocks)*BlockTokens, Tokens) tokens are the blocks' text in order (block id b is the
// same text in every prompt that has it, wherever it stands; the last block is cut short when
// Tokens ends inside it), and the rest is a tail unique to RequestID.
type PromptSpec struct {
	RequestID   int64
	Tokens      int
	Blocks      []int64
	BlockTokens int
}

// Validate reports whether p can be built.
func (p PromptSpec) Validate() error {
	switch {
	case p.Tokens < 1:
		return fmt.Errorf("tokenize: prompt for request %d: tokens %d < 1", p.RequestID, p.Tokens)
	case p.Tokens > MaxPromptTokens:
		return fmt.Errorf("tokenize: prompt for request %d: tokens %d > %d", p.RequestID, p.Tokens, MaxPromptTokens)
	case len(p.Blocks) > 0 && p.BlockTokens < 1:
		return fmt.Errorf("tokenize: prompt for request %d: %d blocks but block_tokens %d < 1", p.RequestID, len(p.Blocks), p.BlockTokens)
	}
	return nil
}

// BuilderOptions tunes a Builder. The zero value is the default.
type BuilderOptions struct {
	// Seed selects a family of texts. Ids are offset by Seed before they become words, so
	// two runs with seeds further apart than the number of ids they use share no prompt
	// prefix: pass a fresh random seed when the server's prefix cache outlives a run and the
	// second run must not find the first one's prompts there. Zero is a valid seed.
	Seed uint64
}

// Builder makes prompt text and token-id prompts of an exact length. It holds no per-call
// state: it is safe for concurrent use, and AppendPrompt allocates only when dst is too small.
type Builder struct {
	enc  *Encoding
	seed uint64
	tab  *wordTable
}

// wordTable is the precomputed, read-only vocabulary shared by every Builder.
type wordTable struct {
	words []string // " word", leading space included
	// firstBlock and firstTail are the word indices allowed as the first word of a block
	// and of a request tail: disjoint halves, so a tail never starts like a block.
	firstBlock, firstTail []uint16
	headLen               int // words in a head: enough digits to represent any uint64

	filler    []byte   // fillerRounds shuffled rounds of the filler vocabulary
	fillerOff []uint32 // word i of filler is filler[fillerOff[i]:fillerOff[i+1]]
}

var (
	tableOnce sync.Once
	table     *wordTable

	verifiedMu sync.Mutex
	verified   = map[*Encoding]error{}
)

func loadTable() *wordTable {
	tableOnce.Do(func() {
		ws := strings.Fields(wordList)
		t := &wordTable{words: make([]string, len(ws))}
		for i, w := range ws {
			t.words[i] = " " + w
		}
		for i := range ws {
			if i%2 == 0 {
				t.firstBlock = append(t.firstBlock, uint16(i))
			} else {
				t.firstTail = append(t.firstTail, uint16(i))
			}
		}
		t.headLen = headDigits(uint64(min(len(t.firstBlock), len(t.firstTail))), uint64(len(ws)))

		// Shuffled rounds rather than independent draws: every window longer than a round
		// holds each filler word almost equally often, so a tokenizer that splits some words
		// sees nearly the same ratio in every prompt, which keeps calibration residuals small.
		rng := splitmixState{s: 0x243f6a8885a308d3}
		perm := make([]uint16, fillerWords)
		for i := range perm {
			perm[i] = uint16(i)
		}
		t.fillerOff = make([]uint32, 0, fillerRounds*fillerWords+1)
		for range fillerRounds {
			for i := len(perm) - 1; i > 0; i-- {
				j := int(rng.next() % uint64(i+1))
				perm[i], perm[j] = perm[j], perm[i]
			}
			for _, w := range perm {
				t.fillerOff = append(t.fillerOff, uint32(len(t.filler)))
				t.filler = append(t.filler, t.words[w]...)
			}
		}
		t.fillerOff = append(t.fillerOff, uint32(len(t.filler)))
		table = t
	})
	return table
}

// headDigits returns the number d of mixed-radix digits, the first in base first and the rest
// in base rest, needed so that first*rest^(d-1) >= 2^64: then the digits of a uint64 are
// unique to it.
func headDigits(first, rest uint64) int {
	d, prod := 1, first
	for {
		hi, lo := bits.Mul64(prod, rest)
		d++
		if hi != 0 {
			return d
		}
		prod = lo
	}
}

// NewBuilder returns a Builder for enc. It checks that every word of the vocabulary is one
// token in enc (once per encoding), so an encoding that breaks the construction fails here
// rather than producing prompts of the wrong length.
func NewBuilder(enc *Encoding, opts BuilderOptions) (*Builder, error) {
	if enc == nil {
		return nil, errors.New("tokenize: NewBuilder: nil encoding")
	}
	t := loadTable()
	verifiedMu.Lock()
	err, ok := verified[enc]
	if !ok {
		for _, w := range t.words {
			if n := enc.Count(w); n != 1 {
				err = fmt.Errorf("tokenize: NewBuilder: word %q is %d tokens in %s, want 1", w, n, enc.Name())
				break
			}
		}
		verified[enc] = err
	}
	verifiedMu.Unlock()
	if err != nil {
		return nil, err
	}
	return &Builder{enc: enc, seed: opts.Seed, tab: t}, nil
}

// Encoding returns the encoding the builder's prompts are exact in.
func (b *Builder) Encoding() *Encoding { return b.enc }

// HeadTokens is how many leading tokens of a block or tail are unique to its id: two distinct
// ids never give the same first HeadTokens words (7 for the builder's vocabulary: 912 first
// words x 1,824^5 falls just short of 2^64, so a sixth further digit is needed).
func (b *Builder) HeadTokens() int { return b.tab.headLen }

// AppendPrompt appends the text of p to dst and returns the extended slice. The text is
// exactly p.Tokens tokens in the builder's encoding: it is a run of words, each one token with
// its leading space, so the text starts with a space. It holds only a-z and spaces, so it goes
// into a JSON string as it is, with no escaping. It makes one allocation at most (none when
// dst has room) and never encodes anything. On error dst is returned unchanged.
func (b *Builder) AppendPrompt(dst []byte, p PromptSpec) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return dst, err
	}
	if need := b.promptBytes(p); cap(dst)-len(dst) < need {
		grown := make([]byte, len(dst), len(dst)+need)
		copy(grown, dst)
		dst = grown
	}
	left := p.Tokens
	for _, id := range p.Blocks {
		if left == 0 {
			break
		}
		k := min(left, p.BlockTokens)
		dst = b.appendRun(dst, uint64(id)+b.seed, b.tab.firstBlock, domainBlock, k)
		left -= k
	}
	if left > 0 {
		dst = b.appendRun(dst, uint64(p.RequestID)+b.seed, b.tab.firstTail, domainTail, left)
	}
	return dst, nil
}

// PromptLen returns the length in bytes of the text AppendPrompt appends for p (for a
// Content-Length, or to size a buffer), without building it: O(blocks).
func (b *Builder) PromptLen(p PromptSpec) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, err
	}
	return b.promptBytes(p), nil
}

// promptBytes returns the exact length in bytes of p's text, so AppendPrompt grows dst once.
func (b *Builder) promptBytes(p PromptSpec) int {
	n, left := 0, p.Tokens
	for _, id := range p.Blocks {
		if left == 0 {
			break
		}
		k := min(left, p.BlockTokens)
		n += b.runBytes(uint64(id)+b.seed, b.tab.firstBlock, domainBlock, k)
		left -= k
	}
	if left > 0 {
		n += b.runBytes(uint64(p.RequestID)+b.seed, b.tab.firstTail, domainTail, left)
	}
	return n
}

// appendRun appends k words for id x: a head of up to headLen words spelling x in mixed
// radix, least significant digit first (so consecutive ids differ in their first word), then
// filler from a window of the filler table chosen by a hash of x.
func (b *Builder) appendRun(dst []byte, x uint64, first []uint16, domain uint64, k int) []byte {
	t := b.tab
	id := x
	h := min(k, t.headLen)
	d0 := x % uint64(len(first))
	dst = append(dst, t.words[first[d0]]...)
	x /= uint64(len(first))
	nw := uint64(len(t.words))
	for i := 1; i < h; i++ {
		dst = append(dst, t.words[digitWord(x%nw, i, d0^domain, nw)]...)
		x /= nw
	}
	k -= h
	if k == 0 {
		return dst
	}
	total := len(t.fillerOff) - 1
	s := int(fillerStart(id, domain) % uint64(total))
	for k > 0 {
		n := min(k, total-s)
		dst = append(dst, t.filler[t.fillerOff[s]:t.fillerOff[s+n]]...)
		k -= n
		s = 0
	}
	return dst
}

func (b *Builder) runBytes(x uint64, first []uint16, domain uint64, k int) int {
	t := b.tab
	id := x
	h := min(k, t.headLen)
	d0 := x % uint64(len(first))
	n := len(t.words[first[d0]])
	x /= uint64(len(first))
	nw := uint64(len(t.words))
	for i := 1; i < h; i++ {
		n += len(t.words[digitWord(x%nw, i, d0^domain, nw)])
		x /= nw
	}
	k -= h
	if k == 0 {
		return n
	}
	total := len(t.fillerOff) - 1
	s := int(fillerStart(id, domain) % uint64(total))
	if k <= total-s {
		return n + int(t.fillerOff[s+k]-t.fillerOff[s])
	}
	n += int(t.fillerOff[total] - t.fillerOff[s])
	k -= total - s
	full := k / total
	n += full * int(t.fillerOff[total])
	return n + int(t.fillerOff[k%total])
}

// digitWord maps head digit d at position i >= 1 to a word index: d shifted by a hash of the
// position and of key (the first digit xor the domain), modulo n. For a fixed key and i the
// shift is a bijection, so the head still spells the id uniquely; without it small ids would
// read "the the the", since their higher digits are all zero, and block 7 would read like
// request 7 after the first word.
func digitWord(d uint64, i int, key, n uint64) uint64 {
	return (d + mix64(uint64(i)<<48^key)%n) % n
}

// fillerStart picks where in the filler table a run's filler begins: a hash of the seeded id
// and the domain, so neighbouring ids (which share head digits beyond the first) read from
// unrelated windows.
func fillerStart(x, domain uint64) uint64 {
	return mix64(mix64(x) ^ domain)
}

// AppendTokenIDs appends an exactly p.Tokens-long token-id prompt to dst, for completions
// endpoints that accept token ids (vLLM, SGLang). Sharing follows AppendPrompt's rules: block
// b is the same ids in every prompt that has it, a tail is unique to the request, a tail
// never starts like a block, and distinct ids differ in their first HeadTokens ids.
//
// Ids are drawn from [lo, hi) with lo = 1000 and hi = vocabSize - vocabSize/64, keeping clear
// of the low ids where most tokenizers keep their special and control tokens (Mistral's
// Tekken reserves 0..999) and of the top 1/64 of the vocabulary where Llama 3 (128000+) and
// Qwen (151643+) keep theirs. vocabSize must be at least 2048.
func (b *Builder) AppendTokenIDs(dst []int32, p PromptSpec, vocabSize int) ([]int32, error) {
	if err := p.Validate(); err != nil {
		return dst, err
	}
	lo, hi, err := TokenIDRange(vocabSize)
	if err != nil {
		return dst, fmt.Errorf("tokenize: token ids for request %d: %w", p.RequestID, err)
	}
	dst = growInt32(dst, p.Tokens)
	r := idRadix{lo: uint64(lo), n: uint64(hi - lo)}
	r.half = r.n / 2
	r.head = headDigits(r.half, r.n)
	left := p.Tokens
	for _, id := range p.Blocks {
		if left == 0 {
			break
		}
		k := min(left, p.BlockTokens)
		dst = b.appendIDRun(dst, r, uint64(id)+b.seed, 0, domainBlock, k)
		left -= k
	}
	if left > 0 {
		dst = b.appendIDRun(dst, r, uint64(p.RequestID)+b.seed, 1, domainTail, left)
	}
	return dst, nil
}

// TokenIDRange returns the range [lo, hi) AppendTokenIDs draws ids from for vocabSize.
func TokenIDRange(vocabSize int) (lo, hi int, err error) {
	if vocabSize < 2048 {
		return 0, 0, fmt.Errorf("vocab size %d < 2048", vocabSize)
	}
	if vocabSize > 1<<31-1 {
		return 0, 0, fmt.Errorf("vocab size %d does not fit int32", vocabSize)
	}
	return 1000, vocabSize - vocabSize/64, nil
}

type idRadix struct {
	lo, n, half uint64
	head        int
}

func growInt32(dst []int32, n int) []int32 {
	if cap(dst)-len(dst) >= n {
		return dst
	}
	grown := make([]int32, len(dst), len(dst)+n)
	copy(grown, dst)
	return grown
}

// appendIDRun is appendRun for ids: the first id is lo+2d+parity (blocks even, tails odd),
// the next head ids spell the rest of x in base n, then pseudo-random filler ids.
func (b *Builder) appendIDRun(dst []int32, r idRadix, x uint64, parity uint64, domain uint64, k int) []int32 {
	id := x
	h := min(k, r.head)
	d0 := x % r.half
	dst = append(dst, int32(r.lo+2*d0+parity))
	x /= r.half
	for i := 1; i < h; i++ {
		dst = append(dst, int32(r.lo+digitWord(x%r.n, i, d0^domain, r.n)))
		x /= r.n
	}
	k -= h
	rng := splitmixState{s: fillerStart(id, domain)}
	for ; k > 0; k-- {
		// Lemire's multiply-shift maps 32 random bits onto [0, n) without division.
		v := (rng.next() >> 32) * r.n >> 32
		dst = append(dst, int32(r.lo+v))
	}
	return dst
}

// splitmixState is SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, good enough to shuffle.
type splitmixState struct{ s uint64 }

func (r *splitmixState) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix64(r.s)
}

// mix64 is SplitMix64's finaliser, a bijection on uint64 with good avalanche.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Words returns the words every builder prompt is made of, without their leading space,
// in the vocabulary's order. A prompt is a run of them, each preceded by one space: a
// tokenizer that holds every " word" as one token counts a prompt exactly as the builder
// does (the tiny model of the real-engine tests, internal/ollamatest, is made so).
func Words() []string {
	t := loadTable()
	out := make([]string, len(t.words))
	for i, w := range t.words {
		out[i] = w[1:]
	}
	return out
}
