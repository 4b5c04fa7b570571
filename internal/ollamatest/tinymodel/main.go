// Command tinymodel writes the tiny llama model that llmreplay's real-engine tests serve
// with Ollama: a GGUF file whose weights are made, not trained, so that what the engine
// does with a prompt is known exactly (docs/engines.md).
//
//   - Its tokenizer is byte-level BPE whose vocabulary holds every word of the given list,
//     with its leading space, as one token: a prompt of llmreplay's builder (a run of those
//     words) is exactly as many tokens to the engine as to the builder, plus BOS.
//   - Greedy decoding walks one cycle through all the words: the next token is a function
//     of the current one only, the cycle's successor. So the model never chooses EOS, never
//     repeats a token (Ollama ends a stream silently when one token comes 31 times), and
//     generates exactly max_tokens tokens, one word, one chunk, each.
//   - The layers are real (attention, SwiGLU, RMSNorm, RoPE): the engine does the work of a
//     llama model of this shape, but their outputs are scaled so small that they never
//     change the argmax (the margin is checked before the file is written).
//
// It is a module of its own so that llmreplay's go.mod does not depend on Ollama; it uses
// Ollama's fs/ggml to write the file, at the version the tests build the engine from.
//
// Usage: go run . -words words.txt -o tiny.gguf
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/ollama/ollama/fs/ggml"
)

// The model's shape: small enough that a CPU serves it at hundreds of tokens a second per
// sequence, large enough that its work is a llama model's (four heads, two layers).
const (
	embd     = 64
	heads    = 4
	headDim  = embd / heads
	contextN = 16384
	// beta scales the output rows: the successor's logit is beta*sqrt(embd) (8*beta).
	beta = 4.0
	// layerScale is the size of the layers' output weights, whose contribution to the
	// residual stream must stay far below the logits' margin.
	layerScale = 1e-3
	// maxCos bounds the cosine between two distinct token classes' embeddings: the
	// successor's logit beats every other by at least 8*beta*(1-maxCos).
	maxCos = 0.8
)

// The layers and the feed-forward width are flags: the default model is small enough that
// its work is the engine's overhead; a wider one makes a decode step read more weights than
// the caches hold, so that, as on a GPU, a step of two sequences costs about one's.
var layers, ffn int

func main() {
	words := flag.String("words", "", "file of the vocabulary's words, one per line (lowercase ASCII letters)")
	out := flag.String("o", "tiny.gguf", "GGUF file to write")
	seed := flag.Uint64("seed", 1, "seed of the weights")
	flag.IntVar(&layers, "layers", 2, "transformer blocks")
	flag.IntVar(&ffn, "ffn", 128, "feed-forward width: its weights are most of a larger model's bytes, which a decode step reads whole")
	flag.Parse()
	if err := run(*words, *out, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "tinymodel:", err)
		os.Exit(1)
	}
}

func run(wordsPath, out string, seed uint64) error {
	if wordsPath == "" {
		return errors.New("-words is required")
	}
	words, err := readWords(wordsPath)
	if err != nil {
		return err
	}
	v := newVocab(words)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	m, err := newWeights(v, rng)
	if err != nil {
		return err
	}
	if err := m.check(v); err != nil {
		return err
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	err = ggml.WriteGGUF(f, v.kv(), m.tensors())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", out, err)
	}
	return os.Rename(tmp, out)
}

