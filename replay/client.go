package replay

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/llmreplay/llmreplay/replay/results"
)

// API is the OpenAI-compatible API a run uses.
type API string

// The APIs.
const (
	APICompletions API = "completions" // POST /completions with "prompt"
	APIChat        API = "chat"        // POST /chat/completions with one user message
)

// Backend names the serving engine behind an endpoint; it chooses the request fields that
// force the output length the trace asks for.
type Backend string

// The backends and the length-forcing fields each gets (docs/replay.md):
//
//	vllm      max_tokens, min_tokens, ignore_eos; stream_options.continuous_usage_stats
//	sglang    max_tokens, min_tokens, ignore_eos
//	tgi       max_tokens (its OpenAI routes have no ignore_eos: lengths are upper bounds)
//	llamacpp  max_tokens, n_predict, ignore_eos
//	openai    max_tokens (completions) or max_completion_tokens (chat): upper bounds only
const (
	BackendVLLM     Backend = "vllm"
	BackendSGLang   Backend = "sglang"
	BackendTGI      Backend = "tgi"
	BackendLlamaCPP Backend = "llamacpp"
	BackendOpenAI   Backend = "openai"
)

// ParseAPI checks an --api value.
func ParseAPI(s string) (API, error) {
	switch a := API(s); a {
	case APICompletions, APIChat:
		return a, nil
	}
	return "", fmt.Errorf("unknown API %q (want completions or chat)", s)
}

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

// ClientOptions configure a Client.
type ClientOptions struct {
	BaseURL     *url.URL      // e.g. http://127.0.0.1:8000/v1 (userinfo becomes basic auth, never logged)
	API         API           // completions or chat
	Backend     Backend       // chooses the length-forcing fields
	Model       string        // model name sent in every request (but those Options.Models maps)
	APIKey      string        // sent as "Authorization: Bearer ..."; never logged or stored
	Header      http.Header   // extra headers for every request
	Timeout     time.Duration // per request, from send to the end of the stream; 0 = none
	MaxInflight int           // sizes the connection pool
	Insecure    bool          // skip TLS certificate verification
	MaxLine     int           // SSE line cap; 0 = DefaultMaxLine
	// CountTokens counts generated text when the server reports no usage; nil leaves
	// output_tokens null in that case.
	CountTokens func(string) int
	// TokenIDPrompts: the prompts the Prompter appends are JSON arrays of token ids, sent
	// as they are ("prompt":[...], completions API only; vLLM and SGLang accept them).
	TokenIDPrompts bool
	// HTTPClient chooses the HTTP client: HTTPClientAuto (""), HTTPClientRaw or
	// HTTPClientNetHTTP (rawhttp.go says why there are two).
	HTTPClient string
	// SessionHeader names the session-affinity header, sent with the trace's session id on
	// every request that has one; "" sends none (route.go).
	SessionHeader string
	// ReadBatch (raw client): while a reactor reads at least reactorBatchMin responses of
	// requests it ends itself (open loop), and none that a goroutine waits for, it waits
	// ReadBatch after each wake before it looks for ready streams again, and reads what
	// arrived meanwhile in one wake. Chunk times stay the kernel's arrival stamps; a chunk
	// read together with a later one of the same stream (both arrived within ReadBatch)
	// is dated by the later one's arrival. 0 reads every chunk as it arrives.
	ReadBatch time.Duration
}

// Validate checks the options.
func (o *ClientOptions) Validate() error {
	if o.BaseURL == nil {
		return errors.New("client: no base URL")
	}
	if _, err := ParseAPI(string(o.API)); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if _, err := ParseBackend(string(o.Backend)); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if o.Model == "" {
		return errors.New("client: no model")
	}
	if o.Timeout < 0 {
		return fmt.Errorf("client: timeout %v is negative", o.Timeout)
	}
	if o.ReadBatch < 0 || o.ReadBatch > MaxReadBatch {
		return fmt.Errorf("client: read batch %v is not between 0 and %v", o.ReadBatch, MaxReadBatch)
	}
	if o.TokenIDPrompts && o.API != APICompletions {
		return errors.New("client: token-id prompts need the completions API")
	}
	if _, err := ParseHTTPClient(o.HTTPClient); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if err := checkSessionHeader(o.SessionHeader); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	for k, vs := range o.Header {
		if !validHeaderName(k) {
			return fmt.Errorf("client: header name %q is not a valid HTTP token", k)
		}
		if err := checkExtraHeader(k, o.SessionHeader); err != nil {
			return fmt.Errorf("client: %w", err)
		}
		for _, v := range vs {
			if !validHeaderValue(v) {
				// The value may be a secret: never print it.
				return fmt.Errorf("client: header %s: the value holds a control character", k)
			}
		}
	}
	return nil
}

