package sim

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmreplay/llmreplay/sim/stampconn"
)

// words are the output vocabulary: each is one cl100k_base token, and so is each in any
// concatenation of them (a leading space starts a new pre-token), so a client that counts
// the text with cl100k_base gets the server's completion_tokens.
var words = [...]string{
	" the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " was", " with",
	" be", " by", " on", " not", " he", " this", " are", " or", " his", " from", " at", " which",
	" but", " have", " an", " had", " they", " you", " were", " their", " one", " all", " we",
	" can", " her", " has", " there", " been", " if", " more", " when", " will", " would", " who",
	" so", " no", " time", " people", " year", " new", " first", " work", " good", " way", " day",
	" man", " world", " life", " hand", " part", " place", " case",
}

// Timing trailers, sent when the request has header X-Sim-Timing: 1. Values are model
// nanoseconds since the engine's epoch, so tests can check the model without wall-clock
// noise.
const (
	TrailerArrival = "X-Sim-Arrival-Ns"
	TrailerQueued  = "X-Sim-Queued-Ns" // the step start at which the engine took it in
	TrailerAdmit   = "X-Sim-Admit-Ns"
	TrailerFirst   = "X-Sim-First-Ns"
	TrailerLast    = "X-Sim-Last-Ns"
	TrailerAhead   = "X-Sim-Waiting-Ahead"
	// The engine's total generated tokens at this request's admission and at its last
	// token (engine profiles only): samples of aggregate progress in model time.
	TrailerGenAtAdmit = "X-Sim-Gen-At-Admit"
	TrailerGenAtLast  = "X-Sim-Gen-At-Last"
	// TrailerFirstAnswer is the first answer (non-reasoning) token's model time; absent
	// when the whole answer is reasoning.
	TrailerFirstAnswer = "X-Sim-First-Answer-Ns"
	TimingHeader       = "X-Sim-Timing"
)

// chunker writes one request's SSE chunks into a byte slice with no per-token allocation:
// the JSON head (id, object, created, model) is encoded once.
type chunker struct {
	id         string // the response's id, also in head
	head       []byte
	api        apiKind
	chat       bool // api == apiChat, the hot path's test
	prompt     int
	target     int
	finish     string
	continuous bool
	wordOff    int
	// details: the final usage carries prompt_tokens_details.cached_tokens (the prefix
	// cache is on); cached is that count, known once the first token exists.
	details bool
	cached  int
	// reasoning: the first reasoning tokens are streamed as reasoning (Config.ReasoningShare);
	// reasoningUsage: chat's usage says so (Config.ReasoningUsage).
	reasoning      int
	reasoningUsage bool
	// The event-stream APIs' (events.go): the model name as JSON, the response's
	// creation time, its output cap, and the Messages thinking block's signature.
	model     []byte
	created   int64
	maxTokens int
	sig       string
}

