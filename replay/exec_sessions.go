package replay

import (
	"container/heap"

	"github.com/llmreplay/llmreplay/replay/results"
)

// The executors of sequential sessions (session.go, docs/replay.md "Conversations"): a
// turn is due when its predecessor has ended, plus the think time; in the open loop not
// before its trace time either, in the closed loop on the worker that keeps its session.

// openSessions is the open loop for sequential sessions. It dispatches, in due order, two
// sources: the prepared requests (independent rows and first turns, built ahead and due
// at their trace time, as openLoop's) and the queue of later turns, each put there when
// its predecessor ends (or the preparer reads it after that end), due at max(trace due,
// end + think time). A turn queued earlier than what the dispatcher waits for wakes it.
type openSessions struct {
	r *runner
	d *dispatcher
	s *sessions
}

func (e *openSessions) run() {
	r, s := e.r, e.s
	w := e.d.timerWaiter()
	in := r.feed.prepared
	var head *request // the next prepared request, taken from in
	for {
		if head == nil && in != nil {
			s.mu.Lock()
			queued := len(s.q) > 0
			s.mu.Unlock()
			if queued {
				select {
				case q, ok := <-in:
					head, in = q, chanIf(in, ok)
				default:
				}
			} else {
				s.needHead.Store(true)
				select {
				case q, ok := <-in:
					head, in = q, chanIf(in, ok)
				case <-s.wake:
				case <-r.stopped:
					return
				}
				s.needHead.Store(false)
			}
		}
		s.mu.Lock()
		var turn *request
		if len(s.q) > 0 {
			turn = s.q[0]
		}
		over := in == nil && head == nil && turn == nil && s.open == 0
		s.mu.Unlock()
		if over {
			return
		}
		next := head
		if turn != nil && (next == nil || turn.DueNS < next.DueNS) {
			next = turn
		}
		if next == nil {
			if in != nil {
				continue
			}
			select { // sessions still going: their next turns will be queued
			case <-s.wake:
			case <-r.stopped:
				return
			}
			continue
		}
		if head == nil && in != nil {
			s.needHead.Store(true) // a request prepared meanwhile may be due first
		}
		reached, stopped := w.untilWoken(next.DueNS, s.wake)
		s.needHead.Store(false)
		if stopped {
			return
		}
		if !reached {
			continue // a new earliest turn, or a prepared request: look again
		}
		if next == head {
			head = nil
		} else {
			s.mu.Lock()
			i := 0 // next was the earliest; one queued since (due earlier, so due now too) may precede it
			for s.q[i] != next {
				i++
			}
			heap.Remove(&s.q, i)
			s.mu.Unlock()
		}
		e.d.dispatch(next)
	}
}

// chanIf returns in while it is open (ok), else nil.
func chanIf(in chan *request, ok bool) chan *request {
	if !ok {
		return nil
	}
	return in
}

// closedSessions is the closed loop with sequential sessions: its worker keeps each
// conversation it starts, sending its later turns itself (each due when the answer before
// it ended plus the think time, or when the worker became free, whichever is later), and
// takes a new request from the preparer only when none of its conversations has a turn
// ready. A conversation whose next turn the preparer has not read yet waits in its session
// meanwhile: the worker is never blocked on one.
type closedSessions struct {
	r *runner
	d *dispatcher
	s *sessions
}

func (e *closedSessions) run() { runWorkers(e.r.o.Concurrency, e.worker) }

func (e *closedSessions) worker(i int) {
	r, s := e.r, e.s
	me := &s.workers[i]
	due := results.WorkerStart(i, r.o.Concurrency, r.o.RampUp)
	w := e.d.timerWaiter()
	if !w.until(due) {
		return
	}
	in := r.feed.prepared
	for {
		var req *request
		s.mu.Lock()
		if len(me.q) > 0 {
			req = me.q[0]
			me.q[0] = nil
			me.q = me.q[1:]
		}
		s.mu.Unlock()
		if req == nil {
			if in == nil {
				return // the preparer is done and queued nothing more for this worker
			}
			select {
			case q, ok := <-in:
				if !ok {
					in = nil
					continue
				}
				req = q
			case <-me.notify:
				continue
			case <-r.stopped:
				return
			}
		}
		select {
		case <-r.stopped:
			return
		default:
		}
		if sendsOver(r) {
			return
		}
		if req.conv != nil && req.turn == 0 {
			s.mu.Lock()
			req.conv.owner = i
			s.mu.Unlock()
		}
		if req.DueNS > due { // a later turn: its predecessor's end + think time
			due = req.DueNS
			if !w.until(due) {
				return
			}
		}
		due = e.d.sendWait(req, due)
	}
}
