package replay

import (
	"runtime"
	"time"

	"github.com/llmreplay/llmreplay/replay/transport"
)

// waiter waits for absolute deadlines on the run clock. It sleeps on a Go timer until
// shortly before the deadline, then yields in a loop until it passes. The runtime's
// timers wake late by up to a millisecond when the process is idle (netpoll waits in
// whole milliseconds) and by tens of microseconds when it is busy, so the margin left
// for the yield loop adapts: it tracks a decaying maximum of the observed overshoot,
// capped at 0.5 ms (yielding longer burns CPU against lateness that is then the
// operating system's preemption of the whole process, which no waiting scheme beats).
// (A blocking nanosleep through syscall.Syscall holds the goroutine's P until sysmon
// retakes it, up to 10 ms, which starved the senders; the open loop's thread waiter on
// Linux, waiter_linux.go, hands the P off as it sleeps instead, osthread.SleepUntil.)
//
// Its users: the open loop under testing/synctest and outside Linux; closed-loop workers
// (one wait each, for the worker's start; a locked thread per worker would be one OS
// thread per unit of concurrency, each waking to compete for a P); and sessions, whose
// dispatcher must also wake when a turn is queued (untilWoken: a channel, which a thread
// asleep in clock_nanosleep cannot watch) and whose closed-loop workers wait think times.
type waiter struct {
	clk    transport.Clock
	stop   <-chan struct{}
	timer  *time.Timer
	margin time.Duration // current yield window before a deadline
	// The bounds of margin: minMargin and maxMargin, or 0 and 0 for tests under
	// testing/synctest, where a yield loop never blocks and the virtual clock stands still.
	minMargin, maxMargin time.Duration
}

const (
	minMargin = 30 * time.Microsecond
	maxMargin = 500 * time.Microsecond // past this, lateness is the OS's preemption, which yielding cannot beat
	maxSleep  = 50 * time.Millisecond  // a stop is noticed at least this often
)

func newWaiter(clk transport.Clock, stop <-chan struct{}) *waiter {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &waiter{clk: clk, stop: stop, timer: t, margin: maxMargin, minMargin: minMargin, maxMargin: maxMargin}
}

// noSpin makes w sleep on its timer up to each deadline, with no yield loop.
func (w *waiter) noSpin() { w.margin, w.minMargin, w.maxMargin = 0, 0, 0 }

// until waits until the run clock reaches dueNS, on the absolute deadline (never a
// relative sleep that would accumulate drift). It returns false if stop closes first.
func (w *waiter) until(dueNS int64) bool {
	reached, _ := w.untilWoken(dueNS, nil) // a nil channel never fires
	return reached
}

// adapt sets the yield window after a timer that woke overshoot past its target: it
// grows at once to a larger overshoot (plus the floor), and decays slowly (1/64 a wake)
// towards the floor; within [minMargin, maxMargin].
func (w *waiter) adapt(overshoot time.Duration) {
	w.margin = max(overshoot+w.minMargin, w.margin-w.margin/64, w.minMargin)
	w.margin = min(w.margin, w.maxMargin)
}

// untilWoken is waiter.until that also returns, with reached false, when wake fires.
func (w *waiter) untilWoken(dueNS int64, wake <-chan bool) (reached, stopped bool) {
	for {
		d := time.Duration(dueNS - w.clk.Now())
		if d <= 0 {
			return true, false
		}
		if d > w.margin {
			s := min(d-w.margin, maxSleep)
			target := w.clk.Now() + int64(s)
			w.timer.Reset(s)
			select {
			case <-w.timer.C:
			case <-w.stop:
				w.timer.Stop()
				return false, true
			case <-wake:
				w.timer.Stop()
				return false, false
			}
			w.adapt(time.Duration(w.clk.Now() - target))
			continue
		}
		select {
		case <-w.stop:
			return false, true
		case <-wake:
			return false, false
		default:
		}
		runtime.Gosched()
	}
}

// dueWaiter is what the open loop waits for each due time with: the waiter above, or on
// Linux a thread sleeping to absolute deadlines (waiter_linux.go). release ends it (the
// thread waiter unlocks its thread); call it on the goroutine that made it.
type dueWaiter interface {
	until(dueNS int64) bool
	release()
}

func (w *waiter) release() { w.timer.Stop() }
