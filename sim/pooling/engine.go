// Package pooling is the simulated engine's pooling side (/v1/embeddings and /rerank in
// package sim): the scheduler of prefill-only requests and its real-time loop, the
// analytical figures that follow from it, and the request and response shapes of vLLM's
// pooling endpoints with their deterministic vectors and scores. It imports nothing of
// ours: package sim gives it the step-cost model as a function, and serves it.
// docs/sim.md (Pooling: embeddings and rerank) has the model.
package pooling

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// StepFunc is the model duration of one engine step that prefills prefill tokens,
// attends over context KV entries in all, and whose chunks make pairs attention pairs
// (sim's Config.StepTime with no decodes).
type StepFunc func(prefill, context int, pairs int64) time.Duration

// Limits are the engine's per-step token budget (vLLM's max_num_batched_tokens) and its
// cap on running inputs (max_num_seqs).
type Limits struct {
	MaxBatchedTokens, MaxBatch int
}

// Pairs is the attention work of prefilling n tokens after before tokens of the same
// input: each attends over every token before it (sim's AttentionPairs).
func Pairs(before, n int) int64 {
	if n <= 0 {
		return 0
	}
	return int64(n)*int64(before) + int64(n)*int64(n-1)/2
}

// Seq is one input of a pooling request (an embeddings input, or a rerank request's
// query-document pair): vLLM makes each its own engine request (serving_embedding.py and
// score/serving.py submit one encode() per prompt), and so does the sim. It is prefill
// only: it is done in the step that prefills its last token, where a generation request
// would sample its first.
//
// The engine goroutine writes the model times; a reader reads them after the input is
// done (the Engine publishes them with an atomic store).
type Seq struct {
	Tokens int
	// Model times since the engine's epoch: arrival, the step start at which the
	// engine took it in, its admission (the start of its first step) and the end of its
	// last step.
	Arrival, Queued, Admit, Done time.Duration
	// WaitingAhead is how many inputs waited ahead of it on arrival.
	WaitingAhead int

	recv               time.Time
	group              *group
	prefilled, stepTok int
	done, canceled     atomic.Bool
}

// group is the inputs of one request: the handler waits until all are done.
type group struct {
	left   atomic.Int64
	notify chan struct{}
}

// Core is the scheduler, the generation engine's rules for prompts without outputs: a
// FIFO waiting queue; each step, within MaxBatchedTokens, first the running inputs' next
// chunks, then admissions from the head of the queue while budget remains and fewer than
// MaxBatch run (each starting its prefill with what the budget has left: chunked
// prefill). The step costs step(prefill, context, pairs); an input whose last token is
// prefilled in a step is done at its end. There is no KV admission limit: an input holds
// KV only while it is prefilled, and FIFO chunking leaves at most one input part-done,
// so the inputs hold at most the budget and one input. It has no clock: Step advances
// model time.
type Core struct {
	step        StepFunc
	lim         Limits
	now         time.Duration
	lastArrival time.Duration
	waiting     []*Seq // FIFO; waiting[head:] are live
	head        int
	running     []*Seq
	finished    []*Seq // those the last step finished

	steps, promptTokens, done int64
}

// NewCore returns an idle scheduler at model time 0.
func NewCore(step StepFunc, lim Limits) *Core { return &Core{step: step, lim: lim} }

// Now is the model time at the end of the last step (or of the last Advance).
func (c *Core) Now() time.Duration { return c.now }

// Advance moves an idle engine's clock to t (no earlier than it is): model time stands
// still while nothing runs, and resumes at the next arrival.
func (c *Core) Advance(t time.Duration) { c.now = max(c.now, t) }

// Idle reports whether nothing runs or waits.
func (c *Core) Idle() bool { return len(c.running) == 0 && c.waitingLen() == 0 }

// Finished lists the inputs the last step completed.
func (c *Core) Finished() []*Seq { return c.finished }

func (c *Core) waitingLen() int { return len(c.waiting) - c.head }

// Enqueue adds s to the waiting queue at model time arrival.
func (c *Core) Enqueue(s *Seq, arrival time.Duration) {
	s.Arrival, s.Queued = arrival, c.now
	s.WaitingAhead = c.waitingLen()
	if c.head > 0 && c.head == len(c.waiting) {
		c.waiting, c.head = c.waiting[:0], 0
	}
	c.waiting = append(c.waiting, s)
}

// dropCanceled removes the inputs whose client has gone.
func (c *Core) dropCanceled() {
	c.running = slices.DeleteFunc(c.running, func(s *Seq) bool { return s.canceled.Load() })
	w := slices.DeleteFunc(c.waiting[c.head:], func(s *Seq) bool { return s.canceled.Load() })
	c.waiting = c.waiting[:c.head+len(w)]
}

// Step schedules and runs one iteration and returns its duration (0: nothing to do).
// Finished lists the inputs it completed.
func (c *Core) Step() time.Duration {
	c.finished = c.finished[:0]
	budget := c.lim.MaxBatchedTokens
	prefill, context := 0, 0
	var pairs int64
	take := func(s *Seq) {
		n := min(s.Tokens-s.prefilled, budget)
		s.stepTok = n
		budget -= n
		prefill += n
		context += s.prefilled + n
		pairs += Pairs(s.prefilled, n)
	}
	for _, s := range c.running {
		s.stepTok = 0
		if budget > 0 {
			take(s)
		}
	}
	for c.waitingLen() > 0 && budget > 0 && len(c.running) < c.lim.MaxBatch {
		s := c.waiting[c.head]
		c.waiting[c.head] = nil
		c.head++
		s.Admit = c.now
		c.running = append(c.running, s)
		take(s)
	}
	if prefill == 0 {
		return 0
	}
	d := c.step(prefill, context, pairs)
	c.now += d
	c.steps++
	c.promptTokens += int64(prefill)
	c.running = slices.DeleteFunc(c.running, func(s *Seq) bool {
		s.prefilled += s.stepTok
		s.stepTok = 0
		if s.prefilled < s.Tokens {
			return false
		}
		s.Done = c.now
		c.finished = append(c.finished, s)
		c.done++
		return true
	})
	return d
}

