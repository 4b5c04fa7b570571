package wire

import (
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// Chunk is what one event of an OpenAI-compatible stream says: its deltas (text,
// reasoning, tool calls), whether a choice finished, the usage and a server error. A
// client keeps one Chunk per stream and decodes every event into it: the slices keep
// their room, so decoding the common chunk allocates nothing.
type Chunk struct {
	Output    bool // a choice carries text, content, reasoning or tool calls
	Finished  bool // a choice has a finish_reason
	HasCached bool
	// Cached is usage.prompt_tokens_details.cached_tokens, when HasCached (here, in
	// padding: the struct, reset per chunk, keeps its size).
	Cached  int32
	Choices int // len(choices)
	// Text is the chunk's generated text, appended over its choices: text, content and
	// reasoning alike, since all of it is generated tokens to count.
	Text             []byte
	Usage            bool  // a non-null usage object
	PromptTokens     int32 // usage.prompt_tokens, when HasPrompt
	CompletionTokens int32 // usage.completion_tokens, when HasCompletion
	HasPrompt        bool
	HasCompletion    bool
	ErrorMessage     string // a server error carried by the chunk, when IsError
	IsError          bool
	// Reasoning is the part of Text that came as reasoning deltas (delta.reasoning_content,
	// as vLLM and SGLang name it, or delta.reasoning).
	Reasoning []byte
	// ToolCalls are the chunk's tool-call deltas (delta.tool_calls), in order.
	ToolCalls []ToolCallDelta
	// Answer: the chunk carries answer output, not only reasoning: text, content or a
	// tool call. The first such chunk is the answer's first token (TTFA).
	Answer bool
	// ReasoningTokens is usage.completion_tokens_details.reasoning_tokens (the Responses
	// API's usage.output_tokens_details.reasoning_tokens), when HasReasoningTokens: the part
	// of the output tokens that was reasoning.
	ReasoningTokens    int32
	HasReasoningTokens bool
}

// ToolCallDelta is one element of a chunk's delta.tool_calls: a piece of the call at
// Index. The first piece of a call names it (ID, Type, Name); later ones add Arguments.
type ToolCallDelta struct {
	Index     int
	ID        string
	Type      string
	Name      string
	Arguments string
}

// errFallback makes DecodeChunk hand a chunk to encoding/json: anything unusual (an
// error object, escapes in keys, duplicate keys, a type surprise, tool calls, invalid
// JSON) goes the slow, exact way, so the fast path never disagrees with it
// (FuzzDecodeChunk checks).
var errFallback = errors.New("fallback")

// DecodeChunk decodes a stream chunk into ci, with a hand-written scanner for the common
// shape and encoding/json for the rest. It returns an error only for a malformed chunk.
func DecodeChunk(data []byte, ci *Chunk) error {
	ci.reset()
	p := chunkParser{b: data}
	if err := p.chunk(ci); err == nil {
		return nil
	}
	ci.reset()
	return decodeChunkJSON(data, ci)
}

// reset empties ci, keeping its slices' room. Field by field rather than by assigning a
// Chunk: x = x[:0] writes only a length, where a struct assignment rewrites every slice's
// pointer (with the garbage collector's write barrier) on every chunk. TestChunkReset
// fails when a field is added and not reset here.
func (ci *Chunk) reset() {
	ci.Text, ci.Reasoning, ci.ToolCalls = ci.Text[:0], ci.Reasoning[:0], ci.ToolCalls[:0]
	ci.Output, ci.Finished, ci.HasCached, ci.Cached, ci.Choices = false, false, false, 0, 0
	ci.Usage, ci.PromptTokens, ci.CompletionTokens, ci.HasPrompt, ci.HasCompletion = false, 0, 0, false, false
	ci.Answer, ci.ReasoningTokens, ci.HasReasoningTokens = false, 0, false
	if ci.ErrorMessage != "" {
		ci.ErrorMessage = ""
	}
	ci.IsError = false
}

// decodeChunkJSON is the exact, slower path: encoding/json into chunkJSON.
func decodeChunkJSON(data []byte, ci *Chunk) error {
	var ch chunkJSON
	if err := json.Unmarshal(data, &ch); err != nil {
		return err
	}
	if msg, ok := ch.errorMessage(); ok {
		ci.IsError, ci.ErrorMessage = true, msg
		return nil
	}
	ci.Choices = len(ch.Choices)
	for i := range ch.Choices {
		cc := &ch.Choices[i]
		ci.choice(cc.Text, &cc.Delta, cc.FinishReason)
	}
	if ch.Usage != nil {
		ch.Usage.set(ci)
	}
	return nil
}

// choice takes one choice of a chunk or an answer: its text (completions) and what it
// generated (chat's delta or message).
func (ci *Chunk) choice(text string, d *openAIDelta, finishReason *string) {
	tools := hasToolCalls(d.ToolCalls)
	if text != "" || d.Content != "" || d.ReasoningContent != "" || d.Reasoning != "" || tools {
		ci.Output = true
		ci.Text = append(ci.Text, text...)
		ci.Text = append(ci.Text, d.Content...)
		ci.Text = append(ci.Text, d.ReasoningContent...)
		ci.Text = append(ci.Text, d.Reasoning...)
		ci.Reasoning = append(ci.Reasoning, d.ReasoningContent...)
		ci.Reasoning = append(ci.Reasoning, d.Reasoning...)
		ci.ToolCalls = appendToolCalls(ci.ToolCalls, d.ToolCalls)
		ci.Answer = ci.Answer || text != "" || d.Content != "" || tools
	}
	if finishReason != nil && *finishReason != "" {
		ci.Finished = true
	}
}

// hasToolCalls reports whether a delta.tool_calls value holds calls: neither absent, null
// nor empty.
func hasToolCalls(raw json.RawMessage) bool {
	return len(raw) > 0 && string(raw) != "null" && string(raw) != "[]"
}

// appendToolCalls appends the tool-call deltas of a delta.tool_calls value. A value that
// is not a list of call objects (a server's own shape) adds none: the chunk still counts
// as output, as it did before tool calls were decoded.
func appendToolCalls(dst []ToolCallDelta, raw json.RawMessage) []ToolCallDelta {
	if len(raw) == 0 || string(raw) == "null" {
		return dst
	}
	var calls []struct {
		Index    *int   `json:"index"`
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function *struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &calls) != nil {
		return dst
	}
	for i, c := range calls {
		d := ToolCallDelta{Index: i, ID: c.ID, Type: c.Type}
		if c.Index != nil {
			d.Index = *c.Index
		}
		if c.Function != nil {
			d.Name, d.Arguments = c.Function.Name, c.Function.Arguments
		}
		dst = append(dst, d)
	}
	return dst
}

// chunkParser is a strict JSON scanner over one chunk; every value it skips is validated.
type chunkParser struct {
	b []byte
	i int
}

func (p *chunkParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *chunkParser) peek() byte {
	p.ws()
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *chunkParser) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// null consumes a null literal if one is next.
func (p *chunkParser) null() bool { return p.peek() == 'n' && p.lit("null") }

// str scans a string; raw is its content, esc whether it has escapes.
func (p *chunkParser) str() (raw []byte, esc bool, err error) {
	if p.peek() != '"' {
		return nil, false, errFallback
	}
	p.i++
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		if strPlain[c] {
			p.i++
			continue
		}
		switch {
		case c == '"':
			raw = p.b[start:p.i]
			p.i++
			return raw, esc, nil
		case c == '\\':
			esc = true
			if p.i+1 >= len(p.b) {
				return nil, false, errFallback
			}
			switch p.b[p.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				p.i += 2
			case 'u':
				if p.i+6 > len(p.b) {
					return nil, false, errFallback
				}
				for _, h := range p.b[p.i+2 : p.i+6] {
					if !isHex(h) {
						return nil, false, errFallback
					}
				}
				p.i += 6
			default:
				return nil, false, errFallback
			}
		case c < 0x20:
			return nil, false, errFallback
		default:
			p.i++
		}
	}
	return nil, false, errFallback
}

