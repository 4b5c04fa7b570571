package results

import (
	"math"
	"testing"
	"time"
)

// TestWorkerStart: floor(i·ramp/c) exactly, even where i·ramp overflows int64, and the last
// worker's start bounds the first wave.
func TestWorkerStart(t *testing.T) {
	for _, tc := range []struct {
		i, c int
		ramp time.Duration
		want int64
	}{
		{0, 4, time.Second, 0},
		{1, 3, time.Second, 333333333},
		{2, 3, time.Second, 666666666},
		{5, 8, 0, 0},
		{3, 1, time.Second, 0},
		{1 << 20, 1<<20 + 1, math.MaxInt64, int64(math.MaxInt64/(1<<20+1)*(1<<20) + (math.MaxInt64%(1<<20+1))*(1<<20)/(1<<20+1))},
	} {
		if got := WorkerStart(tc.i, tc.c, tc.ramp); got != tc.want {
			t.Errorf("WorkerStart(%d, %d, %v) = %d, want %d", tc.i, tc.c, tc.ramp, got, tc.want)
		}
	}
	if got := LastWorkerStart(3, 10); got != 6 {
		t.Errorf("LastWorkerStart(3, 10) = %d, want 6", got)
	}
	if got := LastWorkerStart(256, 0); got != 0 {
		t.Errorf("LastWorkerStart(256, 0) = %d, want 0", got)
	}
}
