package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// API names an API kind, as --api takes it.
type API string

// The APIs built in; each is a file of its own (completions.go, chat.go, messages.go,
// responses.go: the last two declare their own names).
const (
	APICompletions API = "completions" // POST /completions with "prompt"
	APIChat        API = "chat"        // POST /chat/completions with one user message
	APIMessages    API = "messages"    // POST /messages, Anthropic's Messages API
)

// Kind is everything that differs between APIs on the wire. Adding an API is one file
// that declares its Kind and calls Register from an init function; the body's common
// start (model, streaming, usage, sampling and length fields) is the same for all.
type Kind struct {
	Name API
	// Path is appended to the base URL (which ends in /v1), e.g. "/completions".
	Path string
	// OpenAIMaxTokens is the field that caps the output for the openai backend, which
	// renamed it for some APIs (max_completion_tokens); the engines all take max_tokens.
	OpenAIMaxTokens string
	// TokenIDs reports whether the API takes a prompt of token ids (a JSON array).
	TokenIDs bool
	// AppendPrompt appends the fields that carry prompt (text, or with tokenIDs already a
	// JSON array of ids) and closes the body's object.
	AppendPrompt func(b, prompt []byte, tokenIDs bool) []byte
	// AppendMessages, for an API that takes a conversation, appends messages (JSON objects
	// separated by commas) and closes the body's object; nil for one that does not.
	AppendMessages func(b, messages []byte) []byte
	// MaxTokens is the field that caps the output for the engines: "" means max_tokens
	// (the Responses API's is max_output_tokens).
	MaxTokens string
	// StreamsUsage reports that the API streams its usage on its own (Anthropic's
	// message_start and message_delta, the Responses API's response.completed): its
	// bodies carry no stream_options.
	StreamsUsage bool
	// KeyHeader is the header that carries the API key, as the key itself: "" means
	// "Authorization: Bearer KEY" (Anthropic's is x-api-key).
	KeyHeader string
	// Headers are sent with every request of the kind (Anthropic's anthropic-version).
	Headers map[string]string
	// Stop names what ends the API's streams, for the error of a stream that ended
	// without it: "" means OpenAI's "data: [DONE]" (Anthropic's is message_stop).
	Stop string
	// AppendTools, for an API that takes tool definitions, appends a "tools" field (with
	// its leading comma) holding one function tool whose description is desc, already
	// escaped as inside a JSON string (AppendJSONContent); nil for an API without tools,
	// whose tool tokens go into the prompt's text.
	AppendTools func(b, desc []byte) []byte
	// AppendUserMessage, for an API that takes images, appends one user message object
	// holding text (already escaped as inside a JSON string: AppendJSONContent; empty:
	// no text part) and images, in the API's published shape; nil for an API that takes
	// no images.
	AppendUserMessage func(b, text []byte, images []Image) []byte
	// Decode decodes one stream event's data into c, which it must not retain; nil means
	// OpenAI's chunk shapes (DecodeChunk). A client calls the built-in kinds' decoders
	// (DecodeChunk, DecodeResponses) by name, so that its per-stream state stays where it
	// is; another kind's is called through a copy of the Chunk, one allocation per chunk.
	Decode func(data []byte, c *Chunk) error
	// LengthFields, when set, says which of a backend's length-forcing fields reach the
	// engine's sampler through this API; the others are not sent. nil means all of them
	// (completions and chat, where every engine takes its own).
	LengthFields func(Backend) LengthFields
}

// LengthFields are the length-forcing fields a body carries beside the output cap.
type LengthFields struct {
	IgnoreEOS bool // ignore_eos (vllm, sglang, llamacpp)
	MinTokens bool // min_tokens (vllm, sglang)
	NPredict  bool // n_predict (llamacpp)
}

// StopName returns what ends the kind's streams (Stop, "[DONE]" by default).
func (k *Kind) StopName() string {
	if k == nil || k.Stop == "" {
		return "[DONE]"
	}
	return k.Stop
}