// Engine runs a Core in real time, as sim's generation engine runs its core: each
// step's completions are published at epoch + model_time/scale, and model time keeps its
// own pace when the loop falls behind.
type Engine struct {
	epoch time.Time
	scale float64

	mu    sync.Mutex // guards inbox, the core's counters, ending
	inbox []*Seq
	core  *Core
	// ending is how many inputs the step in flight finishes: they left the core's batch
	// when it was computed but run until its end in real time, so Stats counts them
	// running until then.
	ending  int
	wakeCh  chan struct{}
	stopCh  chan struct{}
	stopped chan struct{}
	stop    sync.Once
}

// NewEngine starts an engine whose model time 0 is epoch and which runs scale times
// faster than real time. Close stops it.
func NewEngine(step StepFunc, lim Limits, epoch time.Time, scale float64) *Engine {
	e := &Engine{
		epoch:   epoch,
		scale:   scale,
		core:    NewCore(step, lim),
		wakeCh:  make(chan struct{}, 1),
		stopCh:  make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go e.loop()
	return e
}

// Close stops the loop; requests still waiting are not answered.
func (e *Engine) Close() {
	e.stop.Do(func() { close(e.stopCh) })
	<-e.stopped
}

// Stats is the engine's state for /metrics: inputs running (those of the step in
// flight included) and waiting, prompt tokens prefilled, inputs done, and steps.
type Stats struct {
	Running, Waiting          int
	PromptTokens, Done, Steps int64
}

// Stats reads one consistent snapshot.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.core
	return Stats{len(c.running) + e.ending, c.waitingLen() + len(e.inbox), c.promptTokens, c.done, c.steps}
}

// Submit hands one request's inputs (their token counts), received at recv, to the
// engine; they are queued together at the start of the next step. Wait for them with
// the Request returned.
func (e *Engine) Submit(recv time.Time, tokens []int) *Request {
	g := &group{notify: make(chan struct{}, 1)}
	g.left.Store(int64(len(tokens)))
	r := &Request{g: g, seqs: make([]*Seq, len(tokens))}
	for i, n := range tokens {
		r.seqs[i] = &Seq{Tokens: n, recv: recv, group: g}
	}
	e.mu.Lock()
	e.inbox = append(e.inbox, r.seqs...)
	e.mu.Unlock()
	select {
	case e.wakeCh <- struct{}{}:
	default:
	}
	return r
}

// Request is a submitted request's inputs.
type Request struct {
	g    *group
	seqs []*Seq
}

// Wait blocks until every input is done and returns them with their model times, or
// returns false when ctx or stop ended first (the inputs are then canceled).
func (r *Request) Wait(ctx context.Context, stop <-chan struct{}) ([]*Seq, bool) {
	for r.g.left.Load() > 0 {
		select {
		case <-r.g.notify:
			continue
		case <-ctx.Done():
		case <-stop:
		}
		for _, s := range r.seqs {
			s.canceled.Store(true)
		}
		return nil, false
	}
	return r.seqs, true
}

func (e *Engine) model(t time.Time) time.Duration {
	v := float64(t.Sub(e.epoch)) * e.scale
	if v >= 1<<62 { // saturate rather than overflow, as sim's scaleDur
		return 1 << 62
	}
	return time.Duration(v)
}

func (e *Engine) loop() {
	defer close(e.stopped)
	c := e.core
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var in []*Seq
	for {
		e.mu.Lock()
		in, e.inbox = e.inbox, in[:0]
		if len(in) > 0 {
			// Queue in order of receipt, arrival times kept in queue order, and model
			// time resumed at the first arrival after an idle spell: the generation
			// engine's rules.
			slices.SortStableFunc(in, func(a, b *Seq) int { return a.recv.Compare(b.recv) })
			if c.Idle() {
				c.Advance(e.model(in[0].recv))
			}
			for _, s := range in {
				a := min(max(e.model(s.recv), c.lastArrival), c.now)
				c.lastArrival = a
				c.Enqueue(s, a)
			}
		}
		clear(in)
		c.dropCanceled()
		d := c.Step()
		e.ending = len(c.finished)
		e.mu.Unlock()
		if d == 0 {
			select {
			case <-e.wakeCh:
				continue
			case <-e.stopCh:
				return
			}
		}
		if wait := time.Until(e.epoch.Add(time.Duration(float64(c.now) / e.scale))); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-e.stopCh:
				timer.Stop()
				return
			}
		}
		e.mu.Lock()
		e.ending = 0
		e.mu.Unlock()
		for _, s := range c.finished {
			s.done.Store(true)
			if s.group.left.Add(-1) == 0 {
				select {
				case s.group.notify <- struct{}{}:
				default:
				}
			}
		}
		select {
		case <-e.stopCh:
			return
		default:
		}
	}
}