// strPlain[c] reports whether the byte c continues a string's content with nothing to
// decide: not a quote, a backslash or a control byte. The table makes the scan of a
// chunk's text one load and one branch a byte (str is a third of a chunk's decoding).
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// appendStr appends the decoded content of a string scanned by str.
func appendStr(dst, raw []byte, esc bool) ([]byte, error) {
	if !esc {
		if !utf8.Valid(raw) {
			return dst, errFallback // encoding/json replaces invalid bytes: let it
		}
		return append(dst, raw...), nil
	}
	var s string
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	if err := json.Unmarshal(q, &s); err != nil {
		return dst, errFallback
	}
	return append(dst, s...), nil
}

// strOrNull scans a string or null into dst (null leaves dst unchanged).
func (p *chunkParser) strOrNull(dst []byte) ([]byte, bool, error) {
	if p.null() {
		return dst, false, nil
	}
	raw, esc, err := p.str()
	if err != nil {
		return dst, false, err
	}
	n := len(dst)
	dst, err = appendStr(dst, raw, esc)
	return dst, len(dst) > n, err
}

// key scans an object key; keys that encoding/json could match case-insensitively to a
// field (upper case, escapes, non-ASCII) fall back.
func (p *chunkParser) key() ([]byte, error) {
	raw, esc, err := p.str()
	if err != nil || esc {
		return nil, errFallback
	}
	for _, c := range raw {
		if c >= 'A' && c <= 'Z' || c >= utf8.RuneSelf {
			return nil, errFallback
		}
	}
	p.ws()
	if p.i >= len(p.b) || p.b[p.i] != ':' {
		return nil, errFallback
	}
	p.i++
	return raw, nil
}

