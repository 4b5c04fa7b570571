package record

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/wire"
)

// Request is what a recording keeps of one request body: numbers and salted hashes,
// never text. Parser.Parse makes it.
type Request struct {
	API   wire.API // from the path; "" = not an API a recording parses
	Model string

	Stream, HasStream bool  // stream, and whether the body said
	MaxTokens, N      int32 // the output cap and n; 0 = not sent

	// UserKey and PrevKey are salted hashes (Parser.Key) of the body's user (Anthropic's
	// metadata.user_id) and of the Responses API's previous_response_id; 0 = none.
	UserKey, PrevKey uint64

	// Msgs[j] is the salted hash chained over the canonical forms of messages[0..j], so
	// Msgs[j] of two requests are equal exactly when their first j+1 messages are; Roles[j]
	// is message j's role: 's' system or developer, 'u' user, 'a' assistant (its answer,
	// tool calls, reasoning), 't' a tool result, 'o' anything else.
	Msgs  []uint64
	Roles []byte

	// PromptTokens counts the text of the tools and messages by the parser's encoding
	// (the server's template is not known: a recorder prefers usage.prompt_tokens), 0
	// when ParseCounted had no need to count them; ToolTokens is the tools' part of it
	// (trace tool_tokens), always counted.
	PromptTokens, ToolTokens int32

	// Blocks are the prompt's salted prefix-block ids (trace prefix_blocks); nil when the
	// request is not one prompt (embeddings, rerank, a batch of completions prompts) or
	// when its prompt starts with an earlier response's context it does not carry
	// (previous_response_id).
	Blocks []int64

	Images int32 // image parts sent (image_url, image, input_image)
}

// ParserOptions configure a Parser.
type ParserOptions struct {
	// Salt keys every hash. It is the recording's secret: whoever has it can test guesses
	// of a prompt against the trace, so a recorder draws it from crypto/rand and never
	// stores it.
	Salt [32]byte
	// Encoding counts tokens and makes the blocks' token ids. Required.
	Encoding *tokenize.Encoding
	// BlockTokens is the tokens per prefix block (trace llmreplay.block_tokens); 0: no
	// blocks.
	BlockTokens int
	// CacheTokens bounds the token-id cache in tokens (4 bytes each); 0 means
	// DefaultCacheTokens, negative no cache.
	CacheTokens int
}

// DefaultCacheTokens is the token cache's size when ParserOptions.CacheTokens is 0: 4 Mi
// tokens, about 16 MiB, some 40 agents' contexts of 100k tokens.
const DefaultCacheTokens = 4 << 20

// Parser parses request bodies into Requests. It is safe for concurrent use; its token
// cache is shared by every goroutine that calls it.
type Parser struct {
	macs        *macs
	enc         *tokenize.Encoding
	blockTokens int
	cache       *tokenCache
}

// NewParser returns a Parser for o.
func NewParser(o ParserOptions) (*Parser, error) {
	if o.Encoding == nil {
		return nil, errors.New("record: parser: no encoding (ParserOptions.Encoding): tokenize.Get(tokenize.CL100kBase) gives one")
	}
	if o.BlockTokens < 0 {
		return nil, fmt.Errorf("record: parser: block tokens %d < 0", o.BlockTokens)
	}
	if o.CacheTokens == 0 {
		o.CacheTokens = DefaultCacheTokens
	}
	return &Parser{macs: newMACs(o.Salt), enc: o.Encoding, blockTokens: o.BlockTokens, cache: newTokenCache(o.CacheTokens)}, nil
}

// Key returns the salted hash of an identifier (a session header's value, a user, a
// response id), never 0.
func (p *Parser) Key(s string) uint64 {
	h := p.macs.get()
	defer p.macs.put(h)
	var buf [256]byte
	buf[0] = tagKey
	h.Write(buf[:1])
	writeString(h, buf[:], s)
	return nonZero(sum64(h))
}

// apiPaths are the paths a recording parses, as the APIs' references give them after
// the version: OpenAI's /v1/completions, /v1/chat/completions, /v1/responses and
// /v1/embeddings (platform.openai.com/docs/api-reference), Anthropic's /v1/messages
// (docs.anthropic.com/en/api/messages), and vLLM's /rerank, /v1/rerank and /v2/rerank.
var apiPaths = map[string]wire.API{
	"/completions":      wire.APICompletions,
	"/chat/completions": wire.APIChat,
	"/messages":         wire.APIMessages,
	"/responses":        wire.APIResponses,
	"/embeddings":       wire.APIEmbeddings,
	"/rerank":           wire.APIRerank,
}

