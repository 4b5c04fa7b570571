package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmreplay/llmreplay/sim/stampconn"
)

// reply is what answering a started request uses: the response, the chunker, the token
// source, the plan (for its faults during the answer), the request-log record (nil
// without a log) and whether the client asked for the timing trailers.
type reply struct {
	w          http.ResponseWriter
	ck         *chunker
	src        tokenSource
	pl         plan
	rec        *LogRecord
	wantTiming bool
}

// announceTrailers declares the timing trailers, which must be named before the head.
func (a *reply) announceTrailers() {
	if a.wantTiming {
		a.w.Header().Set("Trailer", strings.Join([]string{TrailerArrival, TrailerQueued, TrailerAdmit, TrailerFirst, TrailerLast, TrailerAhead, TrailerGenAtAdmit, TrailerGenAtLast, TrailerFirstAnswer}, ", "))
	}
}

// setTrailers sets the timing trailers, if asked for, from the source's model times.
func (a *reply) setTrailers() {
	if !a.wantTiming {
		return
	}
	tm := a.src.times()
	h := a.w.Header()
	h.Set(TrailerArrival, strconv.FormatInt(int64(tm.arrival), 10))
	h.Set(TrailerQueued, strconv.FormatInt(int64(tm.queued), 10))
	h.Set(TrailerAdmit, strconv.FormatInt(int64(tm.admit), 10))
	h.Set(TrailerFirst, strconv.FormatInt(int64(tm.first), 10))
	h.Set(TrailerLast, strconv.FormatInt(int64(tm.last), 10))
	h.Set(TrailerAhead, strconv.Itoa(tm.ahead))
	h.Set(TrailerGenAtAdmit, strconv.FormatInt(tm.genAtAdmit, 10))
	h.Set(TrailerGenAtLast, strconv.FormatInt(tm.genAtLast, 10))
	if a.pl.reasoning < a.pl.target {
		h.Set(TrailerFirstAnswer, strconv.FormatInt(int64(tm.answer), 10))
	}
}

// recordOK puts an answered request's token counts and model times in its record; it runs
// deferred, when the outcome is known.
func (a *reply) recordOK() {
	if a.rec.Outcome != "ok" {
		return
	}
	tm := a.src.times()
	a.rec.CachedTokens, a.rec.CompletionTokens, a.rec.ReasoningTokens = a.ck.cached, a.pl.target, a.ck.reasoning
	a.rec.ArrivalNs, a.rec.FirstNs, a.rec.LastNs = int64(tm.arrival), int64(tm.first), int64(tm.last)
	if a.pl.reasoning < a.pl.target {
		a.rec.FirstAnswerNs = int64(tm.answer)
	}
}

// answered ends a request answered in full: counted, its record ok, its trailers set.
func (s *Server) answered(a *reply) {
	s.finished(&a.pl)
	if tm := a.src.times(); tm.last > 0 {
		s.e2e.observe(tm.last - tm.arrival)
	}
	if a.rec != nil {
		a.rec.Outcome = "ok"
	}
	a.setTrailers()
}

// serveStream streams the answer: the response head, then the tokens by the precise
// writer when it can take the stream, the rest (or all) on the handler's own path.
func (s *Server) serveStream(ctx context.Context, a *reply, r *http.Request, conn *stampconn.Conn, includeUsage bool) {
	rc := http.NewResponseController(a.w)
	h := a.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	a.w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	if a.ck.api == apiResponses {
		// The Responses stream opens with response.created and response.in_progress,
		// before any token, as vLLM's does; the precise writer takes the stream after it.
		if _, err := a.w.Write(a.ck.appendResponsesPreamble(nil)); err != nil || rc.Flush() != nil {
			return
		}
	}
	fixed, _ := a.src.(*fixedSource)
	sent := 0
	if fixed != nil && conn != nil && !s.noPrecise.Load() && a.pl.clean() && r.ProtoAtLeast(1, 1) {
		// net/http frames an HTTP/1.1 body of unknown length in chunks, which the
		// scheduler writes itself.
		n, complete, ok := s.servePrecise(ctx, conn, fixed, a.ck, includeUsage, a.rec)
		if !ok {
			return
		}
		if complete {
			s.answered(a)
			return
		}
		sent = n
	}
	s.streamChunks(ctx, a, rc, fixed, sent, includeUsage)
}

