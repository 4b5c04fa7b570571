package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmreplay/llmreplay/media"
	"github.com/llmreplay/llmreplay/sim/pooling"
	"github.com/llmreplay/llmreplay/sim/stampconn"
	"github.com/llmreplay/llmreplay/tokenize"
)

// Server is the simulated OpenAI-compatible engine. It is safe for concurrent use.
type Server struct {
	cfg   Config
	info  Info
	enc   *tokenize.Encoding
	rule  media.Rule      // counts a request's images (Config.ImageRule)
	eng   *engine         // nil for the fixed profile
	pool  *pooling.Engine // the pooling engine (pooling.go); nil for the fixed profile
	epoch time.Time
	mux   *http.ServeMux

	closing   chan struct{}
	closeOnce sync.Once

	reqIndex atomic.Uint64 // generation requests that passed validation, in arrival order
	created  int64

	// counters for /metrics
	inflight                     atomic.Int64 // fixed profile: requests being served
	fixedPrompt, fixedGen        atomic.Int64
	finishedLength, finishedStop atomic.Int64
	badRequests                  atomic.Int64
	faultCount                   [numFaults]atomic.Int64
	e2e                          e2eHist // vllm:e2e_request_latency_seconds, model time
	// The fixed profile's pooling inputs: being served, their tokens, and done.
	poolInflight, fixedPoolPrompt, poolFixedDone atomic.Int64

	modelJSON      []byte // the model name as a JSON string, for chunk heads
	counts         countCache
	chatRoleTokens map[string]int // tokens of "role\n" per role
	lateness       *latenessLog   // set by benchmarks only
	fixedLate      [2]lateHist    // fixed profile: lateness of first and later writes
	chatReply      int            // tokens of "<|im_start|>assistant\n"

	// Prefix cache: the token ids the chat template adds, and each output word's id, so
	// the handler can hash exactly the token stream the engine would hold.
	prefix      bool
	chatRoleIDs map[string][]int // ids of "role\n" per role
	newlineIDs  []int            // ids of "\n"
	wordIDs     [len(words)]uint32

	reqLog   *requestLog // nil unless Config.RequestLog
	stopOnce sync.Once

	// The fixed profile's precise writer (Linux), started by the first stream that can use
	// it; fixedFallbacks counts the streams it handed back to their handler (slow readers).
	sched          *scheduler
	schedOnce      sync.Once
	fixedFallbacks atomic.Int64
	fixedPrecise   atomic.Int64 // streams handed to the precise writer

	noPrecise       atomic.Bool       // tests: every stream takes the goroutine path (set at any time, also while streams start)
	preciseReturned func(st *pstream) // tests: called as servePrecise returns
}