// APIOf returns the API of a request's URL path: one of apiPaths, alone or after /v1 or
// /v2 (a query or a trailing slash is ignored); "" for any other path, such as
// /v1/models, /v1/responses/{id} or /v1/threads/{id}/messages (the Assistants API's
// messages are not Anthropic's).
func APIOf(path string) wire.API {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	path = strings.TrimSuffix(path, "/")
	if v, rest, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/"); ok && (v == "v1" || v == "v2") {
		path = "/" + rest
	}
	return apiPaths[path]
}

// body holds the fields of every API's request body a recording reads; each API reads
// its own (Parse says which). The polymorphic ones stay raw and are decoded by API.
type body struct {
	Model               *string         `json:"model"`
	Stream              *bool           `json:"stream"`
	MaxTokens           json.RawMessage `json:"max_tokens"`
	MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
	MaxOutputTokens     json.RawMessage `json:"max_output_tokens"`
	N                   json.RawMessage `json:"n"`
	User                *string         `json:"user"`
	SafetyIdentifier    *string         `json:"safety_identifier"`
	Metadata            *struct {
		UserID *string `json:"user_id"`
	} `json:"metadata"`
	PreviousResponseID *string `json:"previous_response_id"`
	Instructions       *string `json:"instructions"`

	Messages  []chatMessage   `json:"messages"`
	System    json.RawMessage `json:"system"`
	Input     json.RawMessage `json:"input"`
	Prompt    json.RawMessage `json:"prompt"`
	Query     json.RawMessage `json:"query"`
	Documents json.RawMessage `json:"documents"`
	Tools     json.RawMessage `json:"tools"`
	Functions json.RawMessage `json:"functions"`
}

// Parse reads body, a request to path, into a Request. A path of no API it parses gives
// a Request with API "" and no error, whatever the body. A body it cannot read gives an
// error naming the field, which holds no byte of the body (a field's value is never
// quoted: it may be a prompt); the Request then is empty.
func (p *Parser) Parse(path string, b []byte) (Request, error) {
	return p.parse(path, b, true)
}

// ParseCounted is Parse for a request whose prompt the server has counted (the
// response's usage): serverPrompt is that count, 0 when it gave none. The messages are
// tokenized only for what still needs their tokens: the count when the server gave none,
// the prefix blocks when the parser makes them and the prompt holds a whole block. When
// nothing does, the Request's PromptTokens is 0 (not counted) and its Blocks nil; its
// hashes, scalars and ToolTokens are Parse's. Tokenizing is most of a parse's CPU, and a
// recorder parses after the response has ended, when the usage is known.
func (p *Parser) ParseCounted(path string, b []byte, serverPrompt int32) (Request, error) {
	return p.parse(path, b, serverPrompt < 1 || p.blockTokens > 0 && int(serverPrompt) >= p.blockTokens)
}

func (p *Parser) parse(path string, b []byte, count bool) (Request, error) {
	api := APIOf(path)
	if api == "" {
		return Request{}, nil
	}
	// One pass decodes the messages (chat's, Anthropic's) with the rest: on a 100k-token
	// context, a pass per level (messages, then each message) took as long again.
	var t body
	if err := json.Unmarshal(b, &t); err != nil {
		return Request{}, bodyError(api, b, err)
	}
	r := Request{API: api}
	if err := p.scalars(&r, &t); err != nil {
		return Request{}, err
	}
	x := extract{api: api}
	if err := x.body(&t); err != nil {
		return Request{}, err
	}
	p.finish(&r, &x, count)
	return r, nil
}

