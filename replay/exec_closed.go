package replay

import (
	"sync"

	"github.com/llmreplay/llmreplay/replay/results"
)

// closedLoop runs Concurrency workers, each sending the next request when its last ends.
// Worker i starts at results.WorkerStart(i, Concurrency, RampUp); each request is due
// when its worker became free (the worker-free rule), stamped before the worker waits for
// the preparer, so that waiting for a body is lateness, not a later due time
// (coordinated omission).
type closedLoop struct {
	r *runner
	d *dispatcher
}

func (e *closedLoop) run() { runWorkers(e.r.o.Concurrency, e.worker) }

// runWorkers runs worker(0) to worker(n-1), each on a goroutine of its own, and returns
// when all have.
func runWorkers(n int, worker func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker(i)
		}()
	}
	wg.Wait()
}

func (e *closedLoop) worker(i int) {
	r, d := e.r, e.d
	// The first due is the worker's start, exactly: waited for (the run start may be
	// ahead, --start-at), never read from the clock.
	due := results.WorkerStart(i, r.o.Concurrency, r.o.RampUp)
	if !d.timerWaiter().until(due) {
		return
	}
	for {
		req, ok := r.feed.next()
		if !ok {
			return
		}
		select {
		case <-r.stopped: // next picks at random when a request is ready too
			return
		default:
		}
		if sendsOver(r) {
			return
		}
		due = d.sendWait(req, due)
	}
}

// sendsOver reports, as a closed-loop worker is about to send, that --duration is over
// (a closed loop bounds its send times, having no due times to bound), and then ends the
// run's dispatching.
func sendsOver(r *runner) bool {
	if r.o.Duration > 0 && r.clk.Now() > int64(r.o.Duration) {
		r.stop(errScheduleEnd)
		return true
	}
	return false
}