// Client sends prepared requests and times their streams. It is safe for concurrent use.
type Client struct {
	opts   ClientOptions
	url    string
	header http.Header
	hc     *http.Client
	raw    *rawTransport // the raw HTTP/1.1 client, when it serves the endpoint
	// bodyPrefix is the constant start of every body: {"model":"...","stream":true,...,
	bodyPrefix []byte
	secrets    []string // scrubbed from every record's error text (Scrub)
}

// NewTransport returns the tuned transport every replay uses: one keep-alive pool sized
// to the in-flight limit (so steady load never dials), no compression (it would delay
// and batch chunks), and 16 KiB read and write buffers per connection, four times
// net/http's default: a 100k-token prompt goes out in few writes, and a long SSE line
// grows the stream reader's own buffer (up to its cap) instead. Bigger fixed buffers
// cost too much at thousands of connections (64 KiB each way x 4096 = 512 MiB).
// A response head is capped at 64 KiB, as in the raw client.
func NewTransport(maxInflight int, insecure bool) *http.Transport {
	if maxInflight <= 0 {
		maxInflight = 1024
	}
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            d.DialContext,
		MaxIdleConns:           maxInflight,
		MaxIdleConnsPerHost:    maxInflight,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  0,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxResponseHead,
		ReadBufferSize:         16 << 10,
		WriteBufferSize:        16 << 10,
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        &tls.Config{InsecureSkipVerify: insecure}, //nolint:gosec // only with --insecure
	}
}

