package replay

import (
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// chunkInfo is what the client takes from one stream chunk.
type chunkInfo struct {
	output    bool // a choice carries text, content, reasoning or tool calls
	finished  bool // a choice has a finish_reason
	hasCached bool
	cached    int32  // usage.prompt_tokens_details.cached_tokens, when hasCached (here, in padding: the struct, reset per chunk, keeps its size)
	choices   int    // len(choices)
	text      []byte // the generated text of the chunk (appended), for counting
	usage     bool   // a non-null usage object
	prompt    int32  // usage.prompt_tokens, when hasPrompt
	compl     int32  // usage.completion_tokens, when hasCompl
	hasPrompt bool
	hasCompl  bool
	errMsg    string // a server error carried by the chunk
	isErr     bool
}

// errFallback makes parseChunk hand a chunk to encoding/json: anything unusual (an
// error object, escapes in keys, duplicate keys, a type surprise, invalid JSON) goes the
// slow, exact way, so the fast path never disagrees with it (FuzzParseChunk checks).
var errFallback = errors.New("fallback")

// parseChunk decodes a stream chunk into ci, with a hand-written scanner for the common
// shape and encoding/json for the rest. It returns an error only for a malformed chunk.
func parseChunk(data []byte, ci *chunkInfo) error {
	text := ci.text[:0]
	*ci = chunkInfo{text: text}
	p := chunkParser{b: data}
	if err := p.chunk(ci); err == nil {
		return nil
	}
	*ci = chunkInfo{text: text}
	return parseChunkJSON(data, ci)
}

// parseChunkJSON is the exact, slower path: encoding/json into streamChunk.
func parseChunkJSON(data []byte, ci *chunkInfo) error {
	var ch streamChunk
	if err := json.Unmarshal(data, &ch); err != nil {
		return err
	}
	if msg, ok := ch.errorMessage(); ok {
		ci.isErr, ci.errMsg = true, msg
		return nil
	}
	ci.choices = len(ch.Choices)
	for i := range ch.Choices {
		cc := &ch.Choices[i]
		d := &cc.Delta
		if cc.Text != "" || d.Content != "" || d.ReasoningContent != "" || d.Reasoning != "" ||
			(len(d.ToolCalls) > 0 && string(d.ToolCalls) != "null" && string(d.ToolCalls) != "[]") {
			ci.output = true
			ci.text = append(ci.text, cc.Text...)
			ci.text = append(ci.text, d.Content...)
			ci.text = append(ci.text, d.ReasoningContent...)
			ci.text = append(ci.text, d.Reasoning...)
		}
		if cc.FinishReason != nil && *cc.FinishReason != "" {
			ci.finished = true
		}
	}
	if ch.Usage != nil {
		ci.usage = true
		if ch.Usage.PromptTokens != nil {
			ci.prompt, ci.hasPrompt = *ch.Usage.PromptTokens, true
		}
		if ch.Usage.CompletionTokens != nil {
			ci.compl, ci.hasCompl = *ch.Usage.CompletionTokens, true
		}
		if d := ch.Usage.PromptTokensDetails; d != nil && d.CachedTokens != nil {
			ci.cached, ci.hasCached = *d.CachedTokens, true
		}
	}
	return nil
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

func (p *chunkParser) chunk(ci *chunkInfo) error {
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
				ci.choices++
				return p.choice(ci)
			})
		case "usage":
			if err := top.first(4); err != nil {
				return err
			}
			if p.null() {
				return nil
			}
			ci.usage = true
			var us seen
			return p.object(func(k []byte) error {
				var err error
				switch string(k) {
				case "prompt_tokens":
					if err = us.first(0); err == nil {
						ci.prompt, ci.hasPrompt, err = p.int32OrNull()
					}
				case "completion_tokens":
					if err = us.first(1); err == nil {
						ci.compl, ci.hasCompl, err = p.int32OrNull()
					}
				case "prompt_tokens_details":
					if err = us.first(2); err == nil {
						err = p.promptDetails(ci)
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
func (p *chunkParser) promptDetails(ci *chunkInfo) error {
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
		ci.cached, ci.hasCached, err = p.int32OrNull()
		return err
	})
}

func (p *chunkParser) choice(ci *chunkInfo) error {
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
				ci.text, got, err = p.strOrNull(ci.text)
				ci.output = ci.output || got
			}
		case "finish_reason":
			if err = cs.first(1); err == nil {
				_, got, err = p.strOrNull(nil)
				ci.finished = ci.finished || got
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
						ci.text, got, err = p.strOrNull(ci.text)
						ci.output = ci.output || got
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
