package replay

import (
	"container/heap"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// Conversations (docs/replay.md, "Conversations"): how the turns of one trace session are
// timed and what history their prompts carry.

// The --sessions modes.
const (
	SessionsIndependent = "independent" // every turn at its trace time, builder-only prompts
	SessionsSequential  = "sequential"  // a turn waits for its predecessor's end (+ think time)
)

// The --history modes.
const (
	HistoryActual    = "actual"    // turn k+1 = what turn k sent + what it received + new text
	HistorySynthetic = "synthetic" // the prompt builder's text alone (today's prompts)
)

// The --on-turn-error policies.
const (
	TurnErrorContinue   = "continue"    // the next turn goes on; its history holds no answer
	TurnErrorEndSession = "end-session" // the session's remaining turns are recorded dropped, not sent
)

// ThinkTime is --think-time: how long a user thinks between an answer and the next turn
// of a sequential session: zero, a fixed duration, or a DIST of milliseconds.
type ThinkTime struct {
	Fixed time.Duration
	Dist  *trace.Dist // when set, milliseconds drawn per turn (negative draws are 0)
	text  string
}

// String returns the --think-time text.
func (t ThinkTime) String() string {
	if t.text == "" {
		return "0"
	}
	return t.text
}

// IsZero reports a think time of 0.
func (t ThinkTime) IsZero() bool { return t.Dist == nil && t.Fixed == 0 }

// ParseThinkTime reads --think-time: "0", a Go duration (3s, 1500ms), or a DIST in
// milliseconds as `trace synth` takes them (lognormal:3000,2000), empirical excepted.
func ParseThinkTime(s string) (ThinkTime, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return ThinkTime{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return ThinkTime{}, fmt.Errorf("%q: must not be negative", s)
		}
		return ThinkTime{Fixed: d, text: s}, nil
	}
	if !strings.Contains(s, ":") {
		return ThinkTime{}, fmt.Errorf("%q: want 0, a duration (3s) or a DIST of milliseconds (lognormal:3000,2000)", s)
	}
	d, err := trace.ParseDist(s)
	if err != nil {
		return ThinkTime{}, err
	}
	if d.Kind == "empirical" {
		return ThinkTime{}, fmt.Errorf("%q: empirical draws from a trace's length column, not a think time", s)
	}
	return ThinkTime{Dist: &d, text: s}, nil
}

// thinker draws think times in trace order, so that a seed gives the same think times
// whatever the server does.
type thinker struct {
	fixed int64
	s     *trace.Sampler
}

func newThinker(t ThinkTime, seed uint64) (*thinker, error) {
	th := &thinker{fixed: int64(t.Fixed)}
	if t.Dist != nil {
		s, err := trace.NewSampler(*t.Dist, trace.ColPromptTokens, seed)
		if err != nil {
			return nil, err
		}
		th.s = s
	}
	return th, nil
}

func (t *thinker) draw() int64 {
	if t.s == nil {
		return t.fixed
	}
	return max(0, t.s.Draw()) * int64(time.Millisecond)
}

// SessionPlan is what a first pass over a trace knows of its sessions: how many turns
// each has, so that a session's history is freed when its last turn ends.
type SessionPlan struct {
	Turns map[int64]int32
}

// PlanSessions reads src to its end and counts each session's turns. A session's rows
// must be in arrival order: the first row that is not is an error naming it.
func PlanSessions(src trace.Source, name string) (*SessionPlan, error) {
	type seen struct {
		n       int32
		arrival time.Duration
		row     int64
	}
	m := map[int64]*seen{}
	row := int64(-1) // 0-based, as the trace writer names rows
	for src.Next() {
		r := src.Request()
		row++
		if !r.HasSession {
			continue
		}
		s := m[r.SessionID]
		if s == nil {
			s = &seen{}
			m[r.SessionID] = s
		} else if r.Arrival < s.arrival {
			return nil, fmt.Errorf("replay: trace %s row %d (request_id %d): arrival_ns %d of session_id %d is before its previous turn's (row %d, arrival_ns %d): a session's rows must be in arrival order",
				name, row, r.ID, int64(r.Arrival), r.SessionID, s.row, int64(s.arrival))
		}
		s.n++
		s.arrival, s.row = r.Arrival, row
	}
	if err := src.Err(); err != nil {
		return nil, err
	}
	p := &SessionPlan{Turns: make(map[int64]int32, len(m))}
	for id, s := range m {
		p.Turns[id] = s.n
	}
	return p, nil
}