// object calls field for each key of an object; field must consume the value.
func (p *chunkParser) object(field func(k []byte) error) error {
	if p.peek() != '{' {
		return errFallback
	}
	p.i++
	if p.peek() == '}' {
		p.i++
		return nil
	}
	for {
		k, err := p.key()
		if err != nil {
			return err
		}
		if err := field(k); err != nil {
			return err
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return nil
		default:
			return errFallback
		}
	}
}

// skip scans and validates any value.
func (p *chunkParser) skip(depth int) error {
	if depth > 64 {
		return errFallback
	}
	switch c := p.peek(); {
	case c == '{':
		return p.object(func([]byte) error { return p.skip(depth + 1) })
	case c == '[':
		return p.array(func() error { return p.skip(depth + 1) })
	case c == '"':
		_, _, err := p.str()
		return err
	case c == 't':
		return p.must(p.lit("true"))
	case c == 'f':
		return p.must(p.lit("false"))
	case c == 'n':
		return p.must(p.lit("null"))
	case c == '-' || c >= '0' && c <= '9':
		_, err := p.number()
		return err
	}
	return errFallback
}

func (p *chunkParser) must(ok bool) error {
	if !ok {
		return errFallback
	}
	return nil
}

func (p *chunkParser) array(elem func() error) error {
	if p.peek() != '[' {
		return errFallback
	}
	p.i++
	if p.peek() == ']' {
		p.i++
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return nil
		default:
			return errFallback
		}
	}
}

// number scans a JSON number by its grammar and returns its text.
func (p *chunkParser) number() ([]byte, error) {
	p.ws()
	s := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return nil, errFallback
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return nil, errFallback
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, errFallback
		}
	}
	return p.b[s:p.i], nil
}

// int32OrNull scans an integer that fits int32, or null.
func (p *chunkParser) int32OrNull() (int32, bool, error) {
	if p.null() {
		return 0, false, nil
	}
	t, err := p.number()
	if err != nil {
		return 0, false, err
	}
	v, err := strconv.ParseInt(string(t), 10, 32)
	if err != nil {
		return 0, false, errFallback
	}
	return int32(v), true, nil
}

// seen guards against duplicate keys (encoding/json merges them in ways not worth copying).
type seen uint32

func (s *seen) first(bit uint) error {
	if *s&(1<<bit) != 0 {
		return errFallback
	}
	*s |= 1 << bit
	return nil
}