// New validates cfg and starts the engine loop. Close stops it.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	rule, err := cfg.imageRule()
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	cfg.ImageRule = rule.Name() // /sim/info says the rule in force, the default too
	s := &Server{
		rule:           rule,
		cfg:            cfg,
		info:           Analyze(cfg),
		enc:            enc,
		closing:        make(chan struct{}),
		created:        time.Now().Unix(),
		chatRoleTokens: map[string]int{},
	}
	s.modelJSON, _ = json.Marshal(cfg.Model)
	for _, r := range []string{"system", "developer", "user", "assistant", "tool"} {
		s.chatRoleTokens[r] = enc.Count(r + "\n")
	}
	s.chatReply = 1 + s.chatRoleTokens["assistant"]
	if s.prefix = cfg.prefixCaching(); s.prefix {
		s.chatRoleIDs = map[string][]int{}
		for r := range s.chatRoleTokens {
			s.chatRoleIDs[r] = enc.Encode(r + "\n")
		}
		s.newlineIDs = enc.Encode("\n")
		for i, w := range words {
			ids := enc.Encode(w)
			if len(ids) != 1 {
				return nil, fmt.Errorf("sim: output word %q is %d tokens, want 1", w, len(ids))
			}
			s.wordIDs[i] = uint32(ids[0])
		}
	}
	if cfg.RequestLog != "" {
		if s.reqLog, err = openRequestLog(cfg.RequestLog); err != nil {
			return nil, err
		}
	}
	if cfg.Fixed {
		s.epoch = time.Now()
	} else {
		s.eng = newEngine(&s.cfg)
		s.epoch = s.eng.epoch
		s.pool = pooling.NewEngine(s.cfg.poolStep, s.cfg.poolLimits(), s.epoch, s.cfg.TimeScale)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGen(w, r, apiCompletions) })
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGen(w, r, apiChat) })
	mux.HandleFunc("/v1/messages", func(w http.ResponseWriter, r *http.Request) { s.serveGen(w, r, apiMessages) })
	mux.HandleFunc("/v1/responses", func(w http.ResponseWriter, r *http.Request) { s.serveGen(w, r, apiResponses) })
	mux.HandleFunc("/v1/messages/count_tokens", s.serveCountTokens)
	mux.HandleFunc("/v1/embeddings", s.serveEmbeddings)
	for _, p := range []string{"/rerank", "/v1/rerank", "/v2/rerank"} { // vLLM serves all three
		mux.HandleFunc(p, s.serveRerank)
	}
	mux.HandleFunc("/v1/models", s.serveModels)
	mux.HandleFunc("/tokenize", s.serveTokenize)
	mux.Handle("/metrics", s.metricsHandler())
	mux.HandleFunc("/sim/info", s.serveInfo)
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: 404, typ: "NotFoundError", msg: "no route " + r.URL.Path})
	})
	s.mux = mux
	return s, nil
}

// Handler serves /v1/models, /v1/completions, /v1/chat/completions, /v1/messages,
// /v1/messages/count_tokens, /v1/responses, /v1/embeddings, /rerank (and /v1/rerank,
// /v2/rerank), /tokenize, /metrics, /sim/info and /health.
func (s *Server) Handler() http.Handler { return s.mux }

// Info returns the configuration and its analytical limits.
func (s *Server) Info() Info { return s.info }

// Close stops the engine loop, ends every open stream (without [DONE]) and closes the
// request log. It is safe to call more than once.
func (s *Server) Close() {
	s.stop()
	s.closeOnce.Do(func() {
		if s.reqLog != nil {
			s.reqLog.close()
		}
	})
}

// stop ends the streams and the engine, leaving the request log open for the handlers
// that are still finishing.
func (s *Server) stop() {
	s.stopOnce.Do(func() {
		close(s.closing)
		if s.eng != nil {
			s.eng.close()
			s.pool.Close()
		}
		s.schedOnce.Do(func() {}) // none is started after this
		s.sched.close()
	})
}

// scheduler returns the precise writer, starting it on first use; nil when there is none.
func (s *Server) precise() *scheduler {
	s.schedOnce.Do(func() { s.sched = newScheduler() })
	return s.sched
}

// acceptHook, when set (by tests), is called with each connection Start's listener
// accepts.
var acceptHook func(net.Conn)

// Running is a Server listening on a TCP address.
type Running struct {
	srv  *Server
	hs   *http.Server
	ln   net.Listener
	done chan struct{}
	err  error
	once sync.Once
}

// Start listens on addr (e.g. "127.0.0.1:0") and serves cfg until Close or until ctx ends.
func Start(ctx context.Context, addr string, cfg Config) (*Running, error) {
	srv, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("sim: listen %s: %w", addr, err)
	}
	if cfg.Fixed {
		// The precise writer serves the streams of a listening fixed profile: start it
		// with the server, not on the first stream, so it is part of the server's own
		// footprint (a client's leak checks count goroutines after Start).
		srv.precise()
	}
	r := &Running{
		srv:  srv,
		hs:   &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, ConnContext: stampconn.ConnContext},
		ln:   stampconn.Listener{Listener: ln, OnAccept: acceptHook},
		done: make(chan struct{}),
	}
	go func() {
		defer close(r.done)
		if err := r.hs.Serve(r.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.err = err
		}
	}()
	go func() {
		select {
		case <-ctx.Done():
			r.Close()
		case <-r.done:
		}
	}()
	return r, nil
}