// scalars reads the model, the sampling fields and the identifiers, each from the field
// the API's reference names.
func (p *Parser) scalars(r *Request, t *body) error {
	unary := r.API == wire.APIEmbeddings || r.API == wire.APIRerank
	if t.Model != nil {
		r.Model = *t.Model
	}
	if t.Stream != nil && !unary {
		r.Stream, r.HasStream = *t.Stream, true
	}
	var err error
	// Chat's output cap is max_completion_tokens, max_tokens its deprecated name
	// (platform.openai.com/docs/api-reference/chat/create); vLLM, like OpenAI, takes
	// max_completion_tokens when both are sent. The Responses API's is max_output_tokens
	// (.../responses/create); completions' and Anthropic's max_tokens.
	switch r.API {
	case wire.APIChat:
		if !isNull(t.MaxCompletionTokens) {
			r.MaxTokens, err = count(r.API, "max_completion_tokens", t.MaxCompletionTokens)
		} else {
			r.MaxTokens, err = count(r.API, "max_tokens", t.MaxTokens)
		}
	case wire.APIResponses:
		r.MaxTokens, err = count(r.API, "max_output_tokens", t.MaxOutputTokens)
	case wire.APICompletions, wire.APIMessages:
		r.MaxTokens, err = count(r.API, "max_tokens", t.MaxTokens)
	}
	if err != nil {
		return err
	}
	// n: chat and completions only (the Responses and Messages APIs have no n).
	if r.API == wire.APIChat || r.API == wire.APICompletions {
		if r.N, err = count(r.API, "n", t.N); err != nil {
			return err
		}
	}
	// The end user: OpenAI's user (safety_identifier is its successor, read when user is
	// absent), Anthropic's metadata.user_id.
	user := t.User
	if r.API == wire.APIMessages {
		user = nil
		if t.Metadata != nil {
			user = t.Metadata.UserID
		}
	} else if user == nil || *user == "" {
		user = t.SafetyIdentifier
	}
	if user != nil && *user != "" {
		r.UserKey = p.Key(*user)
	}
	if r.API == wire.APIResponses && t.PreviousResponseID != nil && *t.PreviousResponseID != "" {
		r.PrevKey = p.Key(*t.PreviousResponseID)
	}
	return nil
}

// count reads a non-negative count that fits int32 (0 when absent or null); a whole
// number written as a float (100.0, as some clients write integers) is taken.
func count(api wire.API, field string, raw json.RawMessage) (int32, error) {
	if isNull(raw) {
		return 0, nil
	}
	if k := jsonKind(raw); k != "a number" {
		return 0, fieldError(api, field, "want a number, got "+k)
	}
	n := string(bytes.TrimSpace(raw))
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(n, 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > math.MaxInt32+1 {
			return 0, fieldError(api, field, "not an integer in [0, 2147483647]")
		}
		v = int64(f)
	}
	if v < 0 || v > math.MaxInt32 {
		return 0, fieldError(api, field, "not an integer in [0, 2147483647]")
	}
	return int32(v), nil
}

// fieldError is a body's error: the API, the field and what is wrong, never its value.
func fieldError(api wire.API, field, what string) error {
	if field == "" {
		field = "body"
	}
	return fmt.Errorf("record: %s request body: %s: %s", api, field, what)
}

// jsonKinds are the words encoding/json's UnmarshalTypeError.Value starts with; only
// they are repeated in an error (what follows a number's word is the number itself).
var jsonKinds = map[string]bool{"string": true, "number": true, "bool": true, "array": true, "object": true}

// bodyError is decodeError for a body that did not decode. A kind of value amiss in the
// messages (which one decode reads, giving the field but not the index) is looked for
// again message by message, so the error names the message.
func bodyError(api wire.API, b []byte, err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field != "messages" && !strings.HasPrefix(te.Field, "messages.") {
		return decodeError(api, "", err)
	}
	var t struct {
		Messages json.RawMessage `json:"messages"`
	}
	x := extract{api: api}
	if json.Unmarshal(b, &t) == nil {
		items, err := x.array("messages", t.Messages, "an array of messages")
		if err != nil {
			return err
		}
		for i, it := range items {
			var cm chatMessage
			if err := x.decode(fmt.Sprintf("messages[%d]", i), it, &cm); err != nil {
				return err
			}
		}
	}
	return decodeError(api, "", err)
}

// decodeError turns an encoding/json error into fieldError, keeping none of its text:
// a SyntaxError quotes the offending character and an UnmarshalTypeError a number's
// digits, both bytes of the body. What is kept: the byte offset, the field path (made of
// our struct tags, since no body is decoded into a map) and the kind of value found.
func decodeError(api wire.API, field string, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fieldError(api, field, fmt.Sprintf("not valid JSON (byte %d)", se.Offset))
	case errors.As(err, &te):
		f := te.Field
		if !safeField(f) {
			f = ""
		}
		if f != "" && field != "" {
			f = field + "." + f
		} else if f == "" {
			f = field
		}
		return fieldError(api, f, fmt.Sprintf("want %s, got %s (byte %d)", goKind(te.Type.String()), valueKind(te.Value), te.Offset))
	}
	return fieldError(api, field, "not valid JSON")
}