// NewClient returns a client for o.
func NewClient(o ClientOptions) (*Client, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.MaxLine <= 0 {
		o.MaxLine = DefaultMaxLine
	}
	u := *o.BaseURL
	h := http.Header{}
	for k, v := range o.Header {
		h[k] = append([]string(nil), v...)
	}
	if u.User != nil {
		pw, _ := u.User.Password()
		req := http.Request{Header: h}
		req.SetBasicAuth(u.User.Username(), pw)
		u.User = nil
	}
	if o.APIKey != "" {
		h.Set("Authorization", "Bearer "+o.APIKey)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "text/event-stream")
	if h.Get("User-Agent") == "" {
		h.Set("User-Agent", "llmreplay")
	}
	switch o.API {
	case APIChat:
		u.Path += "/chat/completions"
	default:
		u.Path += "/completions"
	}
	c := &Client{
		opts:    o,
		url:     u.String(),
		header:  h,
		secrets: Secrets(o.BaseURL, o.APIKey, o.Header),
		hc: &http.Client{
			Transport: NewTransport(o.MaxInflight, o.Insecure),
			// Redirects would re-send the body: an inference endpoint never needs them.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	c.bodyPrefix = c.appendBodyPrefix(nil, o.Model)
	choice, _ := ParseHTTPClient(o.HTTPClient)
	raw, err := useRaw(choice, &u)
	if err != nil {
		return nil, err
	}
	if raw {
		mu := *o.BaseURL
		mu.User = nil
		mu.Path += "/models"
		c.raw = newRawTransport(&u, &mu, h, o.MaxInflight, o.SessionHeader)
		c.raw.readBatch = int64(o.ReadBatch)
		c.raw.c = c
	}
	return c, nil
}

// HTTPClientName says which HTTP client serves the endpoint: "raw" or "net/http".
func (c *Client) HTTPClientName() string {
	if c.raw != nil {
		return HTTPClientRaw
	}
	return HTTPClientNetHTTP
}

// validHeaderName reports whether k is an HTTP token (RFC 9110, section 5.6.2).
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v has no control character but tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// Prewarm opens up to n keep-alive connections before a run, with n concurrent
// GET BASE/models requests, so that the run's first requests (and its bursts up to n in
// flight) do not pay TCP and TLS set-up inside their lateness and TTFT. It returns how
// many requests succeeded; failures are not errors (the run will report the endpoint's
// state itself).
func (c *Client) Prewarm(ctx context.Context, n int) int {
	if c.raw != nil {
		return c.raw.prewarm(ctx, n)
	}
	u := *c.opts.BaseURL
	u.User = nil
	u.Path += "/models"
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(rctx, http.MethodGet, u.String(), nil)
			if err != nil {
				return
			}
			req.Header = c.header
			resp, err := c.hc.Do(req)
			if err != nil {
				return
			}
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(ok.Load())
}

// Close releases idle connections.
func (c *Client) Close() {
	c.hc.CloseIdleConnections()
	if c.raw != nil {
		c.raw.closeIdle()
	}
}

func (c *Client) appendBodyPrefix(b []byte, model string) []byte {
	b = append(b, `{"model":`...)
	b = appendJSONString(b, model)
	b = append(b, `,"stream":true,"stream_options":{"include_usage":true`...)
	if c.opts.Backend == BackendVLLM {
		b = append(b, `,"continuous_usage_stats":true`...)
	}
	b = append(b, `},"temperature":0`...)
	switch c.opts.Backend {
	case BackendVLLM, BackendSGLang:
		b = append(b, `,"ignore_eos":true`...)
	case BackendLlamaCPP:
		b = append(b, `,"ignore_eos":true`...)
	}
	return b
}

// AppendBody appends the JSON body asking for outputTokens tokens after prompt.
func (c *Client) AppendBody(b []byte, prompt []byte, outputTokens int32) []byte {
	return c.appendBody(b, c.bodyPrefix, prompt, outputTokens)
}

// bodyPrefixFor returns the constant start of every body sent to model, as bodyPrefix is
// the start of those sent to the client's own model.
func (c *Client) bodyPrefixFor(model string) []byte { return c.appendBodyPrefix(nil, model) }

// appendBody is AppendBody with the body's constant start given (bodyPrefix or a
// bodyPrefixFor): the model is the only field that differs between requests' starts.
func (c *Client) appendBody(b, prefix []byte, prompt []byte, outputTokens int32) []byte {
	b = c.appendLengths(b, prefix, outputTokens)
	if c.opts.API == APIChat {
		b = append(b, `,"messages":[{"role":"user","content":`...)
		b = appendJSONBytes(b, prompt)
		b = append(b, `}]}`...)
	} else if c.opts.TokenIDPrompts {
		b = append(b, `,"prompt":`...)
		b = append(b, prompt...) // already a JSON array of ids
		b = append(b, '}')
	} else {
		b = append(b, `,"prompt":`...)
		b = appendJSONBytes(b, prompt)
		b = append(b, '}')
	}
	return b
}

// appendBodyMessages is appendBody for the chat API with the messages given, JSON
// objects separated by commas (a conversation's history and its new user message).
func (c *Client) appendBodyMessages(b, prefix []byte, messages []byte, outputTokens int32) []byte {
	b = c.appendLengths(b, prefix, outputTokens)
	b = append(b, `,"messages":[`...)
	b = append(b, messages...)
	return append(b, `]}`...)
}

// appendLengths appends prefix and the fields that ask for outputTokens tokens.
func (c *Client) appendLengths(b, prefix []byte, outputTokens int32) []byte {
	b = append(b, prefix...)
	n := strconv.AppendInt(nil, int64(outputTokens), 10)
	switch {
	case c.opts.Backend == BackendOpenAI && c.opts.API == APIChat:
		b = append(b, `,"max_completion_tokens":`...)
		b = append(b, n...)
	default:
		b = append(b, `,"max_tokens":`...)
		b = append(b, n...)
	}
	switch c.opts.Backend {
	case BackendVLLM, BackendSGLang:
		b = append(b, `,"min_tokens":`...)
		b = append(b, n...)
	case BackendLlamaCPP:
		b = append(b, `,"n_predict":`...)
		b = append(b, n...)
	}
	return b
}

func appendJSONString(b []byte, s string) []byte { return appendJSONBytes(b, []byte(s)) }

const hexDigits = "0123456789abcdef"

// appendJSONBytes appends s as a JSON string; invalid UTF-8 becomes U+FFFD, as
// encoding/json does.
func appendJSONBytes(b []byte, s []byte) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
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
	b = append(b, s[start:]...)
	return append(b, '"')
}

// streamChunk is the part of an OpenAI-compatible stream chunk the replayer reads.
type streamChunk struct {
	Object  string          `json:"object"`
	Message string          `json:"message"` // vLLM's older top-level error object
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content          string          `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			Reasoning        string          `json:"reasoning"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     *int32 `json:"prompt_tokens"`
		CompletionTokens *int32 `json:"completion_tokens"`
		// vLLM (--enable-prompt-tokens-details), SGLang, OpenAI: prompt tokens served
		// from the prefix cache; the object or the count may be null or absent.
		PromptTokensDetails *struct {
			CachedTokens *int32 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// errorMessage extracts a server's error message from an error field or object.
func (c *streamChunk) errorMessage() (string, bool) {
	if c.Object == "error" {
		return c.Message, true
	}
	if len(c.Error) == 0 || string(c.Error) == "null" {
		return "", false
	}
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(c.Error, &e) == nil && e.Message != "" {
		return e.Message, true
	}
	var s string
	if json.Unmarshal(c.Error, &s) == nil {
		return s, true
	}
	return string(c.Error), true
}

// request is one prepared request: everything needed to send it is computed.
type request struct {
	id           int64
	dueNS        int64 // offset from the run start
	promptTokens int32
	outputTokens int32
	body         []byte
	warmup       bool   // sent but not recorded
	head         []byte // the raw client's request head, built with the body
	// runID is the run id of the X-Request-Id header (RUNID-ID); "" sends none. A request
	// prepared before the run id was known has it set at dispatch (dispatcher.withRunID), which
	// also writes it over the placeholder at head[runIDAt:].
	runID      string
	runIDAt    int   // offset of the run id in head; 0 when head has no X-Request-Id
	session    int64 // the trace's session id, sent in the session header when hasSession
	hasSession bool

	// Conversations (session.go): the turn's index in its session; in sequential mode its
	// session and wait for the predecessor (results.Null: none), and, when the next turn's
	// history needs them, what it sends (sent) and the text it receives (answer, captured
	// by the stream when capture is set).
	turn          int32
	conv          *conv
	sessionWaitNS int64
	sent, answer  []byte
	capture       bool
}

// answerBuf returns where the stream appends r's output text: &r.answer when the next
// turn's history needs it, else nil.
func (r *request) answerBuf() *[]byte {
	if !r.capture {
		return nil
	}
	return &r.answer
}

// clock reads nanoseconds since the run start from the monotonic clock.
type clock struct{ start time.Time }

func (c clock) now() int64 { return int64(time.Since(c.start)) }

// scrub takes the client's secrets out of res's error text.
func (c *Client) scrub(res *results.Result) {
	if res.Error != "" && len(c.secrets) > 0 {
		res.Error = Scrub(res.Error, c.secrets)
	}
}

// doHTTP is httpTransport.roundTrip without the scrub. ctx ends the request early (a
// hard stop: the result is canceled); the per-request timeout is applied here.
func (c *Client) doHTTP(ctx context.Context, clk clock, r *request, res *results.Result, sse *sseReader, onTokens func(int)) {
	rctx := ctx
	if c.opts.Timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
	}
	var wrote atomic.Int64 // set by the transport's writer goroutine
	wrote.Store(results.Null)
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
		wrote.CompareAndSwap(results.Null, clk.now())
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(rctx, trace), http.MethodPost, c.url, bytes.NewReader(r.body))
	if err != nil {
		res.Status, res.Error = results.StatusTransportError, "build request: "+err.Error()
		return
	}
	req.Header = c.requestHeader(r)
	before := clk.now()
	resp, err := c.hc.Do(req)
	if err != nil {
		res.Status, res.Error = classifyErr(ctx, rctx, err, c.opts.Timeout)
		return
	}
	defer resp.Body.Close()
	// A server may answer before the whole body is written (an early error): the send
	// time is then the call's start, which is within the write.
	sentNS := wrote.Load()
	if sentNS == results.Null {
		sentNS = before
	}
	res.SentNS = sentNS
	res.HTTPStatus = int32(resp.StatusCode)
	enc := resp.Header.Get("Content-Encoding")
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		res.Status = results.StatusHTTPError
		if encoded(enc) {
			res.Error = httpErrorEncoded(resp.StatusCode, enc)
		} else {
			res.Error = httpErrorMessage(resp)
		}
		return
	}
	if encoded(enc) {
		res.Status, res.Error = results.StatusStreamError, streamEncoded(enc)
		return
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		res.Status = results.StatusStreamError
		res.Error = fmt.Sprintf("response is not an event stream (Content-Type %q)", ct)
		return
	}
	sse.reset(resp.Body)
	c.readStreamInto(ctx, rctx, sse, res, onTokens, r.answerBuf())
	if res.Status == results.StatusOK {
		// Let the connection be reused: the server ends the body right after [DONE].
		io.CopyN(io.Discard, resp.Body, 4096)
	}
}

