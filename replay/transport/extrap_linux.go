//go:build linux

package transport

import (
	"runtime"
	"sync"
)

// Extra Ps for the replayer's own threads. A locked thread that gives its P up while it
// waits in the kernel must get one back when it wakes: an idle one at once, else it waits
// until a goroutine running on one blocks or is preempted, and every such return also
// wakes the runtime's sysmon when all Ps were idle. So GOMAXPROCS is raised while they run:
//
//   - by one for each open loop dispatching on a thread (replay's threadWaiter): that wait was the
//     dispatcher's lateness beyond the C sleeper's floor, p99 0.39 and 0.53 ms at 300
//     req/s on 2 vCPUs, 0.21 and 0.26 ms with an extra P shared by all dispatchers
//     (replaybench fidelity); each now keeps its P while it sleeps
//     (osthread.SleepHold), so it needs one of its own;
//   - by one for each running stream reactor, which then keeps its P while it waits in
//     epoll (osthread.EpollWaitHold) instead of handing it off at every wait: the hand-offs
//     and the sysmon wake-ups they caused were ~15% of the replayer's CPU samples (perf by
//     thread), and the replayer's CPU per token fell from 15.0, 16.9, 16.6 to 14.9, 13.5,
//     13.9 µs in alternating runs.
//
// The other goroutines keep as many Ps as before. Not on a process given one P
// (GOMAXPROCS 1): a second P there lets two threads of goroutines share one CPU by the
// kernel's time slices (the simulated engine on one core measured p99 12 ms that way), and
// the threads hand their P off as before. The last release sets GOMAXPROCS back, unless
// something else changed it meanwhile (then it is left as it is).
var extraP struct {
	sync.Mutex
	dispatchers int // open loops dispatching on a thread, each holding a P
	reactors    int // reactors holding a P
	base        int // GOMAXPROCS before the first claim
	set         int // what it was set to; 0: not raised
}

// claimP counts one more holder of kind (a field of extraP) and says whether it has a P
// of its own (GOMAXPROCS was at least 2 before any claim).
func claimP(kind *int) bool {
	extraP.Lock()
	defer extraP.Unlock()
	cur := runtime.GOMAXPROCS(0)
	if extraP.set == 0 || cur != extraP.set {
		extraP.base = cur - extraLocked() // first claim, or someone changed it: take theirs
	}
	*kind++
	return adjustLocked()
}

// releaseP counts one holder of kind fewer.
func releaseP(kind *int) {
	extraP.Lock()
	defer extraP.Unlock()
	*kind--
	if extraP.set != 0 && runtime.GOMAXPROCS(0) != extraP.set {
		extraP.set = 0 // changed by someone else: theirs stands
		return
	}
	adjustLocked()
}

func extraLocked() int { return extraP.reactors + extraP.dispatchers }

// adjustLocked sets GOMAXPROCS to base plus the extra Ps claimed; false when base < 2.
func adjustLocked() bool {
	if extraP.base < 2 {
		return false
	}
	want := extraP.base + extraLocked()
	if runtime.GOMAXPROCS(0) != want {
		runtime.GOMAXPROCS(want)
	}
	extraP.set = want
	if want == extraP.base {
		extraP.set = 0
	}
	return true
}

// BaseProcs returns GOMAXPROCS as it was before the extra Ps were added: the last one
// seen by a claim (tests of the dispatcher's P).
func BaseProcs() int {
	extraP.Lock()
	defer extraP.Unlock()
	return extraP.base
}

// ClaimDispatcherP counts one more open loop dispatching on a thread of its own (replay's
// thread waiter) and says whether it has a P of its own: the dispatchers and the
// reactors share one count, so that the GOMAXPROCS it sets is for both.
func ClaimDispatcherP() bool { return claimP(&extraP.dispatchers) }

// ReleaseDispatcherP counts one such dispatcher fewer.
func ReleaseDispatcherP() { releaseP(&extraP.dispatchers) }