// valueKind returns the kind of value an UnmarshalTypeError found: the first word of its
// Value when it is one of jsonKinds, never what follows (a number's digits).
func valueKind(v string) string {
	got, _, _ := strings.Cut(v, " ")
	if !jsonKinds[got] {
		return "another kind of value"
	}
	return got
}

// safeField reports whether an error's field path is made of struct tags only.
func safeField(f string) bool {
	if len(f) > 64 {
		return false
	}
	for _, c := range f {
		if !(c >= 'a' && c <= 'z' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// goKind says a Go type of the body structs as a JSON kind.
func goKind(t string) string {
	t = strings.TrimLeft(t, "*")
	switch {
	case t == "string":
		return "a string"
	case t == "bool":
		return "a boolean"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "float"):
		return "a number"
	case strings.HasPrefix(t, "[]"):
		return "an array"
	}
	return "an object"
}

// jsonKind names the kind of a raw JSON value by its first byte, for an error.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '[':
		return "an array"
	case '{':
		return "an object"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// isNull reports whether a raw value is absent or null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// A message's canonical form is its role and a list of pieces, each a kind and a string;
// its hash covers the kinds and the strings' lengths and bytes, so no two forms hash
// alike by moving bytes between pieces. It is made from the decoded values, never from
// the body's bytes: a client that sends the same conversation again with its keys in
// another order, other whitespace or other escapes gets the same hashes.
type piece struct {
	kind byte
	s    string
}

// The kinds of piece. Text, tool calls and tool results are tokenized (what the model
// reads as text); the others only tell messages apart.
const (
	pText     = 't' // text (text parts concatenated, a string content, a refusal)
	pResult   = 'r' // the text of a tool result
	pCallName = 'n' // a tool call's function name
	pCallArgs = 'g' // a tool call's arguments, as canonical JSON
	pImage    = 'i' // an image: its URL, data or file id
	pHidden   = 'h' // ids of calls, reasoning, parts of other types (canonical JSON)
	pIDs      = 'x' // a prompt of token ids (little-endian uint32s)
)

func (pc piece) tokens() bool {
	switch pc.kind {
	case pText, pResult, pCallName, pCallArgs:
		return true
	}
	return false
}

// message is one message in canonical form; ids are set for a prompt of token ids,
// which is its own tokenization.
type message struct {
	role   byte
	pieces []piece
	ids    []uint32
}

// add appends a piece; text next to text of the same kind is one piece (a content of
// parts ["a","b"] reads as the string "ab"), and an empty text is none.
func (m *message) add(kind byte, s string) {
	if kind == pText || kind == pResult {
		if s == "" {
			return
		}
		if n := len(m.pieces); n > 0 && m.pieces[n-1].kind == kind {
			m.pieces[n-1].s += s
			return
		}
	}
	m.pieces = append(m.pieces, piece{kind, s})
}

// extract gathers a body's messages in canonical form, its tools' canonical JSON and
// its images, by API.
type extract struct {
	api      wire.API
	msgs     []message
	tools    string
	images   int
	separate bool // the messages are separate inputs (embeddings, rerank, a batch), not one prompt
}

func (x *extract) add(role byte) *message {
	x.msgs = append(x.msgs, message{role: role})
	return &x.msgs[len(x.msgs)-1]
}

func (x *extract) decode(field string, raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return decodeError(x.api, field, err)
	}
	return nil
}

// array decodes raw, which must be an array, into its elements.
func (x *extract) array(field string, raw json.RawMessage, want string) ([]json.RawMessage, error) {
	if jsonKind(raw) != "an array" {
		return nil, fieldError(x.api, field, fmt.Sprintf("want %s, got %s", want, jsonKind(raw)))
	}
	var a []json.RawMessage
	return a, x.decode(field, raw, &a)
}

// body extracts what the API's reference puts where: the tools of every API, then chat's
// messages (platform.openai.com/docs/api-reference/chat/create), Anthropic's system and
// messages (docs.anthropic.com/en/api/messages), the Responses API's instructions and
// input (.../responses/create), completions' prompt (.../completions/create),
// embeddings' input (.../embeddings/create), and rerank's query and documents (vLLM's
// RerankRequest).
func (x *extract) body(t *body) error {
	tools, err := canonical(t.Tools)
	if err != nil {
		return decodeError(x.api, "tools", err)
	}
	functions, err := canonical(t.Functions) // chat's deprecated functions
	if err != nil {
		return decodeError(x.api, "functions", err)
	}
	x.tools = tools
	if functions != "" && tools != "" {
		x.tools += "\n"
	}
	x.tools += functions
	switch x.api {
	case wire.APIChat:
		return x.messages(t.Messages)
	case wire.APIMessages:
		if !isNull(t.System) {
			if err := x.content(x.add('s'), "system", t.System, pText); err != nil {
				return err
			}
		}
		return x.messages(t.Messages)
	case wire.APIResponses:
		if t.Instructions != nil && *t.Instructions != "" {
			x.add('s').add(pText, *t.Instructions)
		}
		return x.responses(t.Input)
	case wire.APICompletions:
		n, err := x.prompts("prompt", t.Prompt)
		x.separate = n > 1
		return err
	case wire.APIEmbeddings:
		x.separate = true
		_, err := x.prompts("input", t.Input)
		return err
	case wire.APIRerank:
		x.separate = true
		return x.rerank(t.Query, t.Documents)
	}
	return nil
}

// canonical returns raw as canonical JSON (object keys sorted, no insignificant space,
// numbers as written, no HTML escapes), "" for null, absent, [] or {}.
func canonical(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "", err
	}
	switch w := v.(type) {
	case []any:
		if len(w) == 0 {
			return "", nil
		}
	case map[string]any:
		if len(w) == 0 {
			return "", nil
		}
	}
	var b strings.Builder
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return "", err
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// arguments returns a tool call's arguments as canonical JSON: chat's and the Responses
// API's are a string holding JSON, Anthropic's input an object; a string that is not
// JSON is kept as it is.
func arguments(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if c, err := canonical(json.RawMessage(s)); err == nil && json.Valid([]byte(s)) {
			return c
		}
		return s
	}
	c, _ := canonical(raw) // valid: the body was
	return c
}