func (p *chunkParser) chunk(ci *Chunk) error {
	var top seen
	err := p.object(func(k []byte) error {
		switch string(k) {
		case "object":
			if err := top.first(0); err != nil {
				return err
			}
			raw, esc, err := p.str()
			if err != nil || esc || string(raw) == "error" {
				return errFallback // error objects take the exact path
			}
			return nil
		case "message":
			if err := top.first(1); err != nil {
				return err
			}
			if p.null() {
				return nil
			}
			_, _, err := p.str()
			return err
		case "error":
			if !p.null() {
				return errFallback
			}
			return top.first(2)
		case "choices":
			if err := top.first(3); err != nil {
				return err
			}
			if p.null() {
				return nil
			}
			return p.array(func() error {
				ci.Choices++
				return p.choice(ci)
			})
		case "usage":
			if err := top.first(4); err != nil {
				return err
			}
			if p.null() {
				return nil
			}
			ci.Usage = true
			var us seen
			return p.object(func(k []byte) error {
				var err error
				switch string(k) {
				case "prompt_tokens":
					if err = us.first(0); err == nil {
						ci.PromptTokens, ci.HasPrompt, err = p.int32OrNull()
					}
				case "completion_tokens":
					if err = us.first(1); err == nil {
						ci.CompletionTokens, ci.HasCompletion, err = p.int32OrNull()
					}
				case "prompt_tokens_details":
					if err = us.first(2); err == nil {
						err = p.promptDetails(ci)
					}
				case "completion_tokens_details":
					if err = us.first(3); err == nil {
						err = p.completionDetails(ci)
					}
				default:
					err = p.skip(1)
				}
				return err
			})
		default:
			return p.skip(1)
		}
	})
	if err != nil {
		return err
	}
	p.ws()
	if p.i != len(p.b) {
		return errFallback
	}
	return nil
}

// promptDetails scans usage.prompt_tokens_details (null, or an object whose cached_tokens
// is taken). A method of its own, out of the usage closure: the closures of the per-chunk
// path stay as they were, and so does their cost (BenchmarkReadStream).
func (p *chunkParser) promptDetails(ci *Chunk) error {
	if p.null() {
		return nil
	}
	var ds seen
	return p.object(func(k []byte) error {
		if string(k) != "cached_tokens" {
			return p.skip(3)
		}
		if err := ds.first(0); err != nil {
			return err
		}
		var err error
		ci.Cached, ci.HasCached, err = p.int32OrNull()
		return err
	})
}

// completionDetails scans usage.completion_tokens_details (null, or an object whose
// reasoning_tokens is taken), as promptDetails does its details.
func (p *chunkParser) completionDetails(ci *Chunk) error {
	if p.null() {
		return nil
	}
	var ds seen
	return p.object(func(k []byte) error {
		if string(k) != "reasoning_tokens" {
			return p.skip(3)
		}
		if err := ds.first(0); err != nil {
			return err
		}
		var err error
		ci.ReasoningTokens, ci.HasReasoningTokens, err = p.int32OrNull()
		return err
	})
}

func (p *chunkParser) choice(ci *Chunk) error {
	if p.null() {
		return nil
	}
	var cs seen
	return p.object(func(k []byte) error {
		var err error
		var got bool
		switch string(k) {
		case "text":
			if err = cs.first(0); err == nil {
				ci.Text, got, err = p.strOrNull(ci.Text)
				ci.Output = ci.Output || got
				ci.Answer = ci.Answer || got
			}
		case "finish_reason":
			if err = cs.first(1); err == nil {
				_, got, err = p.strOrNull(nil)
				ci.Finished = ci.Finished || got
			}
		case "delta":
			if err = cs.first(2); err != nil {
				return err
			}
			if p.null() {
				return nil
			}
			var ds seen
			return p.object(func(k []byte) error {
				var err error
				var got bool
				switch string(k) {
				case "content", "reasoning_content", "reasoning":
					bit := uint(len(k)) // 7, 17 and 9: distinct
					if err = ds.first(bit); err == nil {
						n := len(ci.Text)
						ci.Text, got, err = p.strOrNull(ci.Text)
						ci.Output = ci.Output || got
						if got && bit != 7 {
							ci.Reasoning = append(ci.Reasoning, ci.Text[n:]...)
						}
						ci.Answer = ci.Answer || got && bit == 7
					}
				case "tool_calls":
					if err = ds.first(3); err != nil {
						return err
					}
					// Only an absent or null list is taken here; tool calls go the exact way.
					if !p.null() {
						return errFallback
					}
				default:
					err = p.skip(2)
				}
				return err
			})
		default:
			err = p.skip(2)
		}
		return err
	})
}