// readStream reads the SSE stream into res (the pull side, over net/http's body).
func (c *Client) readStream(ctx, rctx context.Context, sse *sseReader, res *results.Result, onTokens func(int)) {
	c.readStreamInto(ctx, rctx, sse, res, onTokens, nil)
}

// readStreamInto is readStream that also appends the output text to *answer, when set.
func (c *Client) readStreamInto(ctx, rctx context.Context, sse *sseReader, res *results.Result, onTokens func(int), answer *[]byte) {
	var st streamState
	st.begin(c, res, onTokens)
	st.answer = answer
	for sse.Next() {
		if st.event(sse.Stamp(), sse.Event(), sse.Data()) {
			break
		}
	}
	if st.over() {
		st.end()
		return
	}
	if err := sse.Err(); err != nil {
		res.Status, res.Error = classifyStreamErr(ctx, rctx, err, c.opts.Timeout, len(res.ChunkNS))
		return
	}
	st.end()
}

// streamState turns a stream's events into its record. Both clients feed it: the pull
// loop above and the raw client's push parser, so a stream means the same to either.
type streamState struct {
	c           *Client
	res         *results.Result
	onTokens    func(int)
	text        []byte
	done        bool // [DONE] seen
	failed      bool // res.Status and res.Error are set
	finished    bool // a finish_reason was seen
	chunkTokens []int32
	everyUsage  bool // every output chunk carried cumulative usage
	prevCompl   int32
	usageSeen   bool
	nEvents     int
	ci          chunkInfo
	answer      *[]byte // when set, every output chunk's text is appended (a conversation's history)
	maxChunks   int     // maxOutputChunks of the request
}