// chatRoles maps chat's roles to a Request's; developer is the newer name of system.
var chatRoles = map[string]byte{"system": 's', "developer": 's', "user": 'u', "assistant": 'a', "tool": 't', "function": 't'}

type chatMessage struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	Refusal      *string         `json:"refusal"`
	ToolCalls    []toolCall      `json:"tool_calls"`
	FunctionCall *function       `json:"function_call"`
	ToolCallID   string          `json:"tool_call_id"`
}

type toolCall struct {
	ID       string   `json:"id"`
	Function function `json:"function"`
	Custom   function `json:"custom"` // a custom tool's call: name and input
}

type function struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Input     json.RawMessage `json:"input"`
}

// call adds a tool call: its id (told apart, not tokenized), name and arguments.
func (m *message) call(id string, f function) {
	if id != "" {
		m.add(pHidden, id)
	}
	m.add(pCallName, f.Name)
	switch {
	case !isNull(f.Arguments):
		m.add(pCallArgs, arguments(f.Arguments))
	case !isNull(f.Input):
		m.add(pCallArgs, arguments(f.Input))
	}
}

// messages adds chat's messages, or Anthropic's, which are chat's user and assistant
// messages (a user message that holds tool_result blocks being a tool result: part).
func (x *extract) messages(cms []chatMessage) error {
	for i := range cms {
		cm := &cms[i]
		field := fmt.Sprintf("messages[%d]", i)
		role, ok := chatRoles[cm.Role]
		if !ok {
			role = 'o'
		}
		kind := byte(pText)
		if role == 't' {
			kind = pResult
		}
		m := x.add(role)
		if cm.ToolCallID != "" {
			m.add(pHidden, cm.ToolCallID)
		}
		if err := x.content(m, field+".content", cm.Content, kind); err != nil {
			return err
		}
		if cm.Refusal != nil {
			m.add(pText, *cm.Refusal)
		}
		for _, tc := range cm.ToolCalls {
			if tc.Function.Name == "" && tc.Custom.Name != "" {
				tc.Function = tc.Custom
			}
			m.call(tc.ID, tc.Function)
		}
		if cm.FunctionCall != nil {
			m.call("", *cm.FunctionCall)
		}
	}
	return nil
}