// appendUsage appends the usage object; final adds prompt_tokens_details (vLLM puts it
// in the final usage only, not in continuous_usage_stats chunks).
func (c *chunker) appendUsage(b []byte, completion int, final bool) []byte {
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(c.prompt), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(c.prompt+completion), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	if final && c.details {
		b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(c.cached), 10)
		b = append(b, '}')
	}
	if final && c.reasoningUsage {
		b = append(b, `,"completion_tokens_details":{"reasoning_tokens":`...)
		b = strconv.AppendInt(b, int64(c.reasoning), 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendRole appends the chat stream's first chunk (role, empty content), sent with the
// first token as vLLM does.
func (c *chunker) appendRole(b []byte) []byte {
	b = append(b, c.head...)
	b = append(b, `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`...)
	if c.continuous {
		b = c.appendUsage(b, 0, false)
	}
	return append(b, "}\n\n"...)
}

// appendStart appends what goes out with the first token, before it: chat's role chunk,
// Messages' message_start and first block start, Responses' first item's start.
func (c *chunker) appendStart(b []byte) []byte {
	switch c.api {
	case apiChat:
		return c.appendRole(b)
	case apiMessages:
		return c.appendMessagesStart(b)
	case apiResponses:
		return c.appendItemStart(b, c.reasoning > 0, 2)
	}
	return b
}

// appendEnd appends what ends a stream after its last token: the final usage chunk (if
// asked for) and [DONE], or the event APIs' closing events.
func (c *chunker) appendEnd(b []byte, usage bool) []byte {
	switch c.api {
	case apiMessages:
		return c.appendMessagesEnd(b)
	case apiResponses:
		return c.appendResponsesEnd(b)
	}
	if usage {
		b = c.appendFinalUsage(b)
	}
	return append(b, "data: [DONE]\n\n"...)
}

// appendToken appends the chunk of token i (0-based). A chat reasoning token's delta is
// "reasoning", the field vLLM's reasoning parsers fill (DeltaMessage in
// vllm/entrypoints/openai/engine/protocol.py, the newest release's; older releases sent
// reasoning_content).
func (c *chunker) appendToken(b []byte, i int) []byte {
	if c.api.events() {
		if c.api == apiMessages {
			return c.appendMessagesToken(b, i)
		}
		return c.appendResponsesToken(b, i)
	}
	b = append(b, c.head...)
	if c.chat {
		if i < c.reasoning {
			b = append(b, `,"choices":[{"index":0,"delta":{"reasoning":"`...)
		} else {
			b = append(b, `,"choices":[{"index":0,"delta":{"content":"`...)
		}
	} else {
		b = append(b, `,"choices":[{"index":0,"text":"`...)
	}
	b = append(b, words[(i+c.wordOff)%len(words)]...)
	if c.chat {
		b = append(b, `"},"logprobs":null,"finish_reason":`...)
	} else {
		b = append(b, `","logprobs":null,"finish_reason":`...)
	}
	if i == c.target-1 {
		b = append(b, '"')
		b = append(b, c.finish...)
		b = append(b, '"')
	} else {
		b = append(b, "null"...)
	}
	if c.chat {
		b = append(b, "}]"...) // vLLM's chat stream choice has no stop_reason
	} else {
		b = append(b, `,"stop_reason":null}]`...)
	}
	switch {
	case c.continuous:
		b = c.appendUsage(b, i+1, false)
	case !c.chat:
		// vLLM dumps completion chunks with exclude_unset=False, so usage is there as null;
		// chat chunks omit it.
		b = append(b, `,"usage":null`...)
	}
	return append(b, "}\n\n"...)
}

func (c *chunker) appendFinalUsage(b []byte) []byte {
	b = append(b, c.head...)
	b = append(b, `,"choices":[]`...)
	b = c.appendUsage(b, c.target, true)
	return append(b, "}\n\n"...)
}

// appendMalformed appends a chunk whose JSON is cut short.
func (c *chunker) appendMalformed(b []byte) []byte {
	if c.api.events() {
		return c.appendEventMalformed(b)
	}
	b = append(b, c.head...)
	b = append(b, `,"choices":[{"index":0,"te`...)
	return append(b, "\n\n"...)
}

func (c *chunker) text() string {
	var sb strings.Builder
	for i := range c.target {
		sb.WriteString(words[(i+c.wordOff)%len(words)])
	}
	return sb.String()
}

// latenessLog records, for the fixed profile, how late each write left the handler
// relative to its due time (the sim's own share of a client's TTFT/ITL error).
type latenessLog struct {
	mu          sync.Mutex
	first, rest []time.Duration
}

func (l *latenessLog) add(first bool, d time.Duration) {
	l.mu.Lock()
	if first {
		l.first = append(l.first, d)
	} else {
		l.rest = append(l.rest, d)
	}
	l.mu.Unlock()
}

// lateBounds are the upper bounds, in seconds, of the fixed profile's write-lateness
// histogram buckets.
var lateBounds = []float64{50e-6, 100e-6, 200e-6, 300e-6, 500e-6, 750e-6, 1e-3, 1.5e-3, 2e-3, 3e-3, 5e-3, 7.5e-3, 10e-3, 20e-3, 50e-3, 100e-3, 1}

// lateHist counts how late the fixed profile's writes leave the handler, relative to
// the exact schedule (the sim's own share of a client's TTFT and ITL error), in
// constant memory: /metrics serves it as a Prometheus histogram.
type lateHist struct {
	counts [18]atomic.Int64 // len(lateBounds) + the +Inf bucket
	sumNS  atomic.Int64
}

func (h *lateHist) observe(d time.Duration) {
	d = max(d, 0)
	i := 0
	for i < len(lateBounds) && d.Seconds() > lateBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNS.Add(int64(d))
}

// tokenSource blocks until more than sent tokens exist and returns how many do.
type tokenSource interface {
	// next returns the number of tokens available (> sent) or ok=false when the request
	// or the server ended first.
	next(ctx context.Context, sent int) (n int, ok bool)
	times() timing
	// cachedTokens is the prompt tokens read from the prefix cache; valid once next has
	// returned a token.
	cachedTokens() int
	cancel()
}

type engineSource struct {
	s   *seq
	srv *Server
}

func (e *engineSource) next(ctx context.Context, sent int) (int, bool) {
	for {
		if n := int(e.s.produced.Load()); n > sent {
			return n, true
		}
		select {
		case <-e.s.notify:
		case <-ctx.Done():
			return 0, false
		case <-e.srv.closing:
			return 0, false
		}
	}
}

// timing is one request's model times (see the X-Sim-* trailers).
type timing struct {
	arrival, queued, admit, first, last time.Duration
	answer                              time.Duration // the first answer token's
	ahead                               int
	genAtAdmit, genAtLast               int64
}

func (e *engineSource) times() timing {
	s := e.s
	if !s.done.Load() {
		return timing{}
	}
	return timing{s.arrivalM, s.queuedM, s.admitM, s.firstM, s.lastM, s.answerM, s.waitingAhead, s.genAtAdmit, s.genAtLast}
}

func (e *engineSource) cancel() { e.s.canceled.Store(true) }

// cachedTokens reads s.cached, written by the engine at admission, before the atomic
// store of the first produced token that the handler has loaded.
func (e *engineSource) cachedTokens() int { return e.s.cached }

// fixedSource emits token i at recv + (FixedTTFT + i*FixedITL)/TimeScale exactly.
type fixedSource struct {
	srv      *Server
	recv     time.Time
	target   int
	answerAt int // the first answer token
	timer    *time.Timer
}

func (f *fixedSource) due(i int) time.Time {
	c := &f.srv.cfg
	return f.recv.Add(f.srv.realDur(c.FixedTTFT + time.Duration(i)*c.FixedITL))
}

func (f *fixedSource) next(ctx context.Context, sent int) (int, bool) {
	if wait := time.Until(f.due(sent)); wait > 0 {
		if f.timer == nil {
			f.timer = time.NewTimer(wait)
		} else {
			f.timer.Reset(wait)
		}
		select {
		case <-f.timer.C:
		case <-ctx.Done():
			return 0, false
		case <-f.srv.closing:
			return 0, false
		}
	}
	return f.dueTokens(sent, time.Now()), true
}

func (f *fixedSource) times() timing {
	c := &f.srv.cfg
	a := scaleDur(f.recv.Sub(f.srv.epoch), c.TimeScale)
	first := a + c.FixedTTFT
	return timing{arrival: a, queued: a, admit: a, first: first, last: first + time.Duration(f.target-1)*c.FixedITL,
		answer: first + time.Duration(f.answerAt)*c.FixedITL}
}

func (f *fixedSource) cachedTokens() int { return 0 }

func (f *fixedSource) cancel() {
	if f.timer != nil {
		f.timer.Stop()
	}
	f.srv.inflight.Add(-1)
}

// serveGen answers a generation request of the API, streamed or whole. Its phases: stamp
// the arrival, open the request-log record, decode and check the request, plan it and
// play the faults that come before any token, start the token source, then answer.
func (s *Server) serveGen(w http.ResponseWriter, r *http.Request, api apiKind) {
	// Arrival is stamped before the body is read and parsed, so the server's own request
	// handling is inside the modelled TTFT rather than added to it.
	recv := time.Now()
	conn := stampconn.FromContext(r.Context())
	recv, readNs, arriveNs := earliestArrival(conn, recv)
	rid := echoRequestID(w, r)
	var rec *LogRecord
	if s.reqLog != nil {
		rec = &LogRecord{RequestID: rid, API: apiNames[api], Status: 200, Outcome: "canceled", ReadUnixNs: readNs, ArriveUnixNs: arriveNs}
		defer s.logRequest(rec)
	}
	req, aerr := s.decodeGen(w, r, api, rec)
	if aerr != nil {
		failGen(w, api, rec, aerr, "bad_request")
		return
	}
	ctx := r.Context()
	pl, recv, ok := s.planGen(ctx, w, rec, req, recv)
	if !ok {
		return
	}
	src := s.startSource(recv, req, &pl)
	defer src.cancel()
	ck := s.newChunker(api, req.prompt, req.p.continuous, &pl)
	ck.maxTokens = req.maxTokens
	a := &reply{w: w, ck: ck, src: src, pl: pl, rec: rec,
		wantTiming: r.Header.Get(TimingHeader) != ""}
	if rec != nil {
		rec.ID, rec.PromptTokens = a.ck.id, req.prompt
		defer a.recordOK()
	}
	a.announceTrailers()
	if !req.p.stream {
		s.serveWhole(ctx, a)
		return
	}
	s.serveStream(ctx, a, r, conn, req.p.includeUsage)
}

// earliestArrival returns the request's true arrival: recv, or earlier the return of the
// read that delivered the request's head, or earlier still the kernel's receive time of
// its bytes (sim/stampconn); the schedule starts there. readNs and arriveNs are those two
// stamps (0 when not the arrival) for the request log. conn is nil when the listener is
// not the sim's own.
func earliestArrival(conn *stampconn.Conn, recv time.Time) (arrival time.Time, readNs, arriveNs int64) {
	if conn == nil {
		return recv, 0, 0
	}
	read, arrive := conn.LastRead()
	if !read.IsZero() && read.Before(recv) {
		recv, readNs = read, read.UnixNano()
	}
	if !arrive.IsZero() && arrive.Before(recv) {
		recv, arriveNs = arrive, arrive.UnixNano()
	}
	return recv, readNs, arriveNs
}

// echoRequestID returns the request's RequestIDHeader, cut to maxRequestIDBytes, and
// sets it on the response.
func echoRequestID(w http.ResponseWriter, r *http.Request) string {
	rid := r.Header.Get(RequestIDHeader)
	if len(rid) > maxRequestIDBytes {
		rid = rid[:maxRequestIDBytes]
	}
	if rid != "" {
		w.Header().Set(RequestIDHeader, rid)
	}
	return rid
}

// failGen answers the request with e in the API's error shape and records the outcome
// (rec may be nil).
func failGen(w http.ResponseWriter, api apiKind, rec *LogRecord, e *apiError, outcome string) {
	if rec != nil {
		rec.Status, rec.Outcome, rec.Error = e.status, outcome, e.msg
	}
	if api == apiMessages {
		writeAnthropicError(w, e)
		return
	}
	writeError(w, e)
}

// checkedGen is a decoded request that fits the model.
type checkedGen struct {
	p         *params
	prompt    int          // prompt tokens, the images' included
	visions   []visionSpan // its images' places in the prompt and encoder times
	maxTokens int          // with the API's default applied
	hasher    *blockHasher // the prompt's block hashes; nil without the prefix cache
}

// decodeGen reads, decodes and checks the request; every failure but an unknown model is
// counted as a bad request. The prompt is tokenized (and hashed for the prefix cache)
// here, on the handler's goroutine, after the arrival stamp.
func (s *Server) decodeGen(w http.ResponseWriter, r *http.Request, api apiKind, rec *LogRecord) (checkedGen, *apiError) {
	body, aerr := s.readBody(w, r)
	if aerr != nil {
		s.badRequests.Add(1)
		return checkedGen{}, aerr
	}
	p, err := parseGenRequest(body, api)
	if err != nil {
		s.badRequests.Add(1)
		return checkedGen{}, err.(*apiError)
	}
	if rec != nil {
		rec.Stream = p.stream
	}
	if aerr := s.checkModel(p.model); aerr != nil {
		return checkedGen{}, aerr
	}
	var hasher *blockHasher
	if s.prefix {
		hasher = newBlockHasher(s.cfg.PrefixBlockTokens)
		// Room for the prompt's and the output's blocks, so the hashes grow at most once.
		est := max(p.maxTokens, 0) + len(p.prompt.ids) + len(p.prompt.text)/3
		for _, m := range p.prompt.messages {
			est += 6 + len(m.content)/3 + s.imageTokens(m.images, nil, 0, nil)
		}
		for _, d := range p.prompt.tools {
			est += ToolOverheadTokens + len(d)/3
		}
		hasher.hashes = make([]uint64, 0, est/hasher.size+1)
	}
	var spans []visionSpan
	prompt := s.promptTokens(&p.prompt, hasher, &spans)
	if prompt < 1 {
		s.badRequests.Add(1)
		return checkedGen{}, badRequest("prompt", "prompt has no tokens")
	}
	maxTokens := p.maxTokens
	if maxTokens < 0 {
		if api == apiCompletions {
			maxTokens = s.cfg.DefaultMaxTokens
		} else {
			maxTokens = min(s.cfg.DefaultChatMaxTokens, s.cfg.MaxModelLen-prompt)
		}
	}
	if api == apiResponses {
		// vLLM caps max_output_tokens at the context left rather than refusing it
		// (ResponsesRequest.to_sampling_params).
		maxTokens = min(maxTokens, s.cfg.MaxModelLen-prompt)
	}
	if maxTokens < 1 || prompt+maxTokens > s.cfg.MaxModelLen {
		s.badRequests.Add(1)
		return checkedGen{}, badRequest("max_tokens", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d in the completion). Please reduce the length of the prompt or completion.",
			s.cfg.MaxModelLen, prompt+maxTokens, prompt, maxTokens)
	}
	if p.minTokens > maxTokens {
		s.badRequests.Add(1)
		return checkedGen{}, badRequest("min_tokens", "min_tokens (%d) must be <= max_tokens (%d)", p.minTokens, maxTokens)
	}
	return checkedGen{p: p, prompt: prompt, maxTokens: maxTokens, hasher: hasher, visions: spans}, nil
}

// planGen draws the request's plan and plays the faults that come before any token: a
// slow first byte, which moves the arrival the schedule counts from (returned), and an
// error status. ok is false when the request is over: answered with the fault, or its
// client gone during the slow start.
func (s *Server) planGen(ctx context.Context, w http.ResponseWriter, rec *LogRecord, req checkedGen, recv time.Time) (pl plan, arrival time.Time, ok bool) {
	pl = s.makePlan(s.reqIndex.Add(1)-1, req.maxTokens, req.p.minTokens, req.p.ignoreEOS)
	pl.reasoning = s.reasoningTokens(req.p.api, pl.target)
	s.countFaults(&pl)
	if pl.slowFirst > 0 {
		if !s.sleep(ctx, pl.slowFirst) {
			return pl, recv, false
		}
		recv = recv.Add(pl.slowFirst)
	}
	api := req.p.api
	switch pl.status {
	case 429:
		failGen(w, api, rec, &apiError{status: 429, typ: "RateLimitError", msg: "simulated fault: rate limited"}, "fault")
		return pl, recv, false
	case 500:
		failGen(w, api, rec, &apiError{status: 500, typ: "InternalServerError", msg: "simulated fault: internal error"}, "fault")
		return pl, recv, false
	case 503:
		failGen(w, api, rec, &apiError{status: 503, typ: "ServiceUnavailableError", msg: "simulated fault: service unavailable"}, "fault")
		return pl, recv, false
	}
	return pl, recv, true
}

// startSource starts making the request's tokens: the fixed profile's schedule from recv,
// or a sequence submitted to the engine. The caller cancels it.
func (s *Server) startSource(recv time.Time, req checkedGen, pl *plan) tokenSource {
	prompt, hasher := req.prompt, req.hasher
	if s.cfg.Fixed {
		s.inflight.Add(1)
		s.fixedPrompt.Add(int64(prompt))
		return &fixedSource{srv: s, recv: recv, target: pl.target, answerAt: pl.reasoning}
	}
	sq := newSeq(prompt, pl.target)
	sq.recv, sq.answerAt, sq.visions = recv, pl.reasoning, req.visions
	if hasher != nil {
		// The KV cache will hold the prompt and the output less its last token: hash
		// that stream here, on the handler's goroutine, so the engine only looks up.
		for i := range pl.target - 1 {
			hasher.add(s.wordIDs[(i+pl.wordOff)%len(words)])
		}
		sq.hashes, sq.promptBlocks = hasher.hashes, prompt/hasher.size
		sq.blocks = make([]int32, 0, sq.promptBlocks)
	}
	s.eng.submit(sq)
	return &engineSource{s: sq, srv: s}
}

// reasoningTokens is how many of an answer's target tokens stream as reasoning: the first
// round(ReasoningShare x target). Completions have no reasoning parser: the model's
// thinking is part of the text there.
func (s *Server) reasoningTokens(api apiKind, target int) int {
	if api == apiCompletions {
		return 0
	}
	return int(math.Round(s.cfg.ReasoningShare * float64(target)))
}

// newChunker returns the chunker of the planned request, with its response id and its
// chunks' JSON head.
func (s *Server) newChunker(api apiKind, prompt int, continuous bool, pl *plan) *chunker {
	ck := &chunker{api: api, chat: api == apiChat, prompt: prompt, target: pl.target, finish: pl.finish, continuous: continuous,
		wordOff: pl.wordOff, details: s.prefix, model: s.modelJSON, created: time.Now().Unix()}
	ck.reasoning = s.reasoningTokens(api, pl.target)
	ck.reasoningUsage = s.cfg.ReasoningUsage && api == apiChat
	hex := strconv.FormatUint(pl.id, 16)
	switch api {
	case apiMessages:
		// vLLM's Messages id is its chat stream's; the signature is a uuid4 hex there.
		ck.id, ck.sig = "chatcmpl-"+hex, strconv.FormatUint(pl.id^0x5bd1e9955bd1e995, 16)
		return ck
	case apiResponses:
		ck.id = "resp_" + hex
		return ck
	}
	object, idPrefix := "text_completion", "cmpl-"
	if api == apiChat {
		object, idPrefix = "chat.completion.chunk", "chatcmpl-"
	}
	ck.id = idPrefix + hex
	head := make([]byte, 0, 96+len(s.modelJSON))
	head = append(head, `data: {"id":"`...)
	head = append(head, ck.id...)
	head = append(head, `","object":"`...)
	head = append(head, object...)
	head = append(head, `","created":`...)
	head = strconv.AppendInt(head, ck.created, 10)
	head = append(head, `,"model":`...)
	head = append(head, s.modelJSON...)
	ck.head = head
	return ck
}

// logRequest queues rec's line in the request log.
func (s *Server) logRequest(rec *LogRecord) {
	rec.Time = time.Now().UTC().Format(time.RFC3339Nano)
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	s.reqLog.add(append(b, '\n'))
}

func (s *Server) finished(pl *plan) {
	if pl.finish == "stop" {
		s.finishedStop.Add(1)
	} else {
		s.finishedLength.Add(1)
	}
	if s.cfg.Fixed {
		s.fixedGen.Add(int64(pl.target))
	}
}