// maxOutputChunks is the most output chunks a stream may carry for a request asking for
// maxTokens tokens: 2·maxTokens+16. A server streams at most one chunk per token (vLLM,
// SGLang, TGI, llama.cpp, OpenAI); one that sends more ignores max_tokens or is hostile,
// and the request ends there as a stream_error. The cap bounds a record's chunk lists
// (12 bytes a chunk) and the text kept for token counting or a conversation's history.
func maxOutputChunks(maxTokens int32) int { return 2*max(int(maxTokens), 0) + 16 }

func (st *streamState) begin(c *Client, res *results.Result, onTokens func(int)) {
	// A chunk a token, as servers stream: one allocation each for the chunk times and
	// counts instead of the ~8 that append's doubling takes to 100 (2.8% of the
	// replayer's CPU at 300 req/s, growslice in the profile); at most chunkPrealloc, so
	// that a large max_tokens with a short answer holds no more than 3 KiB.
	prealloc := min(max(int(res.OutputTokensTarget), 1), chunkPrealloc)
	*st = streamState{c: c, res: res, onTokens: onTokens, chunkTokens: make([]int32, 0, prealloc), everyUsage: true,
		maxChunks: maxOutputChunks(res.OutputTokensTarget)}
	res.ChunkNS = res.ChunkNS[:0]
	if cap(res.ChunkNS) == 0 {
		res.ChunkNS = make([]int64, 0, prealloc)
	}
}

// chunkPrealloc bounds the chunk times a stream's record makes room for at its start.
const chunkPrealloc = 256

// over reports whether the stream needs no more events: [DONE] came or it failed.
func (st *streamState) over() bool { return st.done || st.failed }

// mustCount reports whether end will count the output with the tokenizer (the server
// reported no usage): work for a goroutine, not for a reactor's thread.
func (st *streamState) mustCount() bool {
	return !st.failed && st.countsText()
}

// countsText reports whether the output is counted from its text: no usage was reported,
// and the client has a tokenizer.
func (st *streamState) countsText() bool {
	return !st.usageSeen && len(st.text) > 0 && st.c.opts.CountTokens != nil
}