// BaseURL is the OpenAI base URL, "http://HOST:PORT/v1".
func (r *Running) BaseURL() string { return "http://" + r.ln.Addr().String() + "/v1" }

// Addr is the address listened on.
func (r *Running) Addr() net.Addr { return r.ln.Addr() }

// Info returns the server's configuration and analytical limits.
func (r *Running) Info() Info { return r.srv.Info() }

// Server returns the underlying Server.
func (r *Running) Server() *Server { return r.srv }

// Close ends open streams, stops the engine and the listener, and waits for the handlers.
func (r *Running) Close() error {
	r.once.Do(func() {
		r.srv.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.hs.Shutdown(ctx); err != nil {
			r.hs.Close()
		}
		<-r.done
		r.srv.Close() // the handlers have returned: their request-log lines are in
	})
	return r.err
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    int     `json:"code"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	var b errorBody
	b.Error.Message, b.Error.Type, b.Error.Code = e.msg, e.typ, e.status
	if e.param != "" {
		b.Error.Param = &e.param
	}
	if e.status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.status, b)
}

// anthropicErrorTypes are the error types of Anthropic's API reference by HTTP status
// (https://docs.anthropic.com/en/api/errors). vLLM's router puts its OpenAI error type
// there (vllm/entrypoints/anthropic/api_router.py); the sim follows the reference, so a
// client is tested against the shape Anthropic documents.
var anthropicErrorTypes = map[int]string{
	400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
	404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
	429: "rate_limit_error", 500: "api_error", 503: "overloaded_error", 529: "overloaded_error",
}

// writeAnthropicError answers e in the Messages API's shape:
// {"type":"error","error":{"type":...,"message":...}}.
func writeAnthropicError(w http.ResponseWriter, e *apiError) {
	typ := anthropicErrorTypes[e.status]
	if typ == "" {
		typ = "api_error"
	}
	var b struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	b.Type, b.Error.Type, b.Error.Message = "error", typ, e.msg
	if e.status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.status, b)
}

const maxBody = 64 << 20

func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		return nil, &apiError{status: 405, typ: "MethodNotAllowed", msg: r.Method + " not allowed: use POST"}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &apiError{status: 413, typ: "BadRequestError", msg: fmt.Sprintf("body over %d bytes", maxBody)}
		}
		return nil, badRequest("", "read body: %v", err)
	}
	return body, nil
}

func (s *Server) checkModel(model string) *apiError {
	if model != "" && model != s.cfg.Model {
		return &apiError{status: 404, typ: "NotFoundError", param: "model",
			msg: fmt.Sprintf("The model `%s` does not exist. This server serves `%s`.", model, s.cfg.Model)}
	}
	return nil
}

// promptTokens counts the prompt as the engine would: cl100k_base for text, len(ids) for
// token ids, and for chat a ChatML template: the tools first (toolTokens), then
// per message <|im_start|> + "role\n" + content + its images' tokens (imageTokens, by
// the server's rule) + <|im_end|> + "\n", then <|im_start|> + "assistant\n" for the
// reply (pieces tokenized separately).
// With h non-nil it also feeds h that token stream (for the prefix cache); with spans
// non-nil it appends each image's place in the stream and encoder time (visionSpan).
func (s *Server) promptTokens(p *parsedPrompt, h *blockHasher, spans *[]visionSpan) int {
	switch {
	case p.isIDs:
		if h != nil {
			h.addInts(p.ids)
		}
		return len(p.ids)
	case p.messages != nil:
		if h == nil {
			n := s.toolTokens(p.tools, nil)
			for _, m := range p.messages {
				n += 1 + s.chatRoleTokens[m.role] + s.count(m.content, nil)
				n += s.imageTokens(m.images, nil, n, spans) + 2
			}
			return n + s.chatReply
		}
		n := s.toolTokens(p.tools, h)
		for _, m := range p.messages {
			h.add(imStart)
			h.addInts(s.chatRoleIDs[m.role])
			n += 1 + len(s.chatRoleIDs[m.role]) + s.count(m.content, h)
			n += s.imageTokens(m.images, h, n, spans) + 1 + len(s.newlineIDs)
			h.add(imEnd)
			h.addInts(s.newlineIDs)
		}
		h.add(imStart)
		h.addInts(s.chatRoleIDs["assistant"])
		return n + 1 + len(s.chatRoleIDs["assistant"])
	default:
		return s.count(p.text, h)
	}
}

// toolTokens counts the tool definitions (descs, their descriptions) by the sim's rule,
// each its description's tokens and ToolOverheadTokens, and feeds them to h when h is not
// nil: the overhead as toolMarker tokens, then the description, before the messages, as
// chat templates put the tools in the system block.
func (s *Server) toolTokens(descs []string, h *blockHasher) int {
	n := 0
	for _, d := range descs {
		if h != nil {
			for range ToolOverheadTokens {
				h.add(toolMarker)
			}
		}
		n += ToolOverheadTokens + s.count(d, h)
	}
	return n
}

// countCache remembers token counts of long texts (pieces of them: textPiece) by a 64-bit
// hash of their bytes. cl100k_base counting through tiktoken-go costs about 2.5 µs per
// token (12 ms for a 4.5k-token prompt), while replays repeat prompts: a sweep replays
// the same trace at several rates, chat requests share system prompts, and an agent's
// every call sends its context again.
//
// With the prefix cache on, a piece's block hashes are needed too, and they depend on
// where the piece starts (the hash chain before it, and how far into a block it starts).
// memo keeps, per piece and starting point, what the piece does to the block hasher: the
// blocks it completes and the state it leaves, 8 bytes per block of 16 tokens rather
// than 4 bytes a token for its ids. An agent's context is the same pieces at the same
// starting points on every call, so a session's next call hashes only its new text; and
// a thousand sessions of 100k tokens fit in 50 MB.
type countCache struct {
	mu     sync.Mutex
	seed   maphash.Seed
	m      map[uint64]int // text hash -> tokens
	memo   map[uint64]hashMemo
	hashes int // block hashes held by memo

	encoded atomic.Int64 // bytes of long text tokenized (the caches' misses), for tests
}

// hashMemo is what one piece of text did to a block hasher from one starting point.
type hashMemo struct {
	tokens int
	state  uint64   // the hasher's state after the piece
	n      int      // tokens into the current block after the piece
	hashes []uint64 // the blocks the piece completed
}

const (
	countCacheMinBytes = 256     // shorter texts are cheaper to count than to hash and look up
	countCacheEntries  = 1 << 16 // the counts are cleared when they reach this many...
	memoEntries        = 1 << 18 // ...and the memo at this many entries...
	memoHashes         = 1 << 23 // ...or this many block hashes (64 MiB: 128M tokens in blocks of 16)
)

// memoKey names a piece (by the hash of its text) at one starting point of the hasher.
func memoKey(text uint64, h *blockHasher) uint64 {
	return mix64(text ^ mix64(h.state^uint64(h.n)*0x9e3779b97f4a7c15))
}

// pieceBytes is the least length of a piece of a long text (see textPiece).
const pieceBytes = 8 << 10

// textPiece returns the length of text's first piece: up to the first piece boundary at
// least pieceBytes in, or all of it. A boundary is just after a newline that an ASCII
// letter or digit follows. cl100k_base's pre-tokenizer (the regular expression that cuts
// text into the pieces BPE then encodes one by one) always cuts there: none of its
// alternatives matches across a newline into a letter or digit (those that take
// newlines end with them), and none looks behind. So the text's tokens are its pieces'
// tokens, end to end (TestTextPiecesTokenize checks it). And the cuts depend only on the
// bytes before them: a prompt that grows by appends (an agent's context as one text)
// has its previous version's pieces, all but the last, which the count cache then knows.
func textPiece(text string) int {
	for i := pieceBytes; i < len(text); i++ {
		if pieceCut(text, i) {
			return i
		}
	}
	return len(text)
}

// pieceCut reports whether textPiece may cut text before byte i: a newline before it, an
// ASCII letter or digit at it.
func pieceCut(text string, i int) bool {
	if i < 1 || i >= len(text) || text[i-1] != '\n' {
		return false
	}
	c := text[i]
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// count returns the number of tokens of text, and feeds them to h when h is not nil. A
// long text is counted piece by piece (textPiece), each through the count cache, so
// that a text that grows by appends is not tokenized whole again each time.
func (s *Server) count(text string, h *blockHasher) int {
	n := 0
	for len(text) > 0 {
		k := textPiece(text)
		n += s.countPiece(text[:k], h)
		text = text[k:]
	}
	return n
}

// countPiece counts one piece of a text, through the count cache when it is long, and
// feeds its tokens to h when h is not nil (through the memo when it has seen the piece
// from the same starting point).
func (s *Server) countPiece(text string, h *blockHasher) int {
	if len(text) < countCacheMinBytes {
		if h == nil {
			return s.enc.Count(text)
		}
		ids := s.enc.Encode(text)
		h.addInts(ids)
		return len(ids)
	}
	c := &s.counts
	c.mu.Lock()
	if c.m == nil {
		c.seed, c.m, c.memo = maphash.MakeSeed(), make(map[uint64]int), make(map[uint64]hashMemo)
	}
	key := maphash.String(c.seed, text)
	if h == nil {
		n, ok := c.m[key]
		c.mu.Unlock()
		if ok {
			return n
		}
		c.encoded.Add(int64(len(text)))
		n = s.enc.Count(text)
		s.rememberCount(key, n)
		return n
	}
	mk := memoKey(key, h)
	m, ok := c.memo[mk]
	c.mu.Unlock()
	if ok {
		h.hashes = append(h.hashes, m.hashes...)
		h.state, h.n = m.state, m.n
		return m.tokens
	}
	c.encoded.Add(int64(len(text)))
	ids := s.enc.Encode(text)
	first := len(h.hashes)
	h.addInts(ids)
	m = hashMemo{tokens: len(ids), state: h.state, n: h.n, hashes: slices.Clone(h.hashes[first:])}
	c.mu.Lock()
	if len(c.memo) >= memoEntries || c.hashes+len(m.hashes) > memoHashes {
		clear(c.memo)
		c.hashes = 0
	}
	c.memo[mk] = m
	c.hashes += len(m.hashes)
	c.mu.Unlock()
	s.rememberCount(key, len(ids))
	return len(ids)
}

// rememberCount puts a long text's token count in the count cache.
func (s *Server) rememberCount(key uint64, n int) {
	c := &s.counts
	c.mu.Lock()
	if len(c.m) >= countCacheEntries {
		clear(c.m)
	}
	c.m[key] = n
	c.mu.Unlock()
}

func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) {
	type model struct {
		ID          string  `json:"id"`
		Object      string  `json:"object"`
		Created     int64   `json:"created"`
		OwnedBy     string  `json:"owned_by"`
		Root        string  `json:"root"`
		Parent      *string `json:"parent"`
		MaxModelLen int     `json:"max_model_len"`
	}
	writeJSON(w, 200, map[string]any{"object": "list", "data": []model{{
		ID: s.cfg.Model, Object: "model", Created: s.created, OwnedBy: "llmreplay-sim", Root: s.cfg.Model, MaxModelLen: s.cfg.MaxModelLen,
	}}})
}

func (s *Server) serveInfo(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.info) }

// bodyOr reads a request's body, or answers the failure with fail (counted as a bad
// request) and returns nil.
func (s *Server) bodyOr(w http.ResponseWriter, r *http.Request, fail func(http.ResponseWriter, *apiError)) []byte {
	body, aerr := s.readBody(w, r)
	if aerr != nil {
		s.badRequests.Add(1)
		fail(w, aerr)
		return nil
	}
	if body == nil {
		body = []byte{}
	}
	return body
}

// serveTokenize answers like vLLM's /tokenize: {"count","max_model_len","tokens","token_strs"}.
func (s *Server) serveTokenize(w http.ResponseWriter, r *http.Request) {
	body := s.bodyOr(w, r, writeError)
	if body == nil {
		return
	}
	var req struct {
		Model    *string         `json:"model"`
		Prompt   json.RawMessage `json:"prompt"`
		Messages json.RawMessage `json:"messages"`
		Tools    json.RawMessage `json:"tools"` // chat's shape, with messages
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.badRequests.Add(1)
		writeError(w, badRequest("", "invalid JSON body: %s", jsonErr(err)))
		return
	}
	if req.Model != nil {
		if aerr := s.checkModel(*req.Model); aerr != nil {
			writeError(w, aerr)
			return
		}
	}
	var tokens []int
	if len(req.Messages) > 0 && string(req.Messages) != "null" {
		msgs, err := parseMessages(req.Messages)
		if err == nil {
			if _, aerr := loadImages(msgs, nil); aerr != nil {
				err = aerr
			}
		}
		if err != nil {
			s.badRequests.Add(1)
			writeError(w, err.(*apiError))
			return
		}
		descs, aerr := parseTools(req.Tools, apiChat)
		if aerr != nil {
			s.badRequests.Add(1)
			writeError(w, aerr)
			return
		}
		for _, d := range descs { // as toolTokens hashes them
			for range ToolOverheadTokens {
				tokens = append(tokens, toolMarker)
			}
			tokens = append(tokens, s.enc.Encode(d)...)
		}
		for _, m := range msgs {
			tokens = append(tokens, imStart)
			tokens = append(tokens, s.enc.Encode(m.role+"\n")...)
			tokens = append(tokens, s.enc.Encode(m.content)...)
			for range s.imageTokens(m.images, nil, 0, nil) {
				tokens = append(tokens, imagePad)
			}
			tokens = append(tokens, imEnd)
			tokens = append(tokens, s.enc.Encode("\n")...)
		}
		tokens = append(tokens, imStart)
		tokens = append(tokens, s.enc.Encode("assistant\n")...)
	} else {
		p, err := parsePrompt(req.Prompt)
		if err != nil {
			s.badRequests.Add(1)
			writeError(w, err.(*apiError))
			return
		}
		if p.isIDs {
			tokens = p.ids
		} else {
			tokens = s.enc.Encode(p.text)
		}
	}
	if tokens == nil {
		tokens = []int{}
	}
	writeJSON(w, 200, map[string]any{"count": len(tokens), "max_model_len": s.cfg.MaxModelLen, "tokens": tokens, "token_strs": nil})
}

// serveCountTokens answers Anthropic's messages.count_tokens as vLLM does
// (vllm/entrypoints/anthropic/serving.py, count_tokens): the prompt tokens a Messages
// request of the same model, system, messages and tools would have, as
// {"input_tokens":N,"context_management":{"original_input_tokens":N}}.
func (s *Server) serveCountTokens(w http.ResponseWriter, r *http.Request) {
	body := s.bodyOr(w, r, writeAnthropicError)
	if body == nil {
		return
	}
	p, err := parseLifted(body, func(b []byte) (*params, error) { return parseMessagesRequest(b, true) },
		func(p *params) []parsedMessage { return p.prompt.messages })
	if err != nil {
		s.badRequests.Add(1)
		writeAnthropicError(w, err.(*apiError))
		return
	}
	if aerr := s.checkModel(p.model); aerr != nil {
		writeAnthropicError(w, aerr)
		return
	}
	n := s.promptTokens(&p.prompt, nil, nil)
	type ctxMgmt struct {
		Original int `json:"original_input_tokens"`
	}
	writeJSON(w, 200, struct {
		InputTokens int     `json:"input_tokens"`
		Context     ctxMgmt `json:"context_management"`
	}{n, ctxMgmt{n}})
}

// ChatML's special tokens in cl100k_base's id space.
const (
	imStart = 100264
	imEnd   = 100265
)

// fault kinds, indexing Server.faultCount.
const (
	fault429 = iota
	fault500
	fault503
	faultDisconnect
	faultMalformed
	faultStall
	faultSlowFirstByte
	faultStreamError
	numFaults
)

var faultNames = [numFaults]string{"429", "500", "503", "disconnect", "malformed", "stall", "slow-first-byte", "stream-error"}

// plan is what one request will do: its output length and its faults, all drawn from a
// generator seeded by (Config.Seed, request index) so a run sees the same faults each time
// requests arrive in the same order.
type plan struct {
	target       int
	finish       string
	status       int
	slowFirst    time.Duration // real time
	stallAt      int
	stallFor     time.Duration // real time
	malformedAt  int
	disconnectAt int
	errorAt      int // the stream ends with an error before this token
	reasoning    int // the first answer token: those before it are reasoning
	wordOff      int
	id           uint64
}

// clean reports whether the plan streams without a fault (the precise writer's case).
func (p *plan) clean() bool {
	return p.status == 0 && p.slowFirst == 0 && p.stallAt < 0 && p.malformedAt < 0 && p.disconnectAt < 0 && p.errorAt < 0
}

func (s *Server) realDur(d time.Duration) time.Duration {
	return time.Duration(float64(d) / s.cfg.TimeScale)
}

func (s *Server) makePlan(idx uint64, maxTokens, minTokens int, ignoreEOS bool) plan {
	rng := rand.New(rand.NewPCG(s.cfg.Seed, idx))
	p := plan{target: maxTokens, finish: "length", stallAt: -1, malformedAt: -1, disconnectAt: -1, errorAt: -1}
	p.id = rng.Uint64()
	p.wordOff = rng.IntN(len(words))
	if !ignoreEOS && s.cfg.EOSMeanTokens > 0 {
		// Geometric on {1,2,...} with mean m: P(stop after each token) = 1/m.
		u := rng.Float64()
		natural := 1
		if s.cfg.EOSMeanTokens > 1 {
			natural = 1 + int(math.Floor(math.Log1p(-u)/math.Log1p(-1/float64(s.cfg.EOSMeanTokens))))
		}
		natural = max(natural, minTokens, 1)
		if natural < maxTokens {
			p.target, p.finish = natural, "stop"
		}
	}
	f := s.cfg.Faults
	u := rng.Float64()
	switch {
	case u < f.Status429:
		p.status = 429
	case u < f.Status429+f.Status500:
		p.status = 500
	case u < f.Status429+f.Status500+f.Status503:
		p.status = 503
	}
	if rng.Float64() < f.SlowFirstByte {
		p.slowFirst = s.realDur(f.SlowFirstByteFor)
	}
	if rng.Float64() < f.Stall {
		p.stallAt, p.stallFor = rng.IntN(p.target), s.realDur(f.StallFor)
	}
	if rng.Float64() < f.Malformed {
		p.malformedAt = rng.IntN(p.target)
	}
	if rng.Float64() < f.Disconnect {
		p.disconnectAt = rng.IntN(p.target)
	}
	// Drawn last, so that the draws before it, and the plans of a seed without it, are
	// those they were before it existed.
	if f.StreamError > 0 && rng.Float64() < f.StreamError {
		p.errorAt = rng.IntN(p.target)
	}
	return p
}

func (s *Server) countFaults(p *plan) {
	switch p.status {
	case 429:
		s.faultCount[fault429].Add(1)
	case 500:
		s.faultCount[fault500].Add(1)
	case 503:
		s.faultCount[fault503].Add(1)
	}
	if p.status != 0 {
		return
	}
	if p.slowFirst > 0 {
		s.faultCount[faultSlowFirstByte].Add(1)
	}
	if p.stallAt >= 0 {
		s.faultCount[faultStall].Add(1)
	}
	if p.malformedAt >= 0 {
		s.faultCount[faultMalformed].Add(1)
	}
	if p.disconnectAt >= 0 {
		s.faultCount[faultDisconnect].Add(1)
	}
	if p.errorAt >= 0 {
		s.faultCount[faultStreamError].Add(1)
	}
}

// sleep waits d or until the request or the server ends; it reports whether d elapsed.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.closing:
		return false
	}
}
