package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
	TimingHeader      = "X-Sim-Timing"
)

// chunker writes one request's SSE chunks into a byte slice with no per-token allocation:
// the JSON head (id, object, created, model) is encoded once.
type chunker struct {
	head       []byte
	chat       bool
	prompt     int
	target     int
	finish     string
	continuous bool
	wordOff    int
	// details: the final usage carries prompt_tokens_details.cached_tokens (the prefix
	// cache is on); cached is that count, known once the first token exists.
	details bool
	cached  int
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

// appendToken appends the chunk of token i (0-based).
func (c *chunker) appendToken(b []byte, i int) []byte {
	b = append(b, c.head...)
	if c.chat {
		b = append(b, `,"choices":[{"index":0,"delta":{"content":"`...)
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

// writeBatch bounds one write of a stream that has fallen behind; bufPool's buffers are
// sized to hold it plus one chunk, so the hot path does not allocate.
const writeBatch = 16 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, writeBatch+1024); return &b }}

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
	ahead                               int
	genAtAdmit, genAtLast               int64
}

func (e *engineSource) times() timing {
	s := e.s
	if !s.done.Load() {
		return timing{}
	}
	return timing{s.arrivalM, s.queuedM, s.admitM, s.firstM, s.lastM, s.waitingAhead, s.genAtAdmit, s.genAtLast}
}

func (e *engineSource) cancel() { e.s.canceled.Store(true) }

// cachedTokens reads s.cached, written by the engine at admission, before the atomic
// store of the first produced token that the handler has loaded.
func (e *engineSource) cachedTokens() int { return e.s.cached }

// fixedSource emits token i at recv + (FixedTTFT + i*FixedITL)/TimeScale exactly.
type fixedSource struct {
	srv    *Server
	recv   time.Time
	target int
	timer  *time.Timer
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
	now := time.Now()
	n := sent + 1
	for n < f.target && !f.due(n).After(now) {
		n++
	}
	return n, true
}

func (f *fixedSource) times() timing {
	c := &f.srv.cfg
	a := scaleDur(f.recv.Sub(f.srv.epoch), c.TimeScale)
	first := a + c.FixedTTFT
	return timing{arrival: a, queued: a, admit: a, first: first, last: first + time.Duration(f.target-1)*c.FixedITL}
}

func (f *fixedSource) cachedTokens() int { return 0 }

func (f *fixedSource) cancel() {
	if f.timer != nil {
		f.timer.Stop()
	}
	f.srv.inflight.Add(-1)
}

