package replay

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
)

// dispatcher is what every executor sends through: due times in, sends out, records
// back. An executor decides when each request is due and waits for it; the dispatcher
// sends the request through the transport (or records it dropped when MaxInflight
// requests are in flight: it never waits for capacity), counts it in flight, and hands
// its record to the writer when it ends. It never looks inside the transport: a
// transport.SplitTransport lets it begin the write itself, at the due time.
type dispatcher struct {
	clk     transport.Clock
	hard    context.Context // canceled: every request in flight ends at once
	stopped <-chan struct{} // closed: dispatching ends (the graceful stop)
	tr      transport.Transport
	split   transport.SplitTransport // tr when it can begin a send from the dispatcher; nil otherwise
	prog    *Progress
	results *resultQueue
	runID   string // the run id, known before any executor starts

	maxInflight int64
	maxLateness int64
	shard       int32
	maxLine     int                   // the client's SSE line cap
	noSpin      bool                  // seams.noSpin: timer waiters with no yield loop (synctest)
	ended       func(*results.Result) // seams.ended
	// turnEnded, with sequential sessions, takes a turn's end (session.go): its history,
	// and its session's next turn.
	turnEnded func(req *request, res *results.Result, endNS int64)

	wg       sync.WaitGroup // requests in flight
	inflight atomic.Int64
	ssePool  sync.Pool
}

// sendWindow is how long before a due time the open loop commits to sending the request
// from the dispatcher's thread: it takes the connection there and makes its last sleep
// (which no stop cuts short) from there.
const sendWindow = 2 * time.Millisecond

// dueWaiter returns the open loop's waiter: under testing/synctest (seams.noSpin) always
// the timer one, whose virtual clock a thread sleeping on the real one would not follow
// (it would hang the bubble); else preciseWaiter's choice for this system.
func (d *dispatcher) dueWaiter() dueWaiter {
	if d.noSpin {
		return d.timerWaiter()
	}
	return preciseWaiter(d.clk, d.stopped)
}

// timerWaiter returns a timer waiter on the run clock that ends with dispatching: the
// closed loop's and the sessions' (waiter.go says why).
func (d *dispatcher) timerWaiter() *waiter {
	w := newWaiter(d.clk, d.stopped)
	if d.noSpin {
		w.noSpin()
	}
	return w
}

// sendAtDue sends req at its due time from the dispatcher's thread when it can: w writes
// at a due time (the thread waiter), the transport can begin a send, fewer than
// MaxInflight requests are in flight (only this dispatcher adds to them, so it stays so
// until the send) and the transport begins one (the raw client: an idle pooled
// connection). sent says it did; ok is false when the run stopped while it waited.
// Otherwise the caller waits for the due time and dispatches as before.
func (d *dispatcher) sendAtDue(w dueWaiter, req *request) (sent, ok bool) {
	dw, is := w.(transport.DueWriter)
	if !is || d.split == nil {
		return false, true
	}
	if !w.until(req.DueNS - int64(sendWindow)) {
		return false, false
	}
	if d.inflight.Load() >= d.maxInflight {
		return false, true // dispatch records it dropped at its due time
	}
	d.withRunID(req)
	st := d.split.BeginAt(dw, &req.Request)
	if st == nil {
		return false, true
	}
	d.countLate(st.SentAt() - req.DueNS)
	d.launch(req, st)
	return true, true
}

// dispatch sends req now, or records it dropped when MaxInflight requests are in flight
// (a dropped turn of a sequential session ends as a failed one). With a transport.SplitTransport
// (the raw client with a pooled connection), the dispatcher writes the request itself: no
// goroutine hand-off or connection set-up stands between the due time and the write, and
// the transport reads the response and ends the request (launch). Otherwise (no idle
// connection, a message the socket did not take whole, or net/http) a new goroutine does
// the rest.
func (d *dispatcher) dispatch(req *request) {
	d.countLate(d.clk.Now() - req.DueNS)
	if d.inflight.Load() >= d.maxInflight {
		res := d.resultOf(req)
		res.Status = results.StatusDropped
		res.Error = fmt.Sprintf("not sent: %d requests in flight (--max-inflight)", d.maxInflight)
		if req.conv != nil {
			d.turnEnded(req, res, d.clk.Now())
		}
		if !req.Warmup {
			d.results.put(res)
		}
		return
	}
	d.withRunID(req)
	var st transport.SendStart
	if d.split != nil {
		st = d.split.Begin(d.clk, &req.Request)
	}
	d.launch(req, st)
}