// conv is an open session of a sequential replay. The preparer and the goroutine of the
// turn in flight share it under sessions.mu; hist and histTokens belong to whoever
// owns the session's next turn (one at a time: busy).
type conv struct {
	id      int64
	turns   int32 // from the plan; 0 = unknown (ends with the trace)
	read    int32 // turns the preparer has read
	busy    bool  // a turn is planned and has not ended
	pending []*turnPlan
	endNS   int64 // the run clock when the last turn ended
	ended   bool  // --on-turn-error end-session after a failed turn
	failed  int32 // the failed turn, when ended
	owner   int   // closed loop: the worker that sent its first turn and sends the others

	hist       []byte // chat: the messages so far, JSON, comma-separated; completions: the text so far
	histTokens int32  // tokens of hist: prompts sent + answers received
}

// turnPlan is a turn read from the trace, waiting for its predecessor's end.
type turnPlan struct {
	tr     trace.Request
	dueNS  int64 // its trace time / speedup
	think  int64
	turn   int32
	warmup bool
}

// sessions is a sequential replay's shared state.
type sessions struct {
	mu       sync.Mutex
	convs    map[int64]*conv
	plan     *SessionPlan
	prepDone bool        // the preparer read its last row: no more turns
	q        turnHeap    // turns whose due is known, for the dispatcher
	wake     chan bool   // cap 1: q has a new earliest turn, the last session ended, or a request was prepared while needHead
	needHead atomic.Bool // the dispatcher waits for a queued turn with no prepared request in hand
	open     int         // sessions busy (a turn planned, queued or in flight)
	th       *thinker
	promptMu sync.Mutex    // the Prompter is not safe for concurrent use
	workers  []workerQueue // closed loop: each worker's own turns, by conv.owner
	short    int64         // turns whose trace prompt was shorter than their history + 1 token
	agents   *AgentPlan    // --sessions dag: the calls, which open counts until each ends
	scratch  []byte        // agents: the prompter's text of a call, before it joins a context (under promptMu)
}

type turnHeap []*request

func (h turnHeap) Len() int           { return len(h) }
func (h turnHeap) Less(i, j int) bool { return h[i].DueNS < h[j].DueNS }
func (h turnHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *turnHeap) Push(x any)        { *h = append(*h, x.(*request)) }
func (h *turnHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}

// signal wakes the dispatcher (never blocks).
func (s *sessions) signal() {
	select {
	case s.wake <- true:
	default:
	}
}

// workerQueue holds a closed-loop worker's turns of the conversations it owns.
type workerQueue struct {
	q      []*request
	notify chan bool // cap 1
}

// push queues a turn whose due is known for the dispatcher (closed loop: for the worker
// that owns its conversation). Under s.mu.
func (s *sessions) push(req *request) {
	if s.workers != nil {
		w := &s.workers[req.conv.owner]
		w.q = append(w.q, req)
		select {
		case w.notify <- true:
		default:
		}
		return
	}
	heap.Push(&s.q, req)
	if s.q[0] == req {
		s.signal()
	}
}

// idle marks c's turn over with no next turn read. Under s.mu.
func (s *sessions) idle(c *conv) {
	c.busy = false
	s.open--
	if s.last(c) {
		s.closeConv(c)
	}
	if s.open == 0 && s.prepDone {
		s.signal()
	}
}

// closeConv forgets a session that has no more turns: its history is freed. Under s.mu.
func (s *sessions) closeConv(c *conv) {
	delete(s.convs, c.id)
	c.hist = nil
}

// prepEnd is the preparer's last word: no more turns come; idle sessions are over.
func (s *sessions) prepEnd() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prepDone = true
	for _, c := range s.convs {
		if !c.busy {
			s.closeConv(c)
		}
	}
	s.signal()
}

// last reports whether c has no more turns to come. Under s.mu.
func (s *sessions) last(c *conv) bool {
	return len(c.pending) == 0 && (s.prepDone || (c.turns > 0 && c.read >= c.turns))
}