func (s *Server) serveGen(w http.ResponseWriter, r *http.Request, chat bool) {
	// Arrival is stamped before the body is read and parsed, so the server's own request
	// handling is inside the modelled TTFT rather than added to it.
	recv := time.Now()
	conn := connFrom(r.Context())
	var readNs, arriveNs int64
	if conn != nil {
		// The read that delivered the head is earlier still, and the kernel's receive
		// time of its bytes earlier again: that is the request's true arrival, where
		// the schedule starts (stamp.go).
		read, arrive := conn.lastRead()
		if !read.IsZero() && read.Before(recv) {
			recv, readNs = read, read.UnixNano()
		}
		if !arrive.IsZero() && arrive.Before(recv) {
			recv, arriveNs = arrive, arrive.UnixNano()
		}
	}
	rid := r.Header.Get(RequestIDHeader)
	if len(rid) > maxRequestIDBytes {
		rid = rid[:maxRequestIDBytes]
	}
	if rid != "" {
		w.Header().Set(RequestIDHeader, rid)
	}
	var rec *LogRecord
	if s.reqLog != nil {
		rec = &LogRecord{RequestID: rid, API: "completions", Status: 200, Outcome: "canceled", ReadUnixNs: readNs, ArriveUnixNs: arriveNs}
		if chat {
			rec.API = "chat"
		}
		defer s.logRequest(rec)
	}
	fail := func(e *apiError, outcome string) {
		if rec != nil {
			rec.Status, rec.Outcome, rec.Error = e.status, outcome, e.msg
		}
		writeError(w, e)
	}
	body, aerr := s.readBody(w, r)
	if aerr != nil {
		s.badRequests.Add(1)
		fail(aerr, "bad_request")
		return
	}
	p, err := parseGenRequest(body, chat)
	if err != nil {
		s.badRequests.Add(1)
		fail(err.(*apiError), "bad_request")
		return
	}
	if rec != nil {
		rec.Stream = p.stream
	}
	if aerr := s.checkModel(p.model); aerr != nil {
		fail(aerr, "bad_request")
		return
	}
	var hasher *blockHasher
	if s.prefix {
		hasher = newBlockHasher(s.cfg.PrefixBlockTokens)
		// Room for the prompt's and the output's blocks, so the hashes grow at most once.
		est := max(p.maxTokens, 0) + len(p.prompt.ids) + len(p.prompt.text)/3
		for _, m := range p.prompt.messages {
			est += 6 + len(m.content)/3
		}
		hasher.hashes = make([]uint64, 0, est/hasher.size+1)
	}
	prompt := s.promptTokens(&p.prompt, hasher)
	if prompt < 1 {
		s.badRequests.Add(1)
		fail(badRequest("prompt", "prompt has no tokens"), "bad_request")
		return
	}
	maxTokens := p.maxTokens
	if maxTokens < 0 {
		if chat {
			maxTokens = min(s.cfg.DefaultChatMaxTokens, s.cfg.MaxModelLen-prompt)
		} else {
			maxTokens = s.cfg.DefaultMaxTokens
		}
	}
	if maxTokens < 1 || prompt+maxTokens > s.cfg.MaxModelLen {
		s.badRequests.Add(1)
		fail(badRequest("max_tokens", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d in the completion). Please reduce the length of the prompt or completion.",
			s.cfg.MaxModelLen, prompt+maxTokens, prompt, maxTokens), "bad_request")
		return
	}
	if p.minTokens > maxTokens {
		s.badRequests.Add(1)
		fail(badRequest("min_tokens", "min_tokens (%d) must be <= max_tokens (%d)", p.minTokens, maxTokens), "bad_request")
		return
	}

	pl := s.makePlan(s.reqIndex.Add(1)-1, maxTokens, p.minTokens, p.ignoreEOS)
	s.countFaults(&pl)
	ctx := r.Context()
	if pl.slowFirst > 0 {
		if !s.sleep(ctx, pl.slowFirst) {
			return
		}
		recv = recv.Add(pl.slowFirst)
	}
	switch pl.status {
	case 429:
		fail(&apiError{status: 429, typ: "RateLimitError", msg: "simulated fault: rate limited"}, "fault")
		return
	case 500:
		fail(&apiError{status: 500, typ: "InternalServerError", msg: "simulated fault: internal error"}, "fault")
		return
	case 503:
		fail(&apiError{status: 503, typ: "ServiceUnavailableError", msg: "simulated fault: service unavailable"}, "fault")
		return
	}

	var src tokenSource
	if s.cfg.Fixed {
		s.inflight.Add(1)
		s.fixedPrompt.Add(int64(prompt))
		src = &fixedSource{srv: s, recv: recv, target: pl.target}
	} else {
		sq := newSeq(prompt, pl.target)
		sq.recv = recv
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
		src = &engineSource{s: sq, srv: s}
	}
	defer src.cancel()

	ck := &chunker{chat: chat, prompt: prompt, target: pl.target, finish: pl.finish, continuous: p.continuous, wordOff: pl.wordOff, details: s.prefix}
	object, idPrefix := "text_completion", "cmpl-"
	if chat {
		object, idPrefix = "chat.completion.chunk", "chatcmpl-"
	}
	id := idPrefix + strconv.FormatUint(pl.id, 16)
	if rec != nil {
		rec.ID, rec.PromptTokens = id, prompt
		defer func() {
			if rec.Outcome == "ok" {
				tm := src.times()
				rec.CachedTokens, rec.CompletionTokens = ck.cached, pl.target
				rec.ArrivalNs, rec.FirstNs, rec.LastNs = int64(tm.arrival), int64(tm.first), int64(tm.last)
			}
		}()
	}
	head := make([]byte, 0, 96+len(s.modelJSON))
	head = append(head, `data: {"id":"`...)
	head = append(head, id...)
	head = append(head, `","object":"`...)
	head = append(head, object...)
	head = append(head, `","created":`...)
	head = strconv.AppendInt(head, time.Now().Unix(), 10)
	head = append(head, `,"model":`...)
	head = append(head, s.modelJSON...)
	ck.head = head

	wantTiming := r.Header.Get(TimingHeader) != ""
	if wantTiming {
		w.Header().Set("Trailer", strings.Join([]string{TrailerArrival, TrailerQueued, TrailerAdmit, TrailerFirst, TrailerLast, TrailerAhead, TrailerGenAtAdmit, TrailerGenAtLast}, ", "))
	}
	setTrailers := func() {
		if !wantTiming {
			return
		}
		tm := src.times()
		h := w.Header()
		h.Set(TrailerArrival, strconv.FormatInt(int64(tm.arrival), 10))
		h.Set(TrailerQueued, strconv.FormatInt(int64(tm.queued), 10))
		h.Set(TrailerAdmit, strconv.FormatInt(int64(tm.admit), 10))
		h.Set(TrailerFirst, strconv.FormatInt(int64(tm.first), 10))
		h.Set(TrailerLast, strconv.FormatInt(int64(tm.last), 10))
		h.Set(TrailerAhead, strconv.Itoa(tm.ahead))
		h.Set(TrailerGenAtAdmit, strconv.FormatInt(tm.genAtAdmit, 10))
		h.Set(TrailerGenAtLast, strconv.FormatInt(tm.genAtLast, 10))
	}

	if !p.stream {
		s.serveWhole(ctx, w, p, ck, src, &pl, id, setTrailers, rec)
		return
	}

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	sent := 0
	if f, ok := src.(*fixedSource); ok && conn != nil && !s.noPrecise.Load() && pl.clean() && r.ProtoAtLeast(1, 1) {
		// net/http frames an HTTP/1.1 body of unknown length in chunks, which the
		// scheduler writes itself.
		n, complete, ok := s.servePrecise(ctx, conn, f, ck, p.includeUsage, rec)
		if !ok {
			return
		}
		if complete {
			s.finished(&pl)
			if rec != nil {
				rec.Outcome = "ok"
			}
			setTrailers()
			return
		}
		sent = n
	}
	bp := bufPool.Get().(*[]byte)
	buf := (*bp)[:0]
	defer func() { *bp = buf[:0]; bufPool.Put(bp) }()
	bufTokens := 0 // tokens in buf, for the request log
	logWrites := rec != nil && s.cfg.RequestLogWrites
	stampWrite := func() {
		if bufTokens == 0 || rec == nil {
			return
		}
		t := time.Now().UnixNano()
		if rec.FirstWriteUnixNs == 0 {
			rec.FirstWriteUnixNs = t
		}
		if logWrites {
			rec.WriteUnixNs = append(rec.WriteUnixNs, t)
			rec.WriteTokens = append(rec.WriteTokens, bufTokens)
		}
		bufTokens = 0
	}
	flush := func() bool {
		if len(buf) == 0 {
			return true
		}
		stampWrite()
		_, err := w.Write(buf)
		buf = buf[:0]
		return err == nil && rc.Flush() == nil
	}
	for sent < pl.target {
		n, ok := src.next(ctx, sent)
		if !ok {
			return // client gone or server closing: the stream ends without [DONE]
		}
		if f, ok := src.(*fixedSource); ok {
			late := time.Since(f.due(sent))
			if sent == 0 {
				s.fixedLate[0].observe(late)
			} else {
				s.fixedLate[1].observe(late)
			}
			if s.lateness != nil {
				s.lateness.add(sent == 0, late)
			}
		}
		for ; sent < n; sent++ {
			if sent == pl.stallAt {
				if !flush() || !s.sleep(ctx, pl.stallFor) {
					return
				}
			}
			if sent == pl.disconnectAt {
				flush()
				if rec != nil {
					rec.Outcome = "fault"
				}
				panic(http.ErrAbortHandler) // net/http closes the connection mid-stream
			}
			if sent == pl.malformedAt {
				buf = ck.appendMalformed(buf)
			}
			if sent == 0 {
				ck.cached = src.cachedTokens()
				if chat {
					buf = ck.appendRole(buf)
				}
			}
			buf = ck.appendToken(buf, sent)
			bufTokens++
			if len(buf) > writeBatch {
				// A lagging stream catches up in bounded writes rather than growing buf.
				stampWrite()
				if _, err := w.Write(buf); err != nil {
					return
				}
				buf = buf[:0]
			}
		}
		if sent < pl.target && !flush() {
			return
		}
	}
	if p.includeUsage {
		buf = ck.appendFinalUsage(buf)
	}
	buf = append(buf, "data: [DONE]\n\n"...)
	if !flush() {
		return
	}
	s.finished(&pl)
	if rec != nil {
		rec.Outcome = "ok"
	}
	setTrailers()
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

