package replay

import (
	"fmt"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
)

// The preparer: it reads the trace ahead of the executor, plans each request (its due
// time, warm-up, its session's turn) and builds what is sent (the body, and what the
// transport builds ahead), into a look-ahead channel the executor takes from.

// prepare reads the trace, plans each request and builds its body ahead of time, so the
// dispatcher only waits and writes. The channel's capacity bounds the look-ahead.
func (r *runner) prepare() {
	defer close(r.preparerDone)
	defer close(r.prepared)
	if r.sess != nil {
		defer r.sess.prepEnd()
	}
	p := planner{speedup: r.o.Speedup, closed: r.o.Concurrency > 0, duration: r.o.Duration, limit: r.o.Limit, warmup: r.o.Warmup,
		origin: r.o.Origin, hasOrigin: r.o.HasOrigin}
	if p.closed {
		p.duration = 0 // closed loop: bounded by send time instead, in the workers
	}
	var prompt []byte
	src := r.o.Source
	for r.graceful.Err() == nil && src.Next() { // after a stop, not one more read
		tr := src.Request()
		due, warm, ok := p.plan(tr.Arrival)
		if !ok {
			return
		}
		var c *conv // sequential sessions: the session of a first turn
		var turn int32
		if tr.HasSession {
			if r.sess != nil {
				var err error
				if c, err = r.planTurn(&tr, due, warm); err != nil {
					r.fail(err)
					return
				}
				if c == nil {
					continue // a later turn: due when its predecessor ends
				}
			} else {
				turn = r.turnIdx[tr.SessionID]
				r.turnIdx[tr.SessionID] = turn + 1
			}
		}
		var err error
		if r.sess != nil {
			r.sess.promptMu.Lock()
		}
		prompt, err = r.o.Prompter.AppendPrompt(prompt[:0], &tr)
		if r.sess != nil {
			r.sess.promptMu.Unlock()
		}
		if err != nil {
			r.fail(fmt.Errorf("replay: prompt of request %d: %w", tr.ID, err))
			return
		}
		req := &request{
			id: tr.ID, dueNS: int64(due), promptTokens: tr.PromptTokens, outputTokens: tr.OutputTokens,
			warmup: warm, session: tr.SessionID, hasSession: tr.HasSession, turn: turn, conv: c, sessionWaitNS: results.Null,
		}
		runID := r.preparedRunID.Load()
		if runID != nil {
			req.runID = *runID
		}
		if c != nil {
			r.finishBody(req, &tr, c, prompt)
		} else {
			prefix := r.o.Client.bodyPrefix
			if p, ok := r.bodyPrefixes[tr.Model]; ok {
				prefix = p
			}
			req.body = r.o.Client.appendBody(make([]byte, 0, len(prompt)+len(prefix)+96), prefix, prompt, tr.OutputTokens)
			r.tr.prepare(req, runID == nil)
		}
		if !r.handOver(req) {
			return
		}
		r.prog.Planned.Add(1)
		if r.sess != nil && r.sess.needHead.Load() {
			r.sess.signal()
		}
	}
	if err := src.Err(); err != nil {
		r.fail(fmt.Errorf("replay: read trace: %w", err))
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
func (r *runner) handOver(req *request) bool {
	for r.lowWater > 0 {
		select {
		case r.prepared <- req:
			r.prepQueued.Add(1)
			return true
		default:
		}
		r.prepWaiting.Store(true)
		if r.prepQueued.Load() <= int64(r.lowWater) {
			r.prepWaiting.Store(false)
			continue
		}
		select {
		case <-r.prepLow:
		case <-r.stopped:
			return false
		}
	}
	select {
	case r.prepared <- req:
		return true
	case <-r.stopped:
		return false
	}
}

// waitPrepared waits until the look-ahead channel is full or the preparer has finished,
// at most max or until the run stops.
func (r *runner) waitPrepared(max time.Duration) {
	deadline := time.After(max)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for len(r.prepared) < cap(r.prepared) {
		select {
		case <-r.preparerDone:
			return
		case <-r.stopped:
			return
		case <-deadline:
			return
		case <-tick.C:
		}
	}
}

// next returns the next prepared request; false when there are no more or the run stops.
func (r *runner) next() (*request, bool) {
	select {
	case q, ok := <-r.prepared:
		if ok && r.lowWater > 0 && r.prepQueued.Add(-1) <= int64(r.lowWater) && r.prepWaiting.CompareAndSwap(true, false) {
			select {
			case r.prepLow <- struct{}{}:
			default:
			}
		}
		return q, ok
	case <-r.stopped:
		return nil, false
	}
}