func readWords(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var words []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		w := strings.TrimSpace(sc.Text())
		if w == "" {
			continue
		}
		if strings.Trim(w, "abcdefghijklmnopqrstuvwxyz") != "" {
			return nil, fmt.Errorf("%s line %d: %q is not lowercase ASCII letters", path, line, w)
		}
		if !seen[w] {
			seen[w] = true
			words = append(words, w)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(words) < 2 {
		return nil, fmt.Errorf("%s: %d words; need at least 2", path, len(words))
	}
	return words, nil
}

// vocab is the tokenizer: the 256 byte tokens of byte-level BPE, then every prefix of
// every " word" (so that BPE can build each word by merges anchored at its space), then
// BOS and EOS. Every merge's left side starts with the space (Ġ), and a pre-tokenized
// piece holds one space at its start, so the only merge BPE can ever apply to " word" is
// the next letter onto the token that holds the space: each word ends as one token.
type vocab struct {
	tokens   []string
	types    []int32
	merges   []string
	wordIDs  []int32 // the token of each " word", in the list's order
	bos, eos int32
}

func newVocab(words []string) *vocab {
	v := &vocab{}
	id := map[string]int32{}
	add := func(tok string, typ int32) int32 {
		if i, ok := id[tok]; ok {
			return i
		}
		i := int32(len(v.tokens))
		id[tok] = i
		v.tokens = append(v.tokens, tok)
		v.types = append(v.types, typ)
		return i
	}
	for b := range 256 {
		add(string(byteRune[b]), 1)
	}
	space := string(byteRune[' '])
	for _, w := range words {
		prev := space
		for i := range len(w) {
			tok := space + w[:i+1]
			if _, ok := id[tok]; !ok {
				v.merges = append(v.merges, prev+" "+string(w[i]))
			}
			add(tok, 1)
			prev = tok
		}
		v.wordIDs = append(v.wordIDs, id[space+w])
	}
	v.bos = add("<s>", 3)
	v.eos = add("</s>", 3)
	return v
}

func (v *vocab) kv() ggml.KV {
	return ggml.KV{
		"general.architecture":                   "llama",
		"general.name":                           "llmreplay-tiny",
		"general.file_type":                      uint32(0), // all F32
		"llama.block_count":                      uint32(layers),
		"llama.context_length":                   uint32(contextN),
		"llama.embedding_length":                 uint32(embd),
		"llama.feed_forward_length":              uint32(ffn),
		"llama.attention.head_count":             uint32(heads),
		"llama.attention.head_count_kv":          uint32(heads),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
		"llama.rope.dimension_count":             uint32(headDim),
		"llama.rope.freq_base":                   float32(10000),
		"llama.vocab_size":                       uint32(len(v.tokens)),
		"tokenizer.ggml.model":                   "gpt2",
		"tokenizer.ggml.pre":                     "default",
		"tokenizer.ggml.tokens":                  v.tokens,
		"tokenizer.ggml.token_type":              v.types,
		"tokenizer.ggml.merges":                  v.merges,
		"tokenizer.ggml.bos_token_id":            uint32(v.bos),
		"tokenizer.ggml.eos_token_id":            uint32(v.eos),
		"tokenizer.ggml.add_bos_token":           true,
		"tokenizer.ggml.add_eos_token":           false,
	}
}

// byteRune is GPT-2's byte-to-unicode map, which byte-level BPE vocabularies are written in.
var byteRune = func() (m [256]rune) {
	var printable []int
	for b := '!'; b <= '~'; b++ {
		printable = append(printable, int(b))
	}
	for b := '¡'; b <= '¬'; b++ {
		printable = append(printable, int(b))
	}
	for b := '®'; b <= 'ÿ'; b++ {
		printable = append(printable, int(b))
	}
	n := 0
	for b := range 256 {
		if slices.Contains(printable, b) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}()

// weights are the model's tensors, row-major with the input dimension fastest (GGUF's
// order: a matrix of shape [in, out] is out rows of in floats).
type weights struct {
	n      int // vocabulary size
	embed  []float32
	output []float32
	class  []int32 // each token's embedding class (its row of embeds)
	embeds [][]float32
	succ   []int32 // the successor of each class
	ts     []*ggml.Tensor
}

// newWeights makes the embeddings and the output matrix. The words form one cycle
// w0 -> w1 -> ... -> w(n-1) -> w0 in a random order; every token that is not a word (the
// bytes, the words' prefixes, BOS, EOS) shares the embedding of the cycle's last word, so
// that a prompt ending in any of them goes on with the cycle's first word. Embedding
// classes are unit vectors at most maxCos apart; the output row of a word is beta times
// its predecessor's embedding.
func newWeights(v *vocab, rng *rand.Rand) (*weights, error) {
	n := len(v.tokens)
	order := slices.Clone(v.wordIDs)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	k := len(order) // classes: one per word, the last word's shared with every non-word
	embeds := make([][]float32, k)
	for c := range k {
		for tries := 0; ; tries++ {
			if tries == 10000 {
				return nil, fmt.Errorf("no embedding within cosine %.2f of the others after %d tries: too many words for %d dimensions", maxCos, tries, embd)
			}
			e := unit(rng)
			if !tooClose(e, embeds[:c]) {
				embeds[c] = e
				break
			}
		}
	}
	w := &weights{n: n, embeds: embeds, class: make([]int32, n), succ: make([]int32, k)}
	for t := range w.class {
		w.class[t] = int32(k - 1)
	}
	for c, t := range order {
		w.class[t] = int32(c)
		w.succ[c] = order[(c+1)%k]
	}
	w.embed = make([]float32, n*embd)
	for t := range n {
		copy(w.embed[t*embd:], embeds[w.class[t]])
	}
	w.output = make([]float32, n*embd)
	for c := range k {
		row := w.output[int(w.succ[c])*embd:]
		for i, x := range embeds[c] {
			row[i] = beta * x
		}
	}
	w.ts = append(w.ts,
		f32("token_embd.weight", w.embed, embd, n),
		f32("output.weight", w.output, embd, n),
		f32("output_norm.weight", ones(embd), embd))
	for l := range layers {
		p := fmt.Sprintf("blk.%d.", l)
		w.ts = append(w.ts,
			f32(p+"attn_norm.weight", ones(embd), embd),
			f32(p+"ffn_norm.weight", ones(embd), embd),
			f32(p+"attn_q.weight", gauss(rng, embd*embd, 1/math.Sqrt(embd)), embd, embd),
			f32(p+"attn_k.weight", gauss(rng, embd*embd, 1/math.Sqrt(embd)), embd, embd),
			f32(p+"attn_v.weight", gauss(rng, embd*embd, 1/math.Sqrt(embd)), embd, embd),
			f32(p+"attn_output.weight", gauss(rng, embd*embd, layerScale), embd, embd),
			f32(p+"ffn_gate.weight", gauss(rng, embd*ffn, 1/math.Sqrt(embd)), embd, ffn),
			f32(p+"ffn_up.weight", gauss(rng, embd*ffn, 1/math.Sqrt(embd)), embd, ffn),
			f32(p+"ffn_down.weight", gauss(rng, ffn*embd, layerScale), ffn, embd))
	}
	return w, nil
}

// check proves the greedy walk: from every class the successor's logit beats every other
// token's by a margin far above what the layers can add. With RMSNorm's weights at one, a
// unit embedding enters the output as sqrt(embd) times itself.
func (w *weights) check(v *vocab) error {
	worst := math.Inf(1)
	for c, e := range w.embeds {
		want := w.succ[c]
		best := float64(0)
		for t := range w.n {
			if int32(t) == want {
				continue
			}
			best = max(best, dot(w.output[t*embd:(t+1)*embd], e))
		}
		margin := (dot(w.output[int(want)*embd:(int(want)+1)*embd], e) - best) * math.Sqrt(embd)
		worst = min(worst, margin)
	}
	if worst < 4 {
		return fmt.Errorf("the successor's logit margin is %.2f; want at least 4", worst)
	}
	if w.succ[len(w.succ)-1] == v.eos || slices.Contains(w.succ, v.eos) {
		return errors.New("EOS is a successor")
	}
	return nil
}

func (w *weights) tensors() []*ggml.Tensor { return w.ts }

func unit(rng *rand.Rand) []float32 {
	e := make([]float32, embd)
	var s float64
	for i := range e {
		x := rng.NormFloat64()
		e[i] = float32(x)
		s += x * x
	}
	s = math.Sqrt(s)
	for i := range e {
		e[i] /= float32(s)
	}
	return e
}

func tooClose(e []float32, others [][]float32) bool {
	for _, o := range others {
		if dot(e, o) > maxCos {
			return true
		}
	}
	return false
}

func dot(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func ones(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 1
	}
	return x
}

func gauss(rng *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * scale)
	}
	return x
}

// f32 is an F32 tensor of the given shape (input dimension first).
func f32(name string, data []float32, shape ...int) *ggml.Tensor {
	s := make([]uint64, len(shape))
	for i, d := range shape {
		s[i] = uint64(d)
	}
	return &ggml.Tensor{Name: name, Kind: 0, Shape: s, WriterTo: floats(data)}
}

type floats []float32

func (f floats) WriteTo(w io.Writer) (int64, error) {
	b := make([]byte, 4*len(f))
	for i, x := range f {
		u := math.Float32bits(x)
		b[4*i], b[4*i+1], b[4*i+2], b[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	n, err := w.Write(b)
	return int64(n), err
}