// streamChunks writes the stream's chunks from token sent on, through net/http, as the
// source makes the tokens, playing the plan's mid-stream faults; then the final usage (if
// asked for) and [DONE]. fixed is the source on the fixed profile, whose lateness it
// measures, else nil.
func (s *Server) streamChunks(ctx context.Context, a *reply, rc *http.ResponseController, fixed *fixedSource, sent int, includeUsage bool) {
	ck, pl := a.ck, &a.pl
	bp := bufPool.Get().(*[]byte)
	sb := streamBuf{w: a.w, rc: rc, buf: (*bp)[:0], rec: a.rec, logWrites: a.rec != nil && s.cfg.RequestLogWrites}
	defer func() { *bp = sb.buf[:0]; bufPool.Put(bp) }()
	for sent < pl.target {
		n, ok := a.src.next(ctx, sent)
		if !ok {
			return // client gone or server closing: the stream ends without [DONE]
		}
		if fixed != nil {
			s.observeLate(sent, time.Since(fixed.due(sent)))
		}
		for ; sent < n; sent++ {
			if sent == pl.stallAt {
				if !sb.flush() || !s.sleep(ctx, pl.stallFor) {
					return
				}
			}
			if sent == pl.disconnectAt {
				sb.flush()
				if a.rec != nil {
					a.rec.Outcome = "fault"
				}
				panic(http.ErrAbortHandler) // net/http closes the connection mid-stream
			}
			if sent == pl.malformedAt {
				sb.buf = ck.appendMalformed(sb.buf)
			}
			if sent == pl.errorAt {
				sb.buf = ck.appendStreamError(sb.buf, sent)
				sb.flush()
				if a.rec != nil {
					a.rec.Outcome, a.rec.Error = "fault", streamErrorMsg
				}
				return
			}
			if sent == 0 {
				ck.cached = a.src.cachedTokens()
				sb.buf = ck.appendStart(sb.buf)
			}
			if sent == pl.reasoning {
				sb.answer = true
			}
			sb.buf = ck.appendToken(sb.buf, sent)
			sb.tokens++
			if len(sb.buf) > writeBatch {
				// A lagging stream catches up in bounded writes rather than growing buf.
				if !sb.write() {
					return
				}
			}
		}
		if sent < pl.target && !sb.flush() {
			return
		}
	}
	sb.buf = ck.appendEnd(sb.buf, includeUsage)
	if !sb.flush() {
		return
	}
	s.answered(a)
}

// observeLate counts how late the fixed profile's write of token sent (and those after it
// in the same write) left the handler.
func (s *Server) observeLate(sent int, late time.Duration) {
	s.fixedLate[min(sent, 1)].observe(late)
	if s.lateness != nil {
		s.lateness.add(sent == 0, late)
	}
}

// streamBuf gathers a stream's chunks into writes through net/http and stamps each write
// in the request log.
type streamBuf struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	buf       []byte
	tokens    int        // tokens in buf, for the request log
	answer    bool       // buf holds the first answer token
	rec       *LogRecord // nil without a request log
	logWrites bool       // the record lists every write
}

// stamp records, just before a write, its time and its tokens.
func (b *streamBuf) stamp() {
	if b.tokens == 0 || b.rec == nil {
		return
	}
	t := time.Now().UnixNano()
	if b.rec.FirstWriteUnixNs == 0 {
		b.rec.FirstWriteUnixNs = t
	}
	if b.answer {
		b.rec.FirstAnswerWriteUnixNs, b.answer = t, false
	}
	if b.logWrites {
		b.rec.WriteUnixNs = append(b.rec.WriteUnixNs, t)
		b.rec.WriteTokens = append(b.rec.WriteTokens, b.tokens)
	}
	b.tokens = 0
}

// write writes buf without flushing (a flush follows when the stream has caught up) and
// reports whether the write succeeded.
func (b *streamBuf) write() bool {
	b.stamp()
	if _, err := b.w.Write(b.buf); err != nil {
		return false
	}
	b.buf = b.buf[:0]
	return true
}

// flush writes buf, if any, and flushes it to the client; false when either failed.
func (b *streamBuf) flush() bool {
	if len(b.buf) == 0 {
		return true
	}
	b.stamp()
	_, err := b.w.Write(b.buf)
	b.buf = b.buf[:0]
	return err == nil && b.rc.Flush() == nil
}