type usage struct {
	PromptTokens        int            `json:"prompt_tokens"`
	TotalTokens         int            `json:"total_tokens"`
	CompletionTokens    int            `json:"completion_tokens"`
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details,omitempty"`
}

// promptDetails is OpenAI's (and vLLM's) usage.prompt_tokens_details.
type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// serveWhole answers a non-streaming request once every token exists.
func (s *Server) serveWhole(ctx context.Context, w http.ResponseWriter, p *params, ck *chunker, src tokenSource, pl *plan, id string, setTrailers func(), rec *LogRecord) {
	for sent := 0; sent < pl.target; {
		n, ok := src.next(ctx, sent)
		if !ok {
			return
		}
		sent = n
	}
	if pl.stallAt >= 0 && !s.sleep(ctx, pl.stallFor) {
		return
	}
	if pl.disconnectAt >= 0 {
		if rec != nil {
			rec.Outcome = "fault"
		}
		panic(http.ErrAbortHandler)
	}
	ck.cached = src.cachedTokens()
	u := usage{PromptTokens: ck.prompt, TotalTokens: ck.prompt + ck.target, CompletionTokens: ck.target}
	if ck.details {
		u.PromptTokensDetails = &promptDetails{CachedTokens: ck.cached}
	}
	text := ck.text()
	var resp any
	if p.chat {
		type msg struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}
		type choice struct {
			Index        int     `json:"index"`
			Message      msg     `json:"message"`
			Logprobs     *string `json:"logprobs"`
			FinishReason string  `json:"finish_reason"`
			StopReason   *string `json:"stop_reason"`
		}
		resp = struct {
			ID      string   `json:"id"`
			Object  string   `json:"object"`
			Created int64    `json:"created"`
			Model   string   `json:"model"`
			Choices []choice `json:"choices"`
			Usage   usage    `json:"usage"`
		}{id, "chat.completion", time.Now().Unix(), s.cfg.Model, []choice{{Message: msg{"assistant", text}, FinishReason: ck.finish}}, u}
	} else {
		type choice struct {
			Index        int     `json:"index"`
			Text         string  `json:"text"`
			Logprobs     *string `json:"logprobs"`
			FinishReason string  `json:"finish_reason"`
			StopReason   *string `json:"stop_reason"`
		}
		resp = struct {
			ID      string   `json:"id"`
			Object  string   `json:"object"`
			Created int64    `json:"created"`
			Model   string   `json:"model"`
			Choices []choice `json:"choices"`
			Usage   usage    `json:"usage"`
		}{id, "text_completion", time.Now().Unix(), s.cfg.Model, []choice{{Text: text, FinishReason: ck.finish}}, u}
	}
	b, _ := json.Marshal(resp)
	if pl.malformedAt >= 0 {
		b = b[:len(b)/2]
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(append(b, '\n'))
	s.finished(pl)
	if rec != nil {
		rec.Outcome = "ok"
	}
	setTrailers()
}
