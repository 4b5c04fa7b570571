package replay

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
)

// feed is the preparer: it reads the trace ahead of the executor, plans each request
// (its due time, warm-up, its session's turn) and builds what is sent (the body, and what
// the transport builds ahead), into a look-ahead channel the executor takes from (next).
// With sequential sessions it also builds each later turn when its predecessor ends
// (session.go).
type feed struct {
	o        *Options
	tr       transport.Transport
	prog     *Progress
	results  *resultQueue    // records of turns never sent (recordEnded)
	graceful context.Context // canceled: no more reads
	stopped  <-chan struct{} // graceful.Done()
	fail     func(error)     // ends the run with a fatal error (runner.fail)

	// preparedRunID is the run id once the run start is fixed (runner.setRunID), nil
	// before: requests prepared before it have a placeholder the dispatcher fills.
	preparedRunID atomic.Pointer[string]
	bodyPrefixes  map[string][]byte // Options.Models: a trace model's body start

	prepared     chan *request
	preparerDone chan struct{} // closed when prepare returns
	// The look-ahead's low-water mark (handOver): 0 for sessions, else half of it.
	lowWater    int
	prepQueued  atomic.Int64  // in prepared, as counted by handOver and next
	prepWaiting atomic.Bool   // handOver waits for prepLow
	prepLow     chan struct{} // cap 1

	sess    *sessions       // sequential sessions; nil otherwise
	turnIdx map[int64]int32 // independent mode: turns read per session
	un      unaryScratch    // a unary API's inputs (unary.go)
}

// newFeed returns r's preparer, once its stop contexts are made.
func newFeed(r *runner) *feed {
	pr := &feed{o: &r.o, tr: r.tr, prog: r.prog, results: r.results, graceful: r.graceful, stopped: r.stopped, fail: r.fail,
		sess: r.sess, prepared: make(chan *request, r.o.LookAhead), preparerDone: make(chan struct{})}
	if r.sess == nil {
		pr.turnIdx = map[int64]int32{}
		pr.lowWater, pr.prepLow = r.o.LookAhead/2, make(chan struct{}, 1)
	}
	pr.bodyPrefixes = make(map[string][]byte, len(r.o.Models))
	for k, v := range r.o.Models {
		pr.bodyPrefixes[k] = r.o.Client.BodyPrefix(v)
	}
	return pr
}

