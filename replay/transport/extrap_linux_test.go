//go:build linux

package transport

import (
	"runtime"
	"testing"
)

// The extra Ps: one for any number of overlapping open loops, one per reactor; set back
// by the last release; none granted on one P; not set back over a change made by someone
// else meanwhile.
func TestExtraP(t *testing.T) {
	// A reactor of an earlier test holds its P until it retires (reactorIdle).
	waitFor(t, "no extra P held", func() bool {
		extraP.Lock()
		defer extraP.Unlock()
		return extraP.dispatchers+extraP.reactors == 0
	})
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	want := func(what string, n int) {
		t.Helper()
		if p := runtime.GOMAXPROCS(0); p != n {
			t.Fatalf("%s: GOMAXPROCS %d, want %d", what, p, n)
		}
	}
	runtime.GOMAXPROCS(2)
	if !claimP(&extraP.dispatchers) || !claimP(&extraP.dispatchers) {
		t.Fatal("no P granted on 2")
	}
	want("two open loops on 2", 4)
	if !claimP(&extraP.reactors) {
		t.Fatal("no P granted to a reactor")
	}
	want("and a reactor", 5)
	releaseP(&extraP.dispatchers)
	want("one of two open loops ended", 4)
	releaseP(&extraP.dispatchers)
	want("both ended", 3)
	releaseP(&extraP.reactors)
	want("all ended", 2)

	runtime.GOMAXPROCS(1)
	if claimP(&extraP.reactors) {
		t.Error("a P granted on 1")
	}
	want("on one P", 1)
	releaseP(&extraP.reactors)
	want("on one P, released", 1)

	runtime.GOMAXPROCS(4)
	claimP(&extraP.dispatchers)
	runtime.GOMAXPROCS(8) // the user's own change
	releaseP(&extraP.dispatchers)
	want("changed meanwhile", 8)
}