// Decoder returns the function that decodes the kind's stream chunks.
func (k *Kind) Decoder() func(data []byte, c *Chunk) error {
	if k.Decode == nil {
		return DecodeChunk
	}
	return k.Decode
}

var registry struct {
	sync.RWMutex
	kinds []*Kind
}

// Register adds an API kind. It panics on a duplicate or incomplete kind: registration
// happens at init, where a mistake is the program's, not the user's.
func Register(k *Kind) {
	if k.Name == "" || k.Path == "" || k.AppendPrompt == nil {
		panic(fmt.Sprintf("wire: register %q: a kind needs a name, a path and AppendPrompt", k.Name))
	}
	registry.Lock()
	defer registry.Unlock()
	for _, o := range registry.kinds {
		if o.Name == k.Name {
			panic(fmt.Sprintf("wire: API %q registered twice", k.Name))
		}
	}
	registry.kinds = append(registry.kinds, k)
}

// Lookup returns the kind registered as a.
func Lookup(a API) (*Kind, bool) {
	registry.RLock()
	defer registry.RUnlock()
	for _, k := range registry.kinds {
		if k.Name == a {
			return k, true
		}
	}
	return nil, false
}

// APIs lists the registered API names in registration order.
func APIs() []API {
	registry.RLock()
	defer registry.RUnlock()
	out := make([]API, len(registry.kinds))
	for i, k := range registry.kinds {
		out[i] = k.Name
	}
	return out
}

func init() {
	// The built-in kinds, in the order messages list them.
	Register(&completionsKind)
	Register(&chatKind)
	Register(&messagesKind)
}

// ParseAPI checks an --api value.
func ParseAPI(s string) (API, error) {
	if _, ok := Lookup(API(s)); ok {
		return API(s), nil
	}
	names := APIs()
	want := make([]string, len(names))
	for i, n := range names {
		want[i] = string(n)
	}
	list := strings.Join(want, " or ")
	if len(want) > 2 {
		list = strings.Join(want[:len(want)-1], ", ") + " or " + want[len(want)-1]
	}
	return "", fmt.Errorf("unknown API %q (want %s)", s, list)
}

// Backend names the serving engine behind an endpoint; it chooses the request fields that
// force the output length the trace asks for.
type Backend string

// The backends and the length-forcing fields each gets (docs/replay.md), less those an
// API does not pass to the sampler (Kind.LengthFields: the Responses API's):
//
//	vllm      max_tokens, min_tokens, ignore_eos; stream_options.continuous_usage_stats
//	sglang    max_tokens, min_tokens, ignore_eos
//	tgi       max_tokens (its OpenAI routes have no ignore_eos: lengths are upper bounds)
//	llamacpp  max_tokens, n_predict, ignore_eos
//	openai    the kind's OpenAIMaxTokens field: upper bounds only
const (
	BackendVLLM     Backend = "vllm"
	BackendSGLang   Backend = "sglang"
	BackendTGI      Backend = "tgi"
	BackendLlamaCPP Backend = "llamacpp"
	BackendOpenAI   Backend = "openai"
)

// ParseBackend checks a --backend value.
func ParseBackend(s string) (Backend, error) {
	switch b := Backend(s); b {
	case BackendVLLM, BackendSGLang, BackendTGI, BackendLlamaCPP, BackendOpenAI:
		return b, nil
	}
	return "", fmt.Errorf("unknown backend %q (want vllm, sglang, tgi, llamacpp or openai)", s)
}

// ForcesLength reports whether the backend's fields make the server generate exactly the
// requested number of tokens (rather than at most that many).
func (b Backend) ForcesLength() bool {
	return b == BackendVLLM || b == BackendSGLang || b == BackendLlamaCPP
}

// PreflightRequestID is the X-Request-Id of the one request a run sends of its own before
// the trace's, the preflight's check that the server honours the output limit (the trace's
// carry RUNID-REQUESTID; no run id is fixed before the run starts): a server's or a
// gateway's log, and a test server, tell it apart by it.
const PreflightRequestID = "llmreplay-preflight"