func (st *streamState) fail(s results.Status, msg string) {
	st.res.Status, st.res.Error, st.failed = s, msg, true
}

// event takes one event, stamped when its last byte was read; it returns true when the
// stream is over ([DONE], or a failure recorded in the result).
func (st *streamState) event(stamp int64, name, data []byte) bool {
	res := st.res
	st.nEvents++
	if string(name) == "error" {
		st.fail(results.StatusStreamError, "server error event: "+shortText(data))
		return true
	}
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		st.done = true
		return true
	}
	ci := &st.ci
	if err := parseChunk(data, ci); err != nil {
		st.fail(results.StatusStreamError, fmt.Sprintf("event %d: malformed chunk: %v: %s", st.nEvents, err, shortText(data)))
		return true
	}
	if ci.isErr {
		st.fail(results.StatusStreamError, "server error mid-stream: "+shortText([]byte(ci.errMsg)))
		return true
	}
	output := ci.output
	if output && len(res.ChunkNS) == st.maxChunks {
		st.fail(results.StatusStreamError, fmt.Sprintf("more than %d output chunks for max_tokens %d (at most 2 per token + 16): stream cut",
			st.maxChunks, res.OutputTokensTarget))
		return true
	}
	if output && st.c.opts.CountTokens != nil {
		st.text = append(st.text, ci.text...)
	}
	if output && st.answer != nil {
		*st.answer = append(*st.answer, ci.text...)
	}
	st.finished = st.finished || ci.finished
	if output {
		off := stamp - res.SentNS
		if res.FirstTokenNS == results.Null {
			res.FirstTokenNS = stamp
		}
		res.EndNS = stamp
		res.ChunkNS = append(res.ChunkNS, off)
		if ci.usage && ci.hasCompl {
			n := ci.compl - st.prevCompl
			st.prevCompl = ci.compl
			st.chunkTokens = append(st.chunkTokens, n)
			if st.onTokens != nil {
				st.onTokens(int(n))
			}
		} else {
			st.everyUsage = false
			if st.onTokens != nil {
				st.onTokens(1)
			}
		}
	} else if ci.usage && ci.hasCompl && ci.choices > 0 {
		st.prevCompl = ci.compl
	}
	if ci.usage && ci.choices == 0 {
		st.usageSeen = true
		if ci.hasPrompt {
			res.PromptTokensServer = ci.prompt
		}
		if ci.hasCompl {
			res.OutputTokens = ci.compl
			res.OutputTokensSource = results.SourceUsage
		}
		if ci.hasCached && ci.cached >= 0 {
			res.PromptTokensCached = ci.cached
		}
	}
	return false
}

// end completes the record after the last event at a clean end of the stream ([DONE],
// a failure already recorded, or the body's end).
func (st *streamState) end() {
	res := st.res
	if st.failed {
		return
	}
	if !st.done && !st.finished {
		st.fail(results.StatusStreamError, fmt.Sprintf("stream ended before [DONE] after %d output chunks", len(res.ChunkNS)))
		return
	}
	res.Status = results.StatusOK
	if st.everyUsage && len(st.chunkTokens) > 0 && len(st.chunkTokens) == len(res.ChunkNS) {
		res.ChunkTokens = st.chunkTokens
	}
	if st.countsText() {
		res.OutputTokens = int32(st.c.opts.CountTokens(string(st.text)))
		res.OutputTokensSource = results.SourceTokenizer
	} else if !st.usageSeen && len(res.ChunkNS) == 0 {
		res.OutputTokens = 0
		res.OutputTokensSource = results.SourceTokenizer
	}
}

// classifyErr maps an error from sending a request to a status and message.
func classifyErr(ctx, rctx context.Context, err error, timeout time.Duration) (results.Status, string) {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL is known; keep messages short
	}
	return beforeResponse(ctx.Err() != nil, rctx.Err() == context.DeadlineExceeded, timeout, err)
}

// classifyStreamErr maps an error while reading a stream to a status and message.
func classifyStreamErr(ctx, rctx context.Context, err error, timeout time.Duration, chunks int) (results.Status, string) {
	canceled, timedOut := ctx.Err() != nil, rctx.Err() == context.DeadlineExceeded
	if !canceled && !timedOut && errors.Is(err, ErrLineTooLong) {
		return results.StatusStreamError, err.Error()
	}
	return midStream(canceled, timedOut, timeout, chunks, err)
}

