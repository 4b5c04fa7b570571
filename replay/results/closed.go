package results

import (
	"math/bits"
	"time"
)

// The closed loop's timing contract (docs/replay.md, "Closed loop"): the replayer keeps it
// and analysis relies on it to tell the first wave from the steady state:
//
//   - worker i of C (0-based) starts at WorkerStart(i, C, RampUp) on the run clock;
//   - a request's scheduled_ns is the moment its worker became free: the worker's start for
//     its first request (exact, no clock reading), the instant the worker observed the end
//     of its previous request after that, taken before it waits for the next prepared
//     request. A client path that cannot keep C workers busy (slow prompt building, a slow
//     send, a full results channel) is schedule lateness, sent_ns - scheduled_ns;
//   - the first wave is the requests scheduled no later than the last worker's start,
//     LastWorkerStart(C, RampUp); the steady state is every request after it.

// WorkerStart returns when worker i of c starts on the run clock, in nanoseconds:
// floor(i*rampUp/c), computed exactly (no overflow for any i < c and rampUp >= 0).
func WorkerStart(i, c int, rampUp time.Duration) int64 {
	if rampUp <= 0 || c <= 1 || i <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(i), uint64(rampUp))
	q, _ := bits.Div64(hi, lo, uint64(c)) // hi < c since i < c: the quotient fits
	return int64(q)
}

// LastWorkerStart returns the last worker's start, WorkerStart(c-1, c, rampUp): requests
// scheduled at or before it are the first wave.
func LastWorkerStart(c int, rampUp time.Duration) int64 {
	return WorkerStart(c-1, c, rampUp)
}
