//go:build linux

package replay

import (
	"runtime"
	"sync/atomic"
	"syscall"

	"github.com/llmreplay/llmreplay/internal/osthread"
	"github.com/llmreplay/llmreplay/internal/raceio"
	"github.com/llmreplay/llmreplay/replay/transport"
)

// threadWaiter waits for due times on a thread of its own: the goroutine is locked to
// its OS thread, which sleeps in clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) to each
// deadline. The kernel's hrtimer wakes the thread itself: no Go timer (whose waits under
// 1 ms the netpoller rounds up to 1 ms when the process is idle), no scheduler hand-off
// before the wake, and no yield loop burning a core before each due time.
//
// With a P of its own (hold: GOMAXPROCS raised by one for each dispatching thread,
// transport's extrap_linux.go) the thread keeps its P while it sleeps (osthread.SleepHold) and runs as
// it wakes, as replaybench's C sleeper does. Without one (a process on one P) it hands the
// P to the other goroutines while it sleeps (osthread.SleepUntil) and needs one back when
// it wakes (exitsyscall): an idle one at once, or it queues until a running goroutine
// yields one, and the next due time may pass meanwhile.
//
// It sleeps at most maxSleep at a time, so that a stop is seen within maxSleep.
type threadWaiter struct {
	clk  transport.Clock
	stop <-chan struct{}
	// base is CLOCK_MONOTONIC (ns) when the run clock was 0, or a little after
	// (monoBase): a sleep to base+dueNS ends when the run clock has reached dueNS.
	base   int64
	sleeps atomic.Int64 // sleeps that reached their deadline, for the tests
	// onSlice, when set (tests), sees each slice as it is decided: the run clock then
	// and the run-clock time the slice sleeps to.
	onSlice func(now, end int64)
	slack   int    // the thread's timer slack before it was set to 1 ns
	hold    bool   // the thread has a P of its own and keeps it while it sleeps
	name    string // the thread's name before it was named llmr-dispatch
}

// DispatcherThreadName is the open loop's thread's name while it dispatches (top -H).
const DispatcherThreadName = "llmr-dispatch"

// lockedWaiters counts the threads locked by threadWaiters not yet released (tests).
var lockedWaiters atomic.Int64

// dueWrites counts the requests thread waiters wrote at their due time (tests: that the
// raw client's due-time send is taken, not only possible).
var dueWrites atomic.Int64

// preciseWaiter locks the calling goroutine to its thread until release.
func preciseWaiter(clk transport.Clock, stop <-chan struct{}) dueWaiter {
	runtime.LockOSThread()
	lockedWaiters.Add(1)
	hold := transport.ClaimDispatcherP()
	// Linux lets a normal thread's sleep end up to its timer slack (50 µs) late; the
	// dispatcher's wakes are its lateness (replaybench's C sleeper sets the same 1 ns).
	slack := osthread.SetTimerSlack(1)
	name := osthread.SetName(DispatcherThreadName)
	return &threadWaiter{clk: clk, stop: stop, base: monoBase(clk), slack: slack, name: name, hold: hold}
}

func (w *threadWaiter) release() {
	transport.ReleaseDispatcherP()
	osthread.SetName(w.name)
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
func monoBase(clk transport.Clock) int64 {
	b := int64(1<<63 - 1)
	for range 5 {
		n := clk.Now()
		b = min(b, osthread.Monotonic()-n)
	}
	return b
}

// until waits until the run clock reaches dueNS; false if stop is closed first (seen
// within maxSleep: the thread sleeps in slices of at most that).
func (w *threadWaiter) until(dueNS int64) bool {
	for {
		now := w.clk.Now()
		if now >= dueNS {
			return true
		}
		if w.stopped() {
			return false
		}
		end := min(dueNS, now+int64(maxSleep))
		if w.onSlice != nil {
			w.onSlice(now, end)
		}
		if deadline := w.base + end; !w.hold {
			osthread.SleepUntil(deadline)
		} else {
			// A signal (sysmon's preemption request every 10 ms of running, as the
			// runtime sees a held sleep) ends it early: the calls here honour the
			// request, and the slice goes on to the same deadline.
			for !osthread.SleepHold(deadline) {
				if w.stopped() {
					return false
				}
			}
		}
		w.sleeps.Add(1)
	}
}

// stopped reports whether stop is closed.
func (w *threadWaiter) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// sendAt sleeps until the run clock reaches dueNS and writes iov to fd as the thread
// wakes, before anything else (osthread.SleepWritev: without hold, before it takes its P
// back); sentNS is the run clock just before the write. The caller is at most sendWindow
// before dueNS (the sleep is not cut for a stop, nor for the runtime's preemption).
func (w *threadWaiter) sendAt(dueNS int64, fd int, iov *syscall.Iovec, cnt int) (sentNS int64, n int, err syscall.Errno) {
	w.sleeps.Add(1)
	raceio.Release(fd)
	woke, n, err := osthread.SleepWritev(w.base+dueNS, fd, iov, cnt, w.hold)
	return max(woke-w.base, dueNS), n, err
}

// WriteAt is sendAt for a request's message: its head, then its body. It makes the
// thread waiter the transport's DueWriter, so that the raw client's send at the due time
// leaves from the dispatcher's own thread as it wakes.
func (w *threadWaiter) WriteAt(dueNS int64, fd int, head []byte, r *transport.Request) (sentNS int64, n int, err syscall.Errno) {
	dueWrites.Add(1)
	iov, cnt := transport.MessageIovec(head, r)
	sentNS, n, err = w.sendAt(dueNS, fd, &iov[0], cnt)
	runtime.KeepAlive(head)
	runtime.KeepAlive(r)
	return sentNS, n, err
}

// The dispatcher finds the due-time send by asserting its waiter to a transport.DueWriter;
// a waiter that stopped being one would silently lose it, so the compiler checks.
var _ transport.DueWriter = (*threadWaiter)(nil)