// Encoder builds the streaming request bodies of one API for one backend. Building a body
// allocates nothing beyond growing b: it runs once per request on the preparer's path.
type Encoder struct {
	kind     *Kind
	backend  Backend
	tokenIDs bool
	tools    []byte  // WithTools: the tool's description, escaped; nil: no tools
	images   []Image // WithImages: sent with the prompt as one user message; nil: none
}

// WithTools returns the encoder whose bodies also carry one tool whose description is
// desc, already escaped as inside a JSON string (AppendJSONContent): the request's tool
// definitions (docs/replay.md, "Tool definitions"). It is a copy on the stack, made per
// request without an allocation; nil or empty desc, or a kind without tools
// (Kind.AppendTools nil, whose caller puts the tools' tokens in the prompt's text), gives
// bodies without tools, byte for byte those of e.
func (e Encoder) WithTools(desc []byte) Encoder {
	e.tools = desc
	return e
}

// TakesTools reports whether the encoder's API takes tool definitions (Kind.AppendTools).
func (e Encoder) TakesTools() bool { return e.kind.AppendTools != nil }

// appendTools appends the tools field of WithTools, if any.
func (e Encoder) appendTools(b []byte) []byte {
	if len(e.tools) == 0 || e.kind.AppendTools == nil {
		return b
	}
	return e.kind.AppendTools(b, e.tools)
}

// NewEncoder returns the encoder for api and backend; tokenIDs sends prompts as the JSON
// arrays of token ids they are, which only an API that takes them accepts.
func NewEncoder(api API, backend Backend, tokenIDs bool) (Encoder, error) {
	k, ok := Lookup(api)
	if !ok {
		_, err := ParseAPI(string(api))
		return Encoder{}, err
	}
	if _, err := ParseBackend(string(backend)); err != nil {
		return Encoder{}, err
	}
	if tokenIDs && !k.TokenIDs {
		return Encoder{}, fmt.Errorf("the %s API takes no token-id prompts", api)
	}
	return Encoder{kind: k, backend: backend, tokenIDs: tokenIDs}, nil
}

// Kind returns the encoder's API kind.
func (e Encoder) Kind() *Kind { return e.kind }

// lengthFields returns the length-forcing fields the encoder's bodies carry: the
// backend's, less those the kind says do not reach the sampler through its API.
func (e Encoder) lengthFields() LengthFields {
	var f LengthFields
	switch e.backend {
	case BackendVLLM, BackendSGLang:
		f = LengthFields{IgnoreEOS: true, MinTokens: true}
	case BackendLlamaCPP:
		f = LengthFields{IgnoreEOS: true, NPredict: true}
	}
	if e.kind.LengthFields != nil {
		k := e.kind.LengthFields(e.backend)
		f = LengthFields{IgnoreEOS: f.IgnoreEOS && k.IgnoreEOS, MinTokens: f.MinTokens && k.MinTokens, NPredict: f.NPredict && k.NPredict}
	}
	return f
}

// ForcesLength reports whether the encoder's bodies make the server generate exactly the
// requested number of tokens: the backend forces lengths (Backend.ForcesLength) and
// ignore_eos reaches the sampler through the API (with the cap, it is what makes a
// length exact; min_tokens and n_predict only repeat it).
func (e Encoder) ForcesLength() bool {
	return e.backend.ForcesLength() && e.lengthFields().IgnoreEOS
}