// prepare reads the trace, plans each request and builds its body ahead of time, so the
// dispatcher only waits and writes. The channel's capacity bounds the look-ahead.
func (pr *feed) prepare() {
	defer close(pr.preparerDone)
	defer close(pr.prepared)
	if pr.sess != nil {
		defer pr.sess.prepEnd()
	}
	p := planner{speedup: pr.o.Speedup, closed: pr.o.Concurrency > 0, duration: pr.o.Duration, limit: pr.o.Limit, warmup: pr.o.Warmup,
		origin: pr.o.Origin, hasOrigin: pr.o.HasOrigin}
	if p.closed {
		p.duration = 0 // closed loop: bounded by send time instead, in the workers
	}
	var prompt []byte
	src := pr.o.Source
	for pr.graceful.Err() == nil && src.Next() { // after a stop, not one more read
		tr := src.Request()
		due, warm, ok := p.plan(tr.Arrival)
		if !ok {
			return
		}
		if pr.o.Inputs > 0 {
			if !pr.unaryRow(&tr, int64(due), warm) {
				return
			}
			continue
		}
		if pr.sess != nil && pr.sess.agents != nil && (tr.HasSession || pr.sess.agents.Together) {
			if !pr.agentRow(&tr) {
				return
			}
			continue
		}
		var c *conv // sequential sessions: the session of a first turn
		var turn int32
		if tr.HasSession {
			if pr.sess != nil {
				var err error
				if c, err = pr.planTurn(&tr, due, warm); err != nil {
					pr.fail(err)
					return
				}
				if c == nil {
					continue // a later turn: due when its predecessor ends
				}
			} else {
				turn = pr.turnIdx[tr.SessionID]
				pr.turnIdx[tr.SessionID] = turn + 1
			}
		}
		rest, imgs, err := pr.o.Images.Split(&tr)
		if err != nil {
			pr.fail(fmt.Errorf("replay: %w", err))
			return
		}
		text, tools, err := pr.o.Tools.split(&rest)
		if err != nil {
			pr.fail(fmt.Errorf("replay: %w", err))
			return
		}
		if pr.sess != nil {
			pr.sess.promptMu.Lock()
		}
		prompt, err = pr.o.Prompter.AppendPrompt(prompt[:0], &text)
		if pr.sess != nil {
			pr.sess.promptMu.Unlock()
		}
		if err != nil {
			pr.fail(fmt.Errorf("replay: prompt of request %d: %w", tr.ID, err))
			return
		}
		req := &request{
			Request: transport.Request{ID: tr.ID, DueNS: int64(due), PromptTokens: tr.PromptTokens, OutputTokens: tr.OutputTokens,
				Warmup: warm, Session: tr.SessionID, HasSession: tr.HasSession},
			turn: turn, tools: tools.sent, images: int32(len(imgs.Images)), imageTokens: imgs.Tokens, conv: c, sessionWaitNS: results.Null,
		}
		runID := pr.preparedRunID.Load()
		if runID != nil {
			req.RunID = *runID
		}
		if c != nil {
			pr.finishBody(req, &tr, c, prompt, tools.desc)
		} else {
			prefix := pr.o.Client.DefaultBodyPrefix()
			if p, ok := pr.bodyPrefixes[tr.Model]; ok {
				prefix = p
			}
			req.Body = pr.o.Client.AppendPromptBody(make([]byte, 0, len(prompt)+len(prefix)+len(tools.desc)+imgs.Bytes()+192), prefix, prompt, tr.OutputTokens, tools.desc, imgs.Images)
			pr.tr.Prepare(&req.Request, runID == nil)
		}
		if !pr.handOver(req) {
			return
		}
		pr.prog.Planned.Add(1)
		if pr.sess != nil && pr.sess.needHead.Load() {
			pr.sess.signal()
		}
	}
	if err := src.Err(); err != nil {
		pr.fail(fmt.Errorf("replay: read trace: %w", err))
	}
}

// handOver puts req in the look-ahead; false when the run stopped first. Past a full
// look-ahead (the preparer runs ahead of the schedule), the plain loops' preparer waits
// until next has taken it down to half (r.lowWater): one wake-up of this goroutine per
// half look-ahead, not one per request, each of which woke a thread too (resultQueue).
// Sessions' dispatchers take from the channel in their own selects: there the preparer
// waits on the channel.
//
// Lost wake-ups: the preparer sets prepWaiting and then reads prepQueued; next lowers
// prepQueued and then reads prepWaiting. Both are atomics, sequentially consistent: if
// the preparer read a count that was not low, next's read after its own decrement sees
// it waiting.
func (pr *feed) handOver(req *request) bool {
	for pr.lowWater > 0 {
		select {
		case pr.prepared <- req:
			pr.prepQueued.Add(1)
			return true
		default:
		}
		pr.prepWaiting.Store(true)
		if pr.prepQueued.Load() <= int64(pr.lowWater) {
			pr.prepWaiting.Store(false)
			continue
		}
		select {
		case <-pr.prepLow:
		case <-pr.stopped:
			return false
		}
	}
	select {
	case pr.prepared <- req:
		return true
	case <-pr.stopped:
		return false
	}
}

// waitPrepared waits until the look-ahead channel is full or the preparer has finished,
// at most max or until the run stops.
func (pr *feed) waitPrepared(max time.Duration) {
	deadline := time.After(max)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for len(pr.prepared) < cap(pr.prepared) {
		select {
		case <-pr.preparerDone:
			return
		case <-pr.stopped:
			return
		case <-deadline:
			return
		case <-tick.C:
		}
	}
}

// next returns the next prepared request; false when there are no more or the run stops.
func (pr *feed) next() (*request, bool) {
	select {
	case q, ok := <-pr.prepared:
		if ok && pr.lowWater > 0 && pr.prepQueued.Add(-1) <= int64(pr.lowWater) && pr.prepWaiting.CompareAndSwap(true, false) {
			select {
			case pr.prepLow <- struct{}{}:
			default:
			}
		}
		return q, ok
	case <-pr.stopped:
		return nil, false
	}
}
