package pooling

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
)

// The shapes follow vLLM's OpenAI-compatible server, read at vllm-project/vllm commit
// 0218148842c7f7757f67908900c49624312cecca (vllm/entrypoints/openai/serving_embedding.py,
// the v0.11 layout) for /v1/embeddings, and at commit
// 59b1164eb5a272bd5620e4dcaced179496261a28 (vllm/entrypoints/pooling/score/serving.py,
// api_router.py and protocol.py) for /rerank, /v1/rerank and /v2/rerank.

// MaxEmbeddingDim bounds a model's embedding size (the largest embedding models' hidden
// sizes are 4,096-8,192).
const MaxEmbeddingDim = 16384

// Error is a request the endpoints refuse: a 400 naming the field, as vLLM answers.
type Error struct{ Param, Msg string }

func bad(param, format string, a ...any) *Error {
	return &Error{Param: param, Msg: fmt.Sprintf(format, a...)}
}

// Input is one input as the engine sees it: its tokens, and the key its vector or
// score is derived from.
type Input struct {
	Tokens int
	Key    uint64
}

// EmbeddingsRequest is vLLM's EmbeddingCompletionRequest (pooling/embed/protocol.py):
// the fields the sim reads. Others are accepted and ignored, as vLLM ignores extra fields.
type EmbeddingsRequest struct {
	Model                *string         `json:"model"`
	Input                json.RawMessage `json:"input"`
	EncodingFormat       *string         `json:"encoding_format"`
	Dimensions           *int            `json:"dimensions"`
	Messages             json.RawMessage `json:"messages"`
	TruncatePromptTokens *int            `json:"truncate_prompt_tokens"`
}

// Options checks the request's fields other than input and returns whether the
// vectors go as base64 and their length. vLLM takes dimensions only from a Matryoshka
// model (PoolingParams.verify); the sim's are (as Qwen3-Embedding is): the vector is the
// first dimensions components of the full one, normalized again, and, like vLLM's
// slice, a value over the model's size gives the full vector.
func (r *EmbeddingsRequest) Options(fullDim, maxModelLen int) (b64 bool, dims int, err *Error) {
	if len(r.Messages) > 0 && string(r.Messages) != "null" {
		return false, 0, bad("messages", "the sim's /v1/embeddings takes input, not messages (vLLM's chat-style embedding request is not simulated)")
	}
	if r.TruncatePromptTokens != nil {
		return false, 0, bad("truncate_prompt_tokens", "truncate_prompt_tokens is not simulated: send inputs within max_model_len (%d tokens)", maxModelLen)
	}
	if f := r.EncodingFormat; f != nil {
		switch *f {
		case "float":
		case "base64":
			b64 = true
		default:
			return false, 0, bad("encoding_format", "encoding_format %q: want float or base64", *f)
		}
	}
	dims = fullDim
	if d := r.Dimensions; d != nil {
		if *d < 1 {
			return false, 0, bad("dimensions", "Dimensions must be greater than 0")
		}
		dims = min(*d, dims)
	}
	return b64, dims, nil
}

// ParseInput reads input in the forms vLLM's EmbeddingCompletionRequest takes: a string,
// a list of strings, a list of token ids (one input) or a list of such lists. Token ids
// must be in [0, vocab).
func ParseInput(raw json.RawMessage, vocab int) (texts []string, ids [][]int, err *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, bad("input", "input is required: a string, a list of strings, a list of token ids or a list of token-id lists")
	}
	switch raw[0] {
	case '"':
		var t string
		if e := json.Unmarshal(raw, &t); e != nil {
			return nil, nil, bad("input", "input: %v", e)
		}
		return []string{t}, nil, nil
	case '[':
		var items []json.RawMessage
		if e := json.Unmarshal(raw, &items); e != nil {
			return nil, nil, bad("input", "input: %v", e)
		}
		if len(items) == 0 {
			return nil, nil, bad("input", "please provide at least one prompt") // vLLM's prompt parser
		}
		if texts, ids, err = parseList(items); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, bad("input", "input must be a string, a list of strings, a list of token ids or a list of token-id lists, not %s", kind(raw))
	}
	for _, l := range ids {
		for _, id := range l {
			if id < 0 || id >= vocab {
				return nil, nil, bad("input", "token id %d out of range [0, %d)", id, vocab)
			}
		}
	}
	return texts, ids, nil
}