// countLate counts a send later than MaxLateness in the progress.
func (d *dispatcher) countLate(late int64) {
	if late > d.maxLateness {
		d.prog.Late.Add(1)
		d.prog.LastLateNS.Store(late)
	}
}

// launch hands req to a new goroutine that sends it (or, with st, finishes the send the
// dispatcher began) and reads its response; or, when the dispatcher wrote req's whole
// message, to the transport, which reads the response and ends the request on its own
// thread (transport.SplitTransport.RoundTripAsync). A session's turn always ends on a goroutine: its end builds the
// next turn's prompt, work for no transport's thread.
func (d *dispatcher) launch(req *request, st transport.SendStart) {
	d.inflight.Add(1)
	d.prog.InFlight.Add(1)
	d.wg.Add(1)
	if req.conv == nil && st != nil && st.Whole() {
		// No goroutine is started for it.
		res, sse := d.sendBegin(req)
		d.split.RoundTripAsync(d.hard, d.clk, &req.Request, res, sse, d.onTokens, st, func() { d.sendEnd(req, res, sse) })
		return
	}
	go d.send(req, st)
}

// sendWait sends req, due at dueNS, on the caller's goroutine and returns when it ends:
// the closed loop's worker is free from the returned run clock on (send).
func (d *dispatcher) sendWait(req *request, dueNS int64) (freeNS int64) {
	req.DueNS = dueNS
	d.inflight.Add(1)
	d.prog.InFlight.Add(1)
	d.wg.Add(1)
	return d.send(req, nil)
}

// send performs one request and hands its record to the writer. It returns the run clock
// when the request ended (its response was over), read before the bookkeeping and the
// hand-off to the writer: a closed-loop worker is free from then on.
func (d *dispatcher) send(req *request, st transport.SendStart) (freeNS int64) {
	res, sse := d.sendBegin(req)
	d.tr.RoundTrip(d.hard, d.clk, &req.Request, res, sse, d.onTokens, st)
	return d.sendEnd(req, res, sse)
}

// sendBegin starts the record of req, launched (d.wg counts it), and counts it sent.
func (d *dispatcher) sendBegin(req *request) (*results.Result, *transport.SSEReader) {
	d.withRunID(req) // the closed loop's requests (the open loop's have it already)
	res := d.resultOf(req)
	sse, _ := d.ssePool.Get().(*transport.SSEReader)
	if sse == nil {
		sse = transport.NewSSEReader(nil, d.clk.Now, 4<<10, d.maxLine)
	}
	d.prog.Sent.Add(1)
	return res, sse
}

// sendEnd ends req, whose record res is complete: see send.
func (d *dispatcher) sendEnd(req *request, res *results.Result, sse *transport.SSEReader) (freeNS int64) {
	defer d.wg.Done()
	freeNS = d.clk.Now()
	sse.Reset(nil)
	d.ssePool.Put(sse)
	req.Body, req.Head, req.Shared = nil, nil, nil
	d.inflight.Add(-1)
	d.prog.InFlight.Add(-1)
	if req.conv != nil || req.call != nil {
		d.turnEnded(req, res, freeNS) // queues the session's next turn, if read, or an agent's next calls
	}
	if f := d.ended; f != nil {
		f(res)
	}
	if !req.Warmup {
		d.results.put(res)
	}
	return freeNS
}

// onTokens counts streamed output tokens in the progress.
func (d *dispatcher) onTokens(n int) { d.prog.OutputTokens.Add(int64(n)) }

// withRunID gives req the run id, if it was prepared before the id was known: one copy
// over the head's placeholder. The dispatcher calls it before it sends.
func (d *dispatcher) withRunID(req *request) {
	if req.RunID == "" {
		req.RunID = d.runID
		if req.RunIDAt > 0 {
			copy(req.Head[req.RunIDAt:], req.RunID)
		}
	}
}

// resultOf returns the record of req with every measured field null.
func (d *dispatcher) resultOf(req *request) *results.Result {
	res := results.NewResult(req.ID, d.shard, req.DueNS, req.PromptTokens, req.OutputTokens)
	if req.HasSession {
		res.SessionID, res.Turn, res.SessionWaitNS = req.Session, req.turn, req.sessionWaitNS
	}
	if req.call != nil {
		setRecorded(res, req.call, req.gapNS)
	}
	if req.Inputs > 0 {
		res.Inputs = req.Inputs
	}
	if req.images > 0 {
		res.Images, res.ImageTokens = req.images, req.imageTokens
	}
	return res
}