// part is a content part of any API: chat's (text, image_url, refusal, input_audio,
// file), Anthropic's content blocks (text, image, tool_use, tool_result, thinking,
// redacted_thinking, document, ...) and the Responses API's (input_text, output_text,
// input_image, refusal, input_file).
type part struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	Refusal   *string         `json:"refusal"`
	ImageURL  json.RawMessage `json:"image_url"`
	FileID    *string         `json:"file_id"`
	Source    json.RawMessage `json:"source"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// plainString returns the JSON string raw holds when it needs no unquoting: no escape,
// valid UTF-8 (which encoding/json would change), as the bulk of a prompt's text is. Its
// bytes are valid JSON: the body was checked whole.
func plainString(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') >= 0 || !utf8.Valid(in) {
		return "", false
	}
	return string(in), true
}

// content adds a message's content: a string, or an array of parts; text goes in as
// kind (pText, or pResult inside a tool result).
func (x *extract) content(m *message, field string, raw json.RawMessage, kind byte) error {
	if isNull(raw) {
		return nil
	}
	if jsonKind(raw) == "a string" {
		s, ok := plainString(raw)
		if !ok {
			if err := x.decode(field, raw, &s); err != nil {
				return err
			}
		}
		m.add(kind, s)
		return nil
	}
	parts, err := x.array(field, raw, "a string or an array of content parts")
	if err != nil {
		return err
	}
	for i, pr := range parts {
		if err := x.part(m, fmt.Sprintf("%s[%d]", field, i), pr, kind); err != nil {
			return err
		}
	}
	return nil
}

// knownParts are the part types whose fields part reads.
var knownParts = map[string]bool{"text": true, "input_text": true, "output_text": true, "refusal": true,
	"image_url": true, "input_image": true, "image": true, "tool_use": true, "server_tool_use": true,
	"tool_result": true}

// part adds one content part: text, a refusal, an image (counted; told apart by its URL,
// data or file id), a tool call or a tool result by its fields; a part of any other type
// (thinking, a document, audio) by its canonical JSON, which tells it apart and is not
// tokenized.
func (x *extract) part(m *message, field string, raw json.RawMessage, kind byte) error {
	var p part
	if jsonKind(raw) != "an object" {
		return fieldError(x.api, field, "want a content part (an object), got "+jsonKind(raw))
	}
	if err := x.decode(field, raw, &p); err != nil && knownParts[p.Type] {
		return err
	} else if err != nil {
		p.Type = "" // a part of another type, whose fields may be of other kinds
	}
	switch p.Type {
	case "text", "input_text", "output_text":
		if p.Text != nil {
			m.add(kind, *p.Text)
		}
	case "refusal":
		if p.Refusal != nil {
			m.add(kind, *p.Refusal)
		}
	case "image_url", "input_image", "image":
		x.images++
		var url struct {
			URL string `json:"url"`
		}
		switch {
		case jsonKind(p.ImageURL) == "a string":
			_ = json.Unmarshal(p.ImageURL, &url.URL)
		case jsonKind(p.ImageURL) == "an object":
			if err := x.decode(field+".image_url", p.ImageURL, &url); err != nil {
				return err
			}
		case p.FileID != nil:
			url.URL = *p.FileID
		default:
			url.URL, _ = canonical(p.Source) // Anthropic's base64 data or URL
		}
		m.add(pImage, url.URL)
	case "tool_use", "server_tool_use":
		m.call(p.ID, function{Name: p.Name, Input: p.Input})
	case "tool_result":
		// Anthropic's tool results come in a user message: the message is a tool result.
		if m.role == 'u' {
			m.role = 't'
		}
		m.add(pHidden, p.ToolUseID)
		return x.content(m, field+".content", p.Content, pResult)
	default:
		c, _ := canonical(raw) // valid: the body was
		m.add(pHidden, c)
	}
	return nil
}

// responsesRoles maps the Responses API's message roles to a Request's.
var responsesRoles = map[string]byte{"system": 's', "developer": 's', "user": 'u', "assistant": 'a'}

// responseItem is an input item of the Responses API: a message (type "message" or
// none), a function or custom tool call, its output, reasoning, a reference.
type responseItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Input     json.RawMessage `json:"input"`
	Output    json.RawMessage `json:"output"`
}

// responses adds the Responses API's input: a string is one user message; a list holds
// one message per item. An earlier response's output items, sent back as input, are
// assistant messages ('a'): its messages, reasoning and tool calls (any type ending in
// _call); the tools' outputs (types ending in _output) are tool results ('t').
func (x *extract) responses(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	if jsonKind(raw) == "a string" {
		return x.content(x.add('u'), "input", raw, pText)
	}
	items, err := x.array("input", raw, "a string or an array of input items")
	if err != nil {
		return err
	}
	for i, it := range items {
		field := fmt.Sprintf("input[%d]", i)
		var ri responseItem
		if err := x.decode(field, it, &ri); err != nil {
			return err
		}
		switch ri.Type {
		case "", "message":
			role, ok := responsesRoles[ri.Role]
			if !ok {
				role = 'o'
			}
			if err := x.content(x.add(role), field+".content", ri.Content, pText); err != nil {
				return err
			}
		case "function_call", "custom_tool_call":
			x.add('a').call(ri.CallID, function{Name: ri.Name, Arguments: ri.Arguments, Input: ri.Input})
		case "function_call_output", "custom_tool_call_output":
			m := x.add('t')
			m.add(pHidden, ri.CallID)
			if err := x.content(m, field+".output", ri.Output, pResult); err != nil {
				return err
			}
		default:
			role := byte('o')
			switch {
			case ri.Type == "reasoning" || strings.HasSuffix(ri.Type, "_call"):
				role = 'a'
			case strings.HasSuffix(ri.Type, "_output"):
				role = 't'
			}
			c, _ := canonical(it) // valid: the body was
			x.add(role).add(pHidden, c)
		}
	}
	return nil
}

// prompts adds completions' prompt or embeddings' input, one user message each: a
// string, an array of token ids, or an array of either (a batch). It returns how many.
func (x *extract) prompts(field string, raw json.RawMessage) (int, error) {
	switch jsonKind(raw) {
	case "null", "nothing":
		return 0, nil
	case "a string":
		return 1, x.content(x.add('u'), field, raw, pText)
	}
	items, err := x.array(field, raw, "a string, an array of token ids, or an array of strings or of arrays of token ids")
	if err != nil {
		return 0, err
	}
	if len(items) > 0 && jsonKind(items[0]) == "a number" {
		return 1, x.tokenIDs(field, raw)
	}
	for i, it := range items {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch jsonKind(it) {
		case "a string":
			if err := x.content(x.add('u'), f, it, pText); err != nil {
				return 0, err
			}
		case "an array":
			if err := x.tokenIDs(f, it); err != nil {
				return 0, err
			}
		default:
			return 0, fieldError(x.api, f, "want a string or an array of token ids, got "+jsonKind(it))
		}
	}
	return len(items), nil
}

// tokenIDs adds a prompt of token ids as a user message whose tokens they are: they are
// the model's own ids, so the count is exact, and the blocks are made of them.
func (x *extract) tokenIDs(field string, raw json.RawMessage) error {
	var ids []int64
	if err := x.decode(field, raw, &ids); err != nil {
		return err
	}
	m := x.add('u')
	m.ids = make([]uint32, len(ids))
	b := make([]byte, 0, 4*len(ids))
	for i, id := range ids {
		if id < 0 || id > math.MaxUint32 {
			return fieldError(x.api, fmt.Sprintf("%s[%d]", field, i), "not a token id in [0, 4294967295]")
		}
		m.ids[i] = uint32(id)
		b = binary.LittleEndian.AppendUint32(b, uint32(id))
	}
	m.add(pIDs, string(b))
	return nil
}

// rerank adds the query, then each document, a user message each; a document is a
// string or an object whose text is read (others are told apart by their JSON).
func (x *extract) rerank(query, documents json.RawMessage) error {
	if !isNull(query) {
		if err := x.content(x.add('u'), "query", query, pText); err != nil {
			return err
		}
	}
	if isNull(documents) {
		return nil
	}
	docs, err := x.array("documents", documents, "an array of documents")
	if err != nil {
		return err
	}
	for i, d := range docs {
		f := fmt.Sprintf("documents[%d]", i)
		m := x.add('u')
		switch jsonKind(d) {
		case "a string":
			if err := x.content(m, f, d, pText); err != nil {
				return err
			}
		case "an object":
			// Jina's and vLLM's {"text": ...}; another object is told apart by its JSON.
			var doc struct {
				Text *string `json:"text"`
			}
			if json.Unmarshal(d, &doc) == nil && doc.Text != nil {
				m.add(pText, *doc.Text)
			} else {
				c, _ := canonical(d) // valid: the body was
				m.add(pHidden, c)
			}
		default:
			return fieldError(x.api, f, "want a string or an object, got "+jsonKind(d))
		}
	}
	return nil
}