// parseList reads a non-empty JSON list as strings, token ids (one input) or lists of
// token ids; mixing them is refused, as vLLM's request model refuses it.
func parseList(items []json.RawMessage) (texts []string, ids [][]int, err *Error) {
	wrong := bad("input", "input must be a string, a list of strings, a list of token ids or a list of token-id lists, all of one kind")
	switch first := bytes.TrimSpace(items[0]); {
	case len(first) > 0 && first[0] == '"':
		texts = make([]string, len(items))
		for i, it := range items {
			if e := json.Unmarshal(it, &texts[i]); e != nil || bytes.TrimSpace(it)[0] != '"' {
				return nil, nil, wrong
			}
		}
	case len(first) > 0 && first[0] == '[':
		ids = make([][]int, len(items))
		for i, it := range items {
			if e := json.Unmarshal(it, &ids[i]); e != nil || ids[i] == nil {
				return nil, nil, wrong
			}
		}
	default:
		one := make([]int, len(items))
		for i, it := range items {
			// A null would read as 0: only numbers are token ids.
			if it = bytes.TrimSpace(it); len(it) == 0 || (it[0] != '-' && (it[0] < '0' || it[0] > '9')) || json.Unmarshal(it, &one[i]) != nil {
				return nil, nil, wrong
			}
		}
		ids = [][]int{one}
	}
	return texts, ids, nil
}

// kind names a JSON value's kind for an error message.
func kind(raw []byte) string {
	switch raw[0] {
	case '{':
		return "an object"
	case 't', 'f':
		return "a boolean"
	}
	return fmt.Sprintf("a number (%.20s)", raw)
}

// CheckLen refuses input i of n tokens when it is empty or over maxLen, with vLLM's
// messages (the v1 processor's for an empty prompt; _validate_input's for a long one,
// whose operation names the endpoint: "embedding generation", "score").
func CheckLen(param string, i, n, maxLen int, operation string) *Error {
	if n == 0 {
		return bad(param, "The decoder prompt cannot be empty (input %d has no tokens)", i)
	}
	if n > maxLen {
		return bad(param, "This model's maximum context length is %d tokens. However, you requested %d tokens in the input for %s. Please reduce the length of the input.", maxLen, n, operation)
	}
	return nil
}

// EmbeddingsSize is room enough for the response of n inputs of dims components as
// floats (a float32's shortest form, its sign and a comma take at most 16 bytes; base64
// takes under 6), so that building it does not grow the buffer.
func EmbeddingsSize(n, dims int) int { return 160 + n*(dims*16+64) }

// AppendEmbeddings appends vLLM's EmbeddingResponse for the inputs:
// {"id":"embd-…","object":"list","created","model","data":[{"index","object":"embedding",
// "embedding"}],"usage":{"prompt_tokens","total_tokens","completion_tokens":0,
// "prompt_tokens_details":null}} (vLLM's UsageInfo). model is the model name as JSON.
func AppendEmbeddings(b []byte, id uint64, created int64, model []byte, inputs []Input, fullDim, dims int, b64 bool) []byte {
	b = append(b, `{"id":"embd-`...)
	b = strconv.AppendUint(b, id, 16)
	b = append(b, `","object":"list","created":`...)
	b = strconv.AppendInt(b, created, 10)
	b = append(b, `,"model":`...)
	b = append(b, model...)
	b = append(b, `,"data":[`...)
	vec := make([]float32, fullDim)
	total := 0
	for i, in := range inputs {
		total += in.Tokens
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"object":"embedding","embedding":`...)
		b = AppendVector(b, Vector(vec, in.Key, dims), b64)
		b = append(b, '}')
	}
	b = append(b, `],"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(total), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(total), 10)
	return append(b, `,"completion_tokens":0,"prompt_tokens_details":null}}`...)
}

// RerankRequest is vLLM's RerankRequest (pooling/score/protocol.py): the fields the sim
// reads.
type RerankRequest struct {
	Model     *string         `json:"model"`
	Query     json.RawMessage `json:"query"`
	Documents json.RawMessage `json:"documents"`
	TopN      *int            `json:"top_n"`
}