// LengthFieldNames names the fields of the encoder's bodies that ask for a length, as
// messages say them: "max_tokens, min_tokens and ignore_eos".
func (e Encoder) LengthFieldNames() string {
	names := []string{e.MaxTokensField()}
	f := e.lengthFields()
	if f.MinTokens {
		names = append(names, "min_tokens")
	}
	if f.NPredict {
		names = append(names, "n_predict")
	}
	if f.IgnoreEOS {
		names = append(names, "ignore_eos")
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// Decode decodes one stream event of the encoder's API into c, as Kind.Decoder's function
// does, with the backend's reading of the usage where servers of the API differ (the
// Messages API's input_tokens: the whole prompt on SGLang, the uncached part on
// Anthropic's own and on vLLM since it reports cache reads). The built-in decoders are called directly: a call
// through a function value (Kind.Decode) makes c escape to the heap, and with it a
// client's per-stream state that holds it. A kind's own decoder gets a copy of c: one
// allocation an event, for such kinds alone. The zero Encoder decodes OpenAI's shapes.
func (e Encoder) Decode(data []byte, c *Chunk) error {
	k := e.kind
	switch {
	case k == nil || k.Decode == nil:
		return DecodeChunk(data, c)
	case k.Name == APIMessages:
		// Anthropic's reading, which vLLM follows since it reports cache reads (and
		// which, without cache fields, is input_tokens alone); SGLang's input_tokens is
		// the whole prompt beside its cache_read_input_tokens.
		return decodeMessages(data, c, e.backend != BackendSGLang)
	case k.Name == APIResponses:
		return DecodeResponses(data, c)
	}
	return decodeOwn(k, data, c)
}

// decodeOwn calls a kind's own decoder on a copy of c, so that only the copy escapes.
//
//go:noinline
func decodeOwn(k *Kind, data []byte, c *Chunk) error {
	tmp := *c
	err := k.Decode(data, &tmp)
	*c = tmp
	return err
}

// AppendStart appends the constant start of every body sent to model: the model, streaming
// with usage (vLLM's continuous usage too, for per-chunk token counts), greedy sampling and
// the backend's ignore_eos. Only the model differs between requests' starts, so a caller
// computes it once per model.
func (e Encoder) AppendStart(b []byte, model string) []byte {
	b = append(b, `{"model":`...)
	b = AppendJSONString(b, model)
	b = append(b, `,"stream":true`...)
	if !e.kind.StreamsUsage {
		b = append(b, `,"stream_options":{"include_usage":true`...)
		if e.backend == BackendVLLM {
			b = append(b, `,"continuous_usage_stats":true`...)
		}
		b = append(b, '}')
	}
	b = append(b, `,"temperature":0`...)
	if e.lengthFields().IgnoreEOS {
		b = append(b, `,"ignore_eos":true`...)
	}
	return b
}

// AppendBody appends the body asking for outputTokens tokens after prompt, starting with
// start (an AppendStart), with the tools of WithTools before the prompt's fields. With
// the images of WithImages, the prompt goes as one user message holding its text and
// the images (Kind.AppendUserMessage), each image's bytes appended once.
func (e Encoder) AppendBody(b, start, prompt []byte, outputTokens int32) []byte {
	b = e.appendLengths(b, start, outputTokens)
	b = e.appendTools(b)
	if len(e.images) > 0 && e.kind.AppendUserMessage != nil && e.kind.AppendMessages != nil && !e.tokenIDs {
		return e.appendImagePrompt(b, prompt)
	}
	return e.kind.AppendPrompt(b, prompt, e.tokenIDs)
}

// AppendMessagesBody is AppendBody with the conversation given: messages are JSON objects
// separated by commas (a conversation's history and its new user message). An API without
// messages (Kind.AppendMessages nil) gets them as its prompt's text.
func (e Encoder) AppendMessagesBody(b, start, messages []byte, outputTokens int32) []byte {
	b = e.appendLengths(b, start, outputTokens)
	b = e.appendTools(b)
	if e.kind.AppendMessages == nil {
		return e.kind.AppendPrompt(b, messages, false)
	}
	return e.kind.AppendMessages(b, messages)
}

// contextMark stands for a shared context while a body is built around it: a NUL, which
// JSON never holds raw (a messages kind inserts it raw) and escapes as \u0000 in a string
// (a prompt kind); the start before it is JSON, so neither form can come earlier.
var contextMark = []byte{0}

// AppendContextBody appends the body of a request whose conversation is a context shared
// with other requests, followed by tail, and returns it with the offset at which the
// context's bytes go: the body sent is body[:at], the context, then body[at:] (the
// transport's Request.Shared). For a kind with messages the context and tail are messages
// (JSON objects separated by commas; tail starts with its comma when the context is not
// empty); for a kind without, they are the prompt's text escaped as inside a JSON string
// (AppendJSONContent). So a context of 100k tokens is never copied into a body.
func (e Encoder) AppendContextBody(b, start []byte, outputTokens int32, tail []byte) (body []byte, at int) {
	b = e.appendLengths(b, start, outputTokens)
	b = e.appendTools(b) // before the mark's search: an escaped description may hold \u0000
	from := len(b)
	mark := contextMark
	if e.kind.AppendMessages != nil {
		b = e.kind.AppendMessages(b, contextMark)
	} else {
		b = e.kind.AppendPrompt(b, contextMark, false)
		mark = []byte(`\u0000`)
	}
	at = from + bytes.Index(b[from:], mark)
	rest := len(b) - at - len(mark)
	// Make room for tail in place of the mark: b[at:] becomes tail, then what followed it.
	need := at + len(tail) + rest
	if need > len(b) {
		b = slices.Grow(b, need-len(b))[:need]
	}
	copy(b[at+len(tail):], b[at+len(mark):at+len(mark)+rest])
	copy(b[at:], tail)
	return b[:need], at
}

// MaxTokensField returns the field that caps the output in the encoder's bodies: the
// kind's MaxTokens (max_tokens unless it says), or for the openai backend the kind's
// OpenAIMaxTokens (max_completion_tokens for chat). A server that ignores it generates
// until it stops on its own; the preflight says which field it ignored.
func (e Encoder) MaxTokensField() string {
	if e.backend == BackendOpenAI && e.kind.OpenAIMaxTokens != "" {
		return e.kind.OpenAIMaxTokens
	}
	if e.kind.MaxTokens != "" {
		return e.kind.MaxTokens
	}
	return "max_tokens"
}

// appendLengths appends start and the fields that ask for outputTokens tokens.
func (e Encoder) appendLengths(b, start []byte, outputTokens int32) []byte {
	b = append(b, start...)
	var nb [12]byte
	n := strconv.AppendInt(nb[:0], int64(outputTokens), 10)
	b = append(b, `,"`...)
	b = append(b, e.MaxTokensField()...)
	b = append(b, `":`...)
	b = append(b, n...)
	f := e.lengthFields()
	if f.MinTokens {
		b = append(b, `,"min_tokens":`...)
		b = append(b, n...)
	}
	if f.NPredict {
		b = append(b, `,"n_predict":`...)
		b = append(b, n...)
	}
	return b
}

// AppendJSONString appends s as a JSON string (AppendJSONBytes).
func AppendJSONString(b []byte, s string) []byte { return AppendJSONBytes(b, []byte(s)) }

const hexDigits = "0123456789abcdef"

// safe8 reports whether all eight bytes of x are jsonSafe: none at or above 0x80, below
// 0x20, a quote or a backslash (the bit tricks of "determine if a word has a zero byte").
func safe8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	zero := func(v uint64) uint64 { return (v - ones) &^ v & highs }
	bad := x&highs | (x-0x20*ones)&^x&highs | zero(x^('"'*ones)) | zero(x^('\\'*ones))
	return bad == 0
}

// jsonSafe[c] reports whether the byte c goes into a JSON string as it is: ASCII, and not
// a control character, a quote or a backslash. A table makes the per-byte test of a
// prompt one load and one branch.
var jsonSafe = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// AppendJSONBytes appends s as a JSON string; invalid UTF-8 becomes U+FFFD, as
// encoding/json does.
func AppendJSONBytes(b []byte, s []byte) []byte {
	b = append(b, '"')
	b = AppendJSONContent(b, s)
	return append(b, '"')
}

// AppendJSONContent appends s escaped as inside a JSON string, without the quotes: the
// escaped contents of two strings, one after the other, are the escaped content of the
// two joined, so a prompt can grow by appends without escaping it again.
func AppendJSONContent(b []byte, s []byte) []byte {
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while they are all safe: a 100k-token prompt is half a
		// megabyte of plain ASCII, and a byte at a time was most of its body's cost.
		for i+8 <= len(s) && safe8(binary.LittleEndian.Uint64(s[i:])) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if jsonSafe[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}
