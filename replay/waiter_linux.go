//go:build linux

package replay

import (
	"runtime"
	"sync/atomic"

	"github.com/llmreplay/llmreplay/internal/osthread"
)

// threadWaiter waits for due times on a thread of its own: the goroutine is locked to
// its OS thread, which sleeps in clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) to each
// deadline (osthread.SleepUntil, which hands the goroutine's P to the other goroutines
// while it sleeps). The kernel's hrtimer wakes the thread itself: no Go timer (whose waits
// under 1 ms the netpoller rounds up to 1 ms when the process is idle), no scheduler
// hand-off before the wake, and no yield loop burning a core before each due time. After
// the wake, the thread needs a P back (exitsyscall): an idle one at once, or it queues
// until a running goroutine yields one; that wait is the part of its lateness the
// sleeper floor of replaybench (a C thread, no P) does not have.
//
// It sleeps at most maxSleep at a time, so that a stop is seen within maxSleep.
type threadWaiter struct {
	clk  clock
	stop <-chan struct{}
	// base is CLOCK_MONOTONIC (ns) when the run clock was 0, or a little after
	// (monoBase): a sleep to base+dueNS ends when the run clock has reached dueNS.
	base   int64
	sleeps atomic.Int64 // clock_nanosleep calls, for the tests
	slack  int          // the thread's timer slack before it was set to 1 ns
}

// lockedWaiters counts the threads locked by threadWaiters not yet released (tests).
var lockedWaiters atomic.Int64

// preciseWaiter locks the calling goroutine to its thread until release.
func preciseWaiter(clk clock, stop <-chan struct{}) dueWaiter {
	runtime.LockOSThread()
	lockedWaiters.Add(1)
	// Linux lets a normal thread's sleep end up to its timer slack (50 µs) late; the
	// dispatcher's wakes are its lateness (replaybench's C sleeper sets the same 1 ns).
	slack := osthread.SetTimerSlack(1)
	return &threadWaiter{clk: clk, stop: stop, base: monoBase(clk), slack: slack}
}

func (w *threadWaiter) release() {
	osthread.SetTimerSlack(w.slack)
	lockedWaiters.Add(-1)
	runtime.UnlockOSThread()
}

// monoBase maps the run clock to CLOCK_MONOTONIC. The run clock is time.Since(start):
// Go's monotonic reading (runtime.nanotime, clock_gettime(CLOCK_MONOTONIC) on Linux)
// minus start's, so run = mono - B for a constant B. A run-clock reading n followed by a
// CLOCK_MONOTONIC reading m brackets the instant n was taken at, at or before m:
// B = mono(n) - n <= m - n. So m - n is never below B, and a sleep to (m - n) + due ends
// when CLOCK_MONOTONIC >= B + due, that is when the run clock >= due: the sleep never ends
// before its due time. It may end late by (m - n) - B, the time between the two readings
// (tens of ns); the least of a few pairs keeps it so when a preemption falls between them.
// until checks the run clock after each sleep anyway.
func monoBase(clk clock) int64 {
	b := int64(1<<63 - 1)
	for range 5 {
		n := clk.now()
		b = min(b, osthread.Monotonic()-n)
	}
	return b
}

// until waits until the run clock reaches dueNS; false if stop is closed first (seen
// within maxSleep: the thread sleeps in slices of at most that).
func (w *threadWaiter) until(dueNS int64) bool {
	for {
		now := w.clk.now()
		if now >= dueNS {
			return true
		}
		select {
		case <-w.stop:
			return false
		default:
		}
		w.sleeps.Add(1)
		osthread.SleepUntil(w.base + min(dueNS, now+int64(maxSleep)))
	}
}