// Parse returns the query and the documents, refusing what vLLM refuses.
func (r *RerankRequest) Parse() (query string, docs []string, err *Error) {
	q := bytes.TrimSpace(r.Query)
	if len(q) == 0 || q[0] != '"' || json.Unmarshal(q, &query) != nil {
		return "", nil, bad("query", "query is required and must be a string")
	}
	var ptrs []*string // a null document would read as ""
	if json.Unmarshal(r.Documents, &ptrs) != nil || ptrs == nil || slices.Contains(ptrs, nil) {
		return "", nil, bad("documents", "documents is required and must be a list of strings")
	}
	docs = make([]string, len(ptrs))
	for i, p := range ptrs {
		docs[i] = *p
	}
	if len(docs) == 0 {
		// vLLM's _validate_score_input_lens (score/utils.py).
		return "", nil, bad("documents", "At least one text_pair element must be given")
	}
	return query, docs, nil
}

// AppendRerank appends vLLM's RerankResponse: {"id":"rerank-…","model","usage":
// {"prompt_tokens","total_tokens"},"results":[{"index","document":{"text",
// "multi_modal":null},"relevance_score"}]}, the documents sorted by score (highest first,
// ties in document order, as Python's stable sort leaves them) and cut to top_n when
// 0 < top_n < the documents. inputs are the (query, document) pairs; usage sums them all.
func AppendRerank(b []byte, id uint64, model []byte, docs []string, inputs []Input, topN int) []byte {
	order := make([]int, len(docs))
	total := 0
	for i := range order {
		order[i] = i
		total += inputs[i].Tokens
	}
	slices.SortStableFunc(order, func(x, y int) int {
		sx, sy := Score(inputs[x].Key), Score(inputs[y].Key)
		switch {
		case sx > sy:
			return -1
		case sx < sy:
			return 1
		}
		return 0
	})
	if topN > 0 && topN < len(docs) {
		order = order[:topN]
	}
	b = append(b, `{"id":"rerank-`...)
	b = strconv.AppendUint(b, id, 16)
	b = append(b, `","model":`...)
	b = append(b, model...)
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(total), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(total), 10)
	b = append(b, `},"results":[`...)
	for k, i := range order {
		if k > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"document":{"text":`...)
		t, _ := json.Marshal(docs[i])
		b = append(b, t...)
		b = append(b, `,"multi_modal":null},"relevance_score":`...)
		b = strconv.AppendFloat(b, Score(inputs[i].Key), 'g', -1, 64)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// HashText and HashIDs key an input: FNV-1a of its bytes, or of its ids as little-endian
// uint32s, so the same input has the same vector in every process.
func HashText(t string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(t))
	return mix(h.Sum64())
}

// HashIDs keys a token-id input (never equal to a text's key of the same bytes).
func HashIDs(ids []int) uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, id := range ids {
		binary.LittleEndian.PutUint32(b[:], uint32(id))
		h.Write(b[:])
	}
	return mix(h.Sum64() ^ 0x9e3779b97f4a7c15)
}

// PairKey keys a (query, document) pair from their keys.
func PairKey(query, doc uint64) uint64 { return mix(query ^ mix(doc)) }

// mix is splitmix64's finalizer.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Vector fills vec (the model's full size) with standard normals drawn from a generator
// seeded by key and returns its first dims components scaled to unit L2 norm (in
// float64, then rounded to float32): a direction uniform on the sphere, deterministic
// from the input.
func Vector(vec []float32, key uint64, dims int) []float32 {
	rng := rand.New(rand.NewPCG(key, 0x853c49e6748fea9b))
	raw := make([]float64, dims)
	var sum float64
	for i := range vec {
		x := rng.NormFloat64()
		if i < dims {
			raw[i] = x
			sum += x * x
		}
	}
	inv := 1 / math.Sqrt(sum)
	for i := range dims {
		vec[i] = float32(raw[i] * inv)
	}
	return vec[:dims]
}

// AppendVector appends v as a JSON list of floats (each the shortest decimal that reads
// back as the same float32), or with b64 as a JSON string of its little-endian float32
// bytes in standard base64: what vLLM sends for encoding_format base64 with its defaults
// (embed_dtype float32, endianness native, little-endian on its platforms) and what the
// OpenAI client decodes.
func AppendVector(b []byte, v []float32, b64 bool) []byte {
	if b64 {
		raw := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(x))
		}
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, raw)
		return append(b, '"')
	}
	b = append(b, '[')
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, float64(x), 'g', -1, 32)
	}
	return append(b, ']')
}

// Score is a pair's relevance score in [0, 1): uniform, from the pair's key.
func Score(key uint64) float64 {
	return float64(mix(key^0x2545f4914f6cdd1d)>>11) / (1 << 53)
}