// planTurn is the preparer's part for a row of a session in sequential mode: the first
// turn returns ok (the caller prepares it as any request, on the trace's schedule); a later
// turn is kept until its predecessor ends, or, if it has already ended, built and queued
// now. A turn of a session ended by a failed turn is recorded dropped.
func (pr *feed) planTurn(tr *trace.Request, due time.Duration, warm bool) (first *conv, err error) {
	s := pr.sess
	s.mu.Lock()
	c := s.convs[tr.SessionID]
	if c == nil {
		c = &conv{id: tr.SessionID}
		if s.plan != nil {
			c.turns = s.plan.Turns[tr.SessionID]
		}
		s.convs[tr.SessionID] = c
	}
	turn := c.read
	c.read++
	think := s.th.draw()
	tp := &turnPlan{tr: *tr, dueNS: int64(due), think: think, turn: turn, warmup: warm}
	if turn == 0 {
		c.busy = true
		s.open++
		s.mu.Unlock()
		return c, nil
	}
	if c.ended {
		last := s.last(c)
		if last {
			s.closeConv(c)
		}
		s.mu.Unlock()
		pr.recordEnded(c, tp)
		return nil, nil
	}
	if c.busy {
		c.pending = append(c.pending, tp)
		s.mu.Unlock()
		return nil, nil
	}
	c.busy = true
	s.open++
	s.mu.Unlock()
	req, err := pr.buildTurn(c, tp)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.push(req)
	s.mu.Unlock()
	pr.prog.Planned.Add(1)
	return nil, nil
}

// recordEnded records a turn of a session that --on-turn-error end-session ended: never
// sent, status dropped, due at its trace time.
func (pr *feed) recordEnded(c *conv, tp *turnPlan) {
	if tp.warmup {
		return
	}
	res := results.NewResult(tp.tr.ID, pr.o.Shard, tp.dueNS, tp.tr.PromptTokens, tp.tr.OutputTokens)
	res.SessionID, res.Turn = c.id, tp.turn
	res.Status = results.StatusDropped
	res.Error = fmt.Sprintf("not sent: turn %d of the session failed (--on-turn-error end-session)", c.failed)
	pr.results.put(res)
}

// buildTurn builds the request of turn tp of c, whose predecessor has ended (c.endNS):
// due at max(trace due, end + think), with the session's history when History is actual.
// The caller owns c (c.busy).
func (pr *feed) buildTurn(c *conv, tp *turnPlan) (*request, error) {
	s := pr.sess
	req := &request{
		Request: transport.Request{ID: tp.tr.ID, PromptTokens: tp.tr.PromptTokens, OutputTokens: tp.tr.OutputTokens,
			Warmup: tp.warmup, Session: c.id, HasSession: true},
		turn: tp.turn, conv: c,
	}
	if id := pr.preparedRunID.Load(); id != nil {
		req.RunID = *id
	}
	ready := c.endNS + tp.think
	req.DueNS = max(tp.dueNS, ready)
	req.sessionWaitNS = max(0, ready-tp.dueNS)
	if pr.o.Concurrency > 0 {
		req.sessionWaitNS = results.Null // a closed loop has no trace time to wait beyond
	}
	// The turn's tools come first and are not part of the history (Tools.split).
	tr, tools, err := pr.o.Tools.split(&tp.tr)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	req.tools = tools.sent
	actual := pr.o.History == HistoryActual
	if actual {
		// The history is the prefix; the new text is what the trace's length leaves, at
		// least one builder token; prompt_tokens records what is sent.
		text := tr.PromptTokens
		tr.PrefixBlocks, tr.Prompt = nil, ""
		tr.PromptTokens = text - c.histTokens
		if least := pr.o.HistoryOverhead.least(); tr.PromptTokens < least {
			tr.PromptTokens = least
			s.mu.Lock()
			s.short++
			s.mu.Unlock()
		}
		req.PromptTokens = c.histTokens + tr.PromptTokens + tools.sent
	}
	s.promptMu.Lock()
	prompt, err := pr.o.Prompter.AppendPrompt(nil, &tr)
	s.promptMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("replay: prompt of request %d: %w", tr.ID, err)
	}
	pr.finishBody(req, &tr, c, prompt, tools.desc)
	return req, nil
}