// writeBatch bounds one write of a stream that has fallen behind; bufPool's buffers are
// sized to hold it plus one chunk, so the hot path does not allocate.
const writeBatch = 16 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, writeBatch+1024); return &b }}

type usage struct {
	PromptTokens            int                `json:"prompt_tokens"`
	TotalTokens             int                `json:"total_tokens"`
	CompletionTokens        int                `json:"completion_tokens"`
	PromptTokensDetails     *promptDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *completionDetails `json:"completion_tokens_details,omitempty"`
}

// completionDetails is OpenAI's usage.completion_tokens_details (vLLM sends none; the
// sim does with Config.ReasoningUsage).
type completionDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// promptDetails is OpenAI's (and vLLM's) usage.prompt_tokens_details.
type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// wholeResponse is a non-streaming answer; Choice is the API's choice type.
type wholeResponse[Choice any] struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	Usage   usage    `json:"usage"`
}

// assistantMessage is a chat choice's message; Reasoning is vLLM's field for the
// reasoning parser's part (ChatMessage in vllm/entrypoints/openai/chat_completion/protocol.py).
type assistantMessage struct {
	Role      string  `json:"role"`
	Content   string  `json:"content"`
	Reasoning *string `json:"reasoning,omitempty"`
}

// chatChoice and textChoice are a chat and a completions answer's choice, with the
// fields vLLM sends (null logprobs and stop_reason included).
type chatChoice struct {
	Index        int              `json:"index"`
	Message      assistantMessage `json:"message"`
	Logprobs     *string          `json:"logprobs"`
	FinishReason string           `json:"finish_reason"`
	StopReason   *string          `json:"stop_reason"`
}

type textChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     *string `json:"logprobs"`
	FinishReason string  `json:"finish_reason"`
	StopReason   *string `json:"stop_reason"`
}

// serveWhole answers a non-streaming request once every token exists.
func (s *Server) serveWhole(ctx context.Context, a *reply) {
	ck, pl := a.ck, &a.pl
	for sent := 0; sent < pl.target; {
		n, ok := a.src.next(ctx, sent)
		if !ok {
			return
		}
		sent = n
	}
	if pl.stallAt >= 0 && !s.sleep(ctx, pl.stallFor) {
		return
	}
	if pl.disconnectAt >= 0 {
		if a.rec != nil {
			a.rec.Outcome = "fault"
		}
		panic(http.ErrAbortHandler)
	}
	if pl.errorAt >= 0 {
		failGen(a.w, ck.api, a.rec, &apiError{status: 500, typ: "InternalServerError", msg: streamErrorMsg}, "fault")
		return
	}
	ck.cached = a.src.cachedTokens()
	var b []byte
	switch ck.api {
	case apiMessages:
		b = ck.appendMessagesWhole(nil)
	case apiResponses:
		b = ck.appendResponse(nil, true)
	default:
		b = s.wholeChoices(ck)
	}
	if pl.malformedAt >= 0 {
		b = b[:len(b)/2]
	}
	a.w.Header().Set("Content-Type", "application/json")
	a.w.WriteHeader(http.StatusOK)
	a.w.Write(append(b, '\n'))
	s.answered(a)
}

// wholeChoices is a whole completions or chat answer.
func (s *Server) wholeChoices(ck *chunker) []byte {
	u := usage{PromptTokens: ck.prompt, TotalTokens: ck.prompt + ck.target, CompletionTokens: ck.target}
	if ck.details {
		u.PromptTokensDetails = &promptDetails{CachedTokens: ck.cached}
	}
	if ck.reasoningUsage {
		u.CompletionTokensDetails = &completionDetails{ReasoningTokens: ck.reasoning}
	}
	var resp any
	if ck.chat {
		msg := assistantMessage{Role: "assistant", Content: string(ck.appendWords(nil, ck.reasoning, ck.target))}
		if ck.reasoning > 0 {
			r := string(ck.appendWords(nil, 0, ck.reasoning))
			msg.Reasoning = &r
		}
		resp = wholeResponse[chatChoice]{ck.id, "chat.completion", ck.created, s.cfg.Model,
			[]chatChoice{{Message: msg, FinishReason: ck.finish}}, u}
	} else {
		resp = wholeResponse[textChoice]{ck.id, "text_completion", ck.created, s.cfg.Model,
			[]textChoice{{Text: ck.text(), FinishReason: ck.finish}}, u}
	}
	b, _ := json.Marshal(resp)
	return b
}
