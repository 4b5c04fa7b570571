package transport

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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/wire"
)

// ClientOptions configure a Client.
type ClientOptions struct {
	BaseURL     *url.URL      // e.g. http://127.0.0.1:8000/v1 (userinfo becomes basic auth, never logged)
	API         wire.API      // completions, chat, messages or responses
	Backend     wire.Backend  // chooses the length-forcing fields
	Model       string        // model name sent in every request (but those replay.Options.Models maps)
	APIKey      string        // sent as "Authorization: Bearer ..." (and in the kind's KeyHeader); never logged or stored
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
	// every request that has one; "" sends none (replay's route.go).
	SessionHeader string
	// ReadBatch (raw client): while a reactor reads at least ReactorBatchMin responses of
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
	if _, err := wire.ParseAPI(string(o.API)); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if _, err := wire.ParseBackend(string(o.Backend)); err != nil {
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
	if k, ok := wire.Lookup(o.API); o.TokenIDPrompts && (!ok || !k.TokenIDs) {
		return errors.New("client: token-id prompts need the completions API")
	}
	if _, err := ParseHTTPClient(o.HTTPClient); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	if err := CheckSessionHeader(o.SessionHeader); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	for k, vs := range o.Header {
		if !ValidHeaderName(k) {
			return fmt.Errorf("client: header name %q is not a valid HTTP token", k)
		}
		if err := CheckExtraHeader(k, o.SessionHeader); err != nil {
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

// DefaultMaxInflight is the raw client's pool size when ClientOptions.MaxInflight is 0,
// and replay's in-flight limit by default.
const DefaultMaxInflight = 4096

// MaxReadBatch bounds ClientOptions.ReadBatch: it is also how late a chunk can be dated.
const MaxReadBatch = 10 * time.Millisecond

// Client sends prepared requests and times their streams. It is safe for concurrent use.
type Client struct {
	opts   ClientOptions
	url    string
	header http.Header
	hc     *http.Client
	raw    *rawTransport // the raw HTTP/1.1 client, when it serves the endpoint
	enc    wire.Encoder  // builds the bodies of the API for the backend
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
	enc, err := wire.NewEncoder(o.API, o.Backend, o.TokenIDPrompts)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	u := *wire.APIURL(o.BaseURL, o.API)
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
	SetAPIKey(h, enc.Kind(), o.Backend, o.APIKey)
	for name, v := range enc.Kind().Headers {
		if h.Get(name) == "" { // a --header of the same name wins
			h.Set(name, v)
		}
	}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "text/event-stream")
	if enc.Kind().Unary {
		h.Set("Accept", "application/json")
	}
	if h.Get("User-Agent") == "" {
		h.Set("User-Agent", "llmreplay")
	}
	c := &Client{
		opts:    o,
		enc:     enc,
		url:     u.String(),
		header:  h,
		secrets: Secrets(o.BaseURL, o.APIKey, o.Header),
		hc: &http.Client{
			Transport: NewTransport(o.MaxInflight, o.Insecure),
			// Redirects would re-send the body: an inference endpoint never needs them.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	c.bodyPrefix = c.BodyPrefix(o.Model)
	choice, _ := ParseHTTPClient(o.HTTPClient)
	raw, err := useRaw(choice, &u)
	if err != nil {
		return nil, err
	}
	if raw {
		c.raw = newRawTransport(&u, wire.ModelsURL(o.BaseURL), h, o.MaxInflight, o.SessionHeader)
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

// ValidHeaderName reports whether k is an HTTP token (RFC 9110, section 5.6.2).
func ValidHeaderName(k string) bool {
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
	u := wire.ModelsURL(c.opts.BaseURL)
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

// AppendBody appends the JSON body asking for outputTokens tokens after prompt.
func (c *Client) AppendBody(b []byte, prompt []byte, outputTokens int32) []byte {
	return c.AppendPromptBody(b, c.bodyPrefix, prompt, outputTokens, nil, nil)
}

// Options returns the client's options, with NewClient's defaults filled in.
func (c *Client) Options() ClientOptions { return c.opts }

// DefaultBodyPrefix returns the constant start of every body sent to the client's own
// model (ClientOptions.Model), for AppendPromptBody and AppendMessagesBody. It is shared:
// the caller must not change it.
func (c *Client) DefaultBodyPrefix() []byte { return c.bodyPrefix }

// BodyPrefix returns the constant start of every body sent to model, as
// DefaultBodyPrefix is the start of those sent to the client's own model.
func (c *Client) BodyPrefix(model string) []byte { return c.enc.AppendStart(nil, model) }

// AppendPromptBody is AppendBody with the body's constant start given (DefaultBodyPrefix
// or a BodyPrefix): the model is the only field that differs between requests' starts.
// tools, when not empty, is the description of the one tool the body carries, escaped as
// inside a JSON string (wire.Encoder.WithTools); an API without tools ignores it. images,
// when not empty, go with the prompt in one user message (wire.Encoder.WithImages).
func (c *Client) AppendPromptBody(b, prefix []byte, prompt []byte, outputTokens int32, tools []byte, images []wire.Image) []byte {
	return c.enc.WithTools(tools).WithImages(images).AppendBody(b, prefix, prompt, outputTokens)
}

// AppendInputsBody is the body of a unary API's request carrying inputs, with the body's
// constant start given (wire.Encoder.AppendInputsBody).
func (c *Client) AppendInputsBody(b, prefix []byte, inputs [][]byte) []byte {
	return c.enc.AppendInputsBody(b, prefix, inputs)
}

// Unary reports whether the client's API answers with one JSON body (wire.Kind.Unary).
func (c *Client) Unary() bool {
	k := c.enc.Kind()
	return k != nil && k.Unary
}

// TakesImages reports whether the client's API takes images.
func (c *Client) TakesImages() bool { return c.enc.TakesImages() }

// TakesTools reports whether the client's API takes tool definitions.
func (c *Client) TakesTools() bool { return c.enc.TakesTools() }

// AppendContextBody is the body of a request whose conversation is a shared context, then
// tail (wire.Encoder.AppendContextBody): the context's bytes go at the returned offset
// (Request.Shared, Request.SharedAt).
func (c *Client) AppendContextBody(b, prefix []byte, outputTokens int32, tail, tools []byte) ([]byte, int) {
	return c.enc.WithTools(tools).AppendContextBody(b, prefix, outputTokens, tail)
}

// AppendMessagesBody is AppendPromptBody for the chat API with the messages given, JSON
// objects separated by commas (a conversation's history and its new user message).
func (c *Client) AppendMessagesBody(b, prefix []byte, messages []byte, outputTokens int32, tools []byte) []byte {
	return c.enc.WithTools(tools).AppendMessagesBody(b, prefix, messages, outputTokens)
}

// TakesMessages reports whether the client's API takes a conversation as role messages
// (wire.Kind.AppendMessages: chat, Anthropic's messages): a conversation's turns and an
// agent's context then go as user and assistant messages, else as one prompt's text.
func (c *Client) TakesMessages() bool {
	k := c.enc.Kind()
	return k != nil && k.AppendMessages != nil
}

// Request is one prepared Request: everything needed to send it is computed.
type Request struct {
	ID           int64
	DueNS        int64 // offset from the run start
	PromptTokens int32
	OutputTokens int32
	Body         []byte
	// Shared, when set, is part of the body that other requests share and nobody copies:
	// an agent's context, tens of thousands of tokens long. The body sent is
	// Body[:SharedAt], then Shared, then Body[SharedAt:] (BodyParts).
	Shared   []byte
	SharedAt int
	Warmup   bool   // sent but not recorded
	Head     []byte // the raw client's request head, built with the body
	// RunID is the run id of the X-Request-Id header (RUNID-ID); "" sends none. A request
	// prepared before the run id was known has it set at dispatch (replay's dispatcher.withRunID), which
	// also writes it over the placeholder at Head[RunIDAt:].
	RunID      string
	RunIDAt    int   // offset of the run id in head; 0 when head has no X-Request-Id
	Session    int64 // the trace's session id, sent in the session header when hasSession
	HasSession bool
	// Inputs is what a unary API's request carries (embeddings' inputs, rerank's
	// documents): its answer must have as many results. 0 for a generation.
	Inputs int32

	// Answer is where the stream appends the output text when Capture is set (a
	// conversation's next turn needs it in its history).
	Answer  []byte
	Capture bool
}

// BodyLen returns the length of the body r sends.
func (r *Request) BodyLen() int { return len(r.Body) + len(r.Shared) }

// BodyParts returns the body r sends in the order it is sent: Body around Shared.
func (r *Request) BodyParts() [3][]byte {
	if r.Shared == nil {
		return [3][]byte{r.Body}
	}
	return [3][]byte{r.Body[:r.SharedAt], r.Shared, r.Body[r.SharedAt:]}
}

// bodyReader returns a reader of the body r sends.
func (r *Request) bodyReader() io.Reader {
	if r.Shared == nil {
		return bytes.NewReader(r.Body)
	}
	p := r.BodyParts()
	return io.MultiReader(bytes.NewReader(p[0]), bytes.NewReader(p[1]), bytes.NewReader(p[2]))
}

// AnswerBuf returns where the stream appends r's output text: &r.answer when the next
// turn's history needs it, else nil.
func (r *Request) AnswerBuf() *[]byte {
	if !r.Capture {
		return nil
	}
	return &r.Answer
}

// Clock reads nanoseconds since the run start (Start) from the monotonic clock.
type Clock struct{ Start time.Time }

// Now returns the nanoseconds since the run start.
func (c Clock) Now() int64 { return int64(time.Since(c.Start)) }

// Scrub takes the client's secrets out of res's error text.
func (c *Client) Scrub(res *results.Result) {
	if res.Error != "" && len(c.secrets) > 0 {
		res.Error = Scrub(res.Error, c.secrets)
	}
}

// doHTTP is httpTransport.roundTrip without the scrub. ctx ends the request early (a
// hard stop: the result is canceled); the per-request timeout is applied here.
func (c *Client) doHTTP(ctx context.Context, clk Clock, r *Request, res *results.Result, sse *SSEReader, onTokens func(int)) {
	rctx := ctx
	if c.opts.Timeout > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
	}
	var wrote atomic.Int64 // set by the transport's writer goroutine
	wrote.Store(results.Null)
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
		wrote.CompareAndSwap(results.Null, clk.Now())
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(rctx, trace), http.MethodPost, c.url, r.bodyReader())
	if err != nil {
		res.Status, res.Error = results.StatusTransportError, "build request: "+err.Error()
		return
	}
	if r.Shared != nil { // net/http knows the length of a bytes.Reader only
		req.ContentLength = int64(r.BodyLen())
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(r.bodyReader()), nil }
	}
	req.Header = c.requestHeader(r)
	before := clk.Now()
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
		if wire.Encoded(enc) {
			res.Error = wire.EncodedErrorText(resp.StatusCode, enc)
		} else {
			res.Error = httpErrorMessage(resp)
		}
		return
	}
	if wire.Encoded(enc) {
		res.Status, res.Error = results.StatusStreamError, wire.EncodedStreamText(enc)
		return
	}
	if c.enc.Kind().Unary {
		c.readUnary(ctx, rctx, clk, resp, res)
		return
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		res.Status = results.StatusStreamError
		res.Error = fmt.Sprintf("response is not an event stream (Content-Type %q)", ct)
		return
	}
	sse.Reset(resp.Body)
	c.readStreamInto(ctx, rctx, sse, res, onTokens, r.AnswerBuf())
	if res.Status == results.StatusOK {
		// Let the connection be reused: the server ends the body right after [DONE].
		io.CopyN(io.Discard, resp.Body, 4096)
	}
}

// readStream reads the SSE stream into res (the pull side, over net/http's body).
func (c *Client) readStream(ctx, rctx context.Context, sse *SSEReader, res *results.Result, onTokens func(int)) {
	c.readStreamInto(ctx, rctx, sse, res, onTokens, nil)
}

// readStreamInto is readStream that also appends the output text to *answer, when set.
func (c *Client) readStreamInto(ctx, rctx context.Context, sse *SSEReader, res *results.Result, onTokens func(int), answer *[]byte) {
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
	everyUsage  bool // every output chunk so far increased the cumulative usage
	prevCompl   int32
	usageSeen   bool
	nEvents     int
	ci          wire.Chunk
	answer      *[]byte // when set, every output chunk's text is appended (a conversation's history)
	maxChunks   int     // maxOutputChunks of the request
	// Reasoning, touched only by chunks that carry some (reasoningChunk), so that a stream
	// without reasoning pays one test a chunk for it.
	reasoned      bool   // a chunk carried reasoning
	mixed         bool   // a chunk carried reasoning and answer: its tokens cannot be split
	reasoningTok  int32  // chunk tokens of the chunks that carried only reasoning
	reasoningText []byte // the reasoning text, kept when the client has a tokenizer
	// The recording proxy's Tap (tap.go) sets these; the replayer leaves them zero.
	private bool   // failures carry no byte of the stream (it can echo the prompt)
	textCap int    // > 0: the most text kept for counting; past it nothing is counted
	textCut bool   // the text outgrew textCap: the output's count is unknown
	wantID  bool   // the Responses API's response id is looked for (takeID)
	id      string // the response id found
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
	return !st.failed && (st.countsText() || st.countsReasoning())
}

// countsText reports whether the output is counted from its text: no usage was reported,
// and the client has a tokenizer.
func (st *streamState) countsText() bool {
	return !st.usageSeen && len(st.text) > 0 && st.c.opts.CountTokens != nil // (cutText empties text)
}

// countsReasoning reports whether end counts the reasoning from its text: the stream
// reasoned, neither the usage nor the chunk tokens say how much, and the client has a
// tokenizer.
func (st *streamState) countsReasoning() bool {
	return st.reasoned && st.res.ReasoningTokens == results.Null && !st.reasoningFromChunks() &&
		st.c.opts.CountTokens != nil && !st.textCut
}

// reasoningFromChunks reports whether the chunk tokens give the reasoning count: every
// output chunk's tokens are known (they become chunk_tokens) and none mixed reasoning
// with answer.
func (st *streamState) reasoningFromChunks() bool {
	return !st.mixed && st.everyUsage && len(st.chunkTokens) > 0 && len(st.chunkTokens) == len(st.res.ChunkNS)
}

// reasoningChunk takes an output chunk that carried reasoning, after its chunk tokens
// were counted. Out of line: a stream without reasoning never calls it.
//
//go:noinline
func (st *streamState) reasoningChunk(ci *wire.Chunk) {
	st.reasoned = true
	if st.res.ReasoningTokens == 0 && st.res.ReasoningTokensSource == results.SourceUsage {
		// A usage said 0 before this reasoning came (event's comment): no count.
		st.res.ReasoningTokens, st.res.ReasoningTokensSource = results.Null, ""
	}
	switch {
	case ci.Answer:
		st.mixed = true
	case st.everyUsage && len(st.chunkTokens) == len(st.res.ChunkNS):
		st.reasoningTok += st.chunkTokens[len(st.chunkTokens)-1]
	}
	if st.c.opts.CountTokens != nil && !st.textCut {
		st.reasoningText = append(st.reasoningText, ci.Reasoning...)
	}
}

func (st *streamState) fail(s results.Status, msg string) {
	st.res.Status, st.res.Error, st.failed = s, msg, true
}

// failText fails the stream with what, followed by the server's text unless private.
func (st *streamState) failText(what string, text []byte) {
	if !st.private {
		what += ": " + wire.ShortText(text)
	}
	st.fail(results.StatusStreamError, what)
}

// malformed fails the stream at an event that did not decode. The decoder's error and the
// event are left out when private: both can quote the event's bytes.
func (st *streamState) malformed(err error, data []byte) {
	if st.private {
		st.fail(results.StatusStreamError, fmt.Sprintf("event %d: malformed chunk", st.nEvents))
		return
	}
	st.fail(results.StatusStreamError, fmt.Sprintf("event %d: malformed chunk: %v: %s", st.nEvents, err, wire.ShortText(data)))
}

// takeID looks for the response's id in an event of the Responses API's stream: the
// response object of response.created, its first event (OpenAI's reference, vLLM,
// SGLang, Ollama), or of the events just after it. It gives up after the third event, so
// that a stream without one pays for three decodes.
//
//go:noinline
func (st *streamState) takeID(data []byte) {
	var e struct {
		Response *struct {
			ID string `json:"id"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &e) == nil && e.Response != nil && e.Response.ID != "" {
		st.id, st.wantID = e.Response.ID, false
	}
	if st.nEvents >= 3 {
		st.wantID = false
	}
}

// cutText drops the text kept for counting once it outgrew textCap: nothing is counted
// from it then (a count of part of the text would be a wrong number), and the memory goes.
//
//go:noinline
func (st *streamState) cutText() {
	st.textCut = true
	st.text, st.reasoningText = nil, nil
}

// event takes one event, stamped when its last byte was read; it returns true when the
// stream is over ([DONE], or a failure recorded in the result).
func (st *streamState) event(stamp int64, name, data []byte) bool {
	res := st.res
	st.nEvents++
	if st.wantID {
		st.takeID(data)
	}
	if string(name) == "error" {
		st.failText("server error event", data)
		return true
	}
	if string(bytes.TrimSpace(data)) == "[DONE]" {
		st.done = true
		return true
	}
	ci := &st.ci
	// The encoder calls the built-in decoders directly (wire.Encoder.Decode), so that st,
	// which holds ci, stays on the stack.
	if err := st.c.enc.Decode(data, ci); err != nil {
		st.malformed(err, data)
		return true
	}
	if ci.IsError {
		st.failText("server error mid-stream", []byte(ci.ErrorMessage))
		return true
	}
	output := ci.Output
	if output && len(res.ChunkNS) == st.maxChunks {
		st.fail(results.StatusStreamError, fmt.Sprintf("more than %d output chunks for max_tokens %d (at most 2 per token + 16): stream cut",
			st.maxChunks, res.OutputTokensTarget))
		return true
	}
	if output && st.c.opts.CountTokens != nil && !st.textCut {
		st.text = append(st.text, ci.Text...)
		if st.textCap > 0 && len(st.text)+len(st.reasoningText) > st.textCap {
			st.cutText()
		}
	}
	if output && st.answer != nil {
		*st.answer = append(*st.answer, ci.Text...)
	}
	st.finished = st.finished || ci.Finished
	if output {
		off := stamp - res.SentNS
		if res.FirstTokenNS == results.Null {
			res.FirstTokenNS = stamp
		}
		if ci.Answer && res.FirstAnswerNS == results.Null {
			res.FirstAnswerNS = stamp
		}
		res.EndNS = stamp
		res.ChunkNS = append(res.ChunkNS, off)
		// A chunk's tokens are the increase of the cumulative completion_tokens. A
		// chunk that carries text and does not increase it (Ollama's all-zero
		// placeholder usage on every chunk, a count that stalls or goes back) says the
		// stream's per-chunk usage is not a running count: the stream then has no
		// chunk_tokens, as when a server sends no per-chunk usage, and the progress
		// counts a chunk a token.
		if st.everyUsage && ci.Usage && ci.HasCompletion && ci.CompletionTokens > st.prevCompl {
			n := ci.CompletionTokens - st.prevCompl
			st.prevCompl = ci.CompletionTokens
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
		if len(ci.Reasoning) > 0 {
			st.reasoningChunk(ci)
		}
	} else if ci.Usage && ci.HasCompletion && ci.Choices > 0 {
		// A chunk with no text may still count tokens (a role chunk, tokens whose text
		// is held back); a count going back is no running count.
		if ci.CompletionTokens < st.prevCompl {
			st.everyUsage = false
		}
		st.prevCompl = ci.CompletionTokens
	}
	if ci.Usage && ci.Choices == 0 {
		// Only an output count makes counting the text needless: a usage of the prompt
		// alone (the Messages API's message_start) leaves the output to the tokenizer
		// until a later usage counts it.
		st.usageSeen = st.usageSeen || ci.HasCompletion
		if ci.HasPrompt {
			res.PromptTokensServer = ci.PromptTokens
		}
		if ci.HasCompletion {
			res.OutputTokens = ci.CompletionTokens
			res.OutputTokensSource = results.SourceUsage
		}
		if ci.HasCached && ci.Cached >= 0 {
			res.PromptTokensCached = ci.Cached
		}
		// A count of 0 after reasoning was streamed is no count: Ollama's usage says 0
		// whatever its model did (a constant, v0.17.4), so the next way of knowing counts.
		if ci.HasReasoningTokens && (ci.ReasoningTokens > 0 || ci.ReasoningTokens == 0 && !st.reasoned) {
			res.ReasoningTokens, res.ReasoningTokensSource = ci.ReasoningTokens, results.SourceUsage
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
		st.fail(results.StatusStreamError, fmt.Sprintf("stream ended before %s after %d output chunks", st.c.enc.Kind().StopName(), len(res.ChunkNS)))
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
	// The usage's count, taken as it came, wins; a stream that never reasoned and whose
	// server said nothing has no reasoning count (null), not 0.
	if st.reasoned && res.ReasoningTokens == results.Null {
		switch {
		case st.reasoningFromChunks():
			res.ReasoningTokens, res.ReasoningTokensSource = st.reasoningTok, results.SourceChunkUsage
		case st.countsReasoning():
			res.ReasoningTokens = int32(st.c.opts.CountTokens(string(st.reasoningText)))
			res.ReasoningTokensSource = results.SourceTokenizer
		}
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

// httpErrorMessage reads a little of an error response for its message.
func httpErrorMessage(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, rawErrBody))
	return wire.HTTPErrorText(resp.StatusCode, b)
}

// Authorize gives req the run's credentials and extra headers: --header values, the base
// URL's userinfo as basic auth, the API key as a bearer token (it wins over the userinfo).
func Authorize(req *http.Request, base *url.URL, apiKey string, header http.Header) {
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
	u := wire.ModelsURL(base)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	Authorize(req, base, apiKey, header)
	hc := &http.Client{Transport: NewTransport(1, insecure), Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("list models at %s: %w", wire.SafeEndpoint(u), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list models at %s: %s", wire.SafeEndpoint(u), Scrub(httpErrorMessage(resp), Secrets(base, apiKey, header)))
	}
	var body struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("list models at %s: %w", wire.SafeEndpoint(u), err)
	}
	ids := make([]string, 0, len(body.Data))
	for _, d := range body.Data {
		ids = append(ids, d.ID)
	}
	return ids, nil
}