// beforeResponse words a request that ended before a response: a stop of the run comes
// first, then the request's timeout, then err. Both HTTP clients word errors with it
// and midStream.
func beforeResponse(canceled, timedOut bool, timeout time.Duration, err error) (results.Status, string) {
	switch {
	case canceled:
		return results.StatusCanceled, "canceled before a response: run interrupted"
	case timedOut:
		return results.StatusTimeout, fmt.Sprintf("no response within the %v timeout", timeout)
	}
	return results.StatusTransportError, err.Error()
}

// midStream words a stream that ended early after chunks output chunks.
func midStream(canceled, timedOut bool, timeout time.Duration, chunks int, err error) (results.Status, string) {
	switch {
	case canceled:
		return results.StatusCanceled, fmt.Sprintf("canceled mid-stream after %d output chunks: run interrupted", chunks)
	case timedOut:
		return results.StatusTimeout, fmt.Sprintf("stream not finished within the %v timeout (%d output chunks)", timeout, chunks)
	}
	return results.StatusStreamError, fmt.Sprintf("stream broken after %d output chunks: %v", chunks, err)
}

// encoded reports a Content-Encoding other than identity. The client sends no
// Accept-Encoding (compression would hold chunks back), so a server that compresses
// anyway is answered with an error rather than decompressed: the timings of a stream that
// went through a compressor are not the engine's.
func encoded(contentEncoding string) bool {
	return contentEncoding != "" && !strings.EqualFold(strings.TrimSpace(contentEncoding), "identity")
}

// streamEncoded words a 2xx response compressed without being asked to.
func streamEncoded(contentEncoding string) string {
	return fmt.Sprintf("response body has Content-Encoding %s, which the client did not ask for (no Accept-Encoding): not read",
		shortText([]byte(contentEncoding)))
}

// httpErrorEncoded words an error response whose body is compressed without being asked to.
func httpErrorEncoded(status int, contentEncoding string) string {
	return fmt.Sprintf("HTTP %d: (a %s body, which the client did not ask for)", status, shortText([]byte(contentEncoding)))
}

// httpErrorMessage reads a little of an error response for its message.
func httpErrorMessage(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, rawErrBody))
	return httpErrorText(resp.StatusCode, b)
}

// httpErrorText words an error response from its status and first bytes.
func httpErrorText(status int, b []byte) string {
	var e streamChunk
	msg := ""
	if json.Unmarshal(b, &e) == nil {
		msg, _ = e.errorMessage()
	}
	if msg == "" {
		msg = string(b)
	}
	return fmt.Sprintf("HTTP %d: %s", status, shortText([]byte(msg)))
}

// shortText returns b on one line, at most 200 bytes, for error messages.
func shortText(b []byte) string {
	const max = 200
	s := strings.Join(strings.Fields(string(bytes.ToValidUTF8(b, []byte("?")))), " ")
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// authorize gives req the run's credentials and extra headers: --header values, the base
// URL's userinfo as basic auth, the API key as a bearer token (it wins over the userinfo).
func authorize(req *http.Request, base *url.URL, apiKey string, header http.Header) {
	for k, v := range header {
		req.Header[k] = v
	}
	if base.User != nil {
		pw, _ := base.User.Password()
		req.SetBasicAuth(base.User.Username(), pw)
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
}

// ListModels returns the model ids of GET BASE/models, in the order served.
func ListModels(ctx context.Context, base *url.URL, apiKey string, header http.Header, insecure bool) ([]string, error) {
	u := *base
	u.User = nil
	u.Path += "/models"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	authorize(req, base, apiKey, header)
	hc := &http.Client{Transport: NewTransport(1, insecure), Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("list models at %s: %w", SafeEndpoint(&u), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list models at %s: %s", SafeEndpoint(&u), Scrub(httpErrorMessage(resp), Secrets(base, apiKey, header)))
	}
	var body struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("list models at %s: %w", SafeEndpoint(&u), err)
	}
	ids := make([]string, 0, len(body.Data))
	for _, d := range body.Data {
		ids = append(ids, d.ID)
	}
	return ids, nil
}
