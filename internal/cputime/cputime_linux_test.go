package cputime

import (
	"os"
	"testing"
	"time"
)

// TestOfSelf burns CPU in this process and checks that /proc's count of it moved as far as
// getrusage's did, to within the ticks' 10 ms steps (no clock is read: both count the same
// CPU).
func TestOfSelf(t *testing.T) {
	pid := os.Getpid()
	p0 := Process()
	a, err := Of(pid)
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for Process()-p0 < 200*time.Millisecond {
		x++
	}
	b, err := Of(pid)
	if err != nil {
		t.Fatal(err)
	}
	used := Process() - p0
	if got := b - a; got < used-30*time.Millisecond || got > used+30*time.Millisecond {
		t.Errorf("Of moved %v while getrusage counted %v", got, used)
	}
	if _, err := Of(-1); err == nil {
		t.Error("Of(-1): no error for a process that cannot exist")
	}
}