// finishBody builds req's body (and the raw client's head) from prompt, the turn's new
// text, with c's history before it when History is actual (c nil: no history), and the
// tool of description tools (nil: none). A turn that is not its session's last keeps what
// it sends (req.sent) for the next one.
func (pr *feed) finishBody(req *request, tr *trace.Request, c *conv, prompt, tools []byte) {
	cl := pr.o.Client
	prefix := cl.DefaultBodyPrefix()
	if p, ok := pr.bodyPrefixes[tr.Model]; ok {
		prefix = p
	}
	keep := c != nil && pr.o.History == HistoryActual && (c.turns == 0 || req.turn < c.turns-1)
	if c == nil || pr.o.History != HistoryActual {
		req.Body = cl.AppendPromptBody(make([]byte, 0, len(prompt)+len(prefix)+len(tools)+192), prefix, prompt, tr.OutputTokens, tools, nil)
	} else {
		var hist []byte
		if c != nil {
			hist = c.hist
		}
		var sent []byte
		if cl.TakesMessages() {
			sent = make([]byte, 0, len(hist)+len(prompt)+len(prompt)/8+32)
			sent = append(sent, hist...)
			if len(hist) > 0 {
				sent = append(sent, ',')
			}
			sent = append(sent, `{"role":"user","content":`...)
			sent = wire.AppendJSONBytes(sent, prompt)
			sent = append(sent, '}')
			req.Body = cl.AppendMessagesBody(make([]byte, 0, len(sent)+len(prefix)+len(tools)+192), prefix, sent, tr.OutputTokens, tools)
		} else {
			sent = make([]byte, 0, len(hist)+len(prompt))
			sent = append(append(sent, hist...), prompt...)
			req.Body = cl.AppendPromptBody(make([]byte, 0, len(sent)+len(sent)/8+len(prefix)+len(tools)+192), prefix, sent, tr.OutputTokens, tools, nil)
		}
		if c != nil {
			c.hist = nil // moved into sent
		}
		if keep {
			req.sent = sent
			req.Capture = true
		}
	}
	pr.tr.Prepare(&req.Request, req.RunID == "")
}

// turnEnded is the part of a session's turn after its response: it records the end,
// takes the answer into the history, applies --on-turn-error, and returns the session's
// next turn, when it is already read, built and queued for the dispatcher.
func (pr *feed) turnEnded(req *request, res *results.Result, endNS int64) {
	if req.call != nil {
		pr.callEnded(req, res, endNS)
		return
	}
	s := pr.sess
	c := req.conv
	ok := res.Status == results.StatusOK
	if req.Capture {
		c.hist, c.histTokens = pr.history(req, res)
	}
	req.sent, req.Answer = nil, nil
	s.mu.Lock()
	c.endNS = endNS
	var ended []*turnPlan
	if !ok && pr.o.OnTurnError == TurnErrorEndSession && !c.ended {
		c.ended, c.failed = true, req.turn
		ended, c.pending = c.pending, nil
	}
	if len(c.pending) == 0 {
		s.idle(c)
		s.mu.Unlock()
		for _, tp := range ended {
			pr.recordEnded(c, tp)
		}
		return
	}
	tp := c.pending[0]
	c.pending[0] = nil
	c.pending = c.pending[1:]
	s.mu.Unlock()
	next, err := pr.buildTurn(c, tp)
	s.mu.Lock()
	if err != nil {
		c.pending = nil
		s.idle(c)
		s.mu.Unlock()
		pr.fail(err)
		return
	}
	s.push(next)
	s.mu.Unlock()
	pr.prog.Planned.Add(1)
}

// history returns the session's history after req: what it sent, then what it received
// (chat: as an assistant message; an empty one when it received nothing, so that roles
// still alternate), and its length in tokens: the prompt sent without its tools (each
// turn sends its own, before the history) plus the output counted, with the template's
// difference between a request's own tokens and an earlier turn's (HistoryOverhead).
func (pr *feed) history(req *request, res *results.Result) ([]byte, int32) {
	h := req.sent
	if pr.o.Client.TakesMessages() {
		h = append(h, `,{"role":"assistant","content":`...)
		h = wire.AppendJSONBytes(h, req.Answer)
		h = append(h, '}')
	} else {
		h = append(h, req.Answer...)
	}
	n := req.PromptTokens - req.tools + pr.o.HistoryOverhead.shift()
	if res.OutputTokens > 0 && len(req.Answer) > 0 {
		n += res.OutputTokens
	}
	return h, n
}
