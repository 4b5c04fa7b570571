package replay

import (
	"math"
	"time"

	"github.com/llmreplay/llmreplay/trace"
)

// Due returns when a request arriving at arrival is due, as an offset from the run start:
// (arrival - origin) / speedup, where origin is the arrival of the run's first request
// (so a run starts with its first request, wherever the trace slice began).
func Due(arrival, origin time.Duration, speedup float64) time.Duration {
	d := float64(arrival-origin) / speedup
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(math.Round(d))
}

// SpeedupForRate returns the speedup at which n requests whose arrivals span span come at
// a mean rate of rate requests per second: trace.SpeedupForRate, the rate being
// trace.MeanRate's (n−1)/span.
func SpeedupForRate(n int64, span time.Duration, ratePerSecond float64) (float64, error) {
	return trace.SpeedupForRate(n, span, ratePerSecond)
}

// ScanSpan reads src to its end (or its first limit requests when limit > 0) and returns
// how many requests it has and the span from the first arrival to the last; the input of
// SpeedupForRate. src is consumed: open the trace again to replay it.
func ScanSpan(src trace.Source, limit int64) (n int64, span time.Duration, err error) {
	var first, last time.Duration
	for src.Next() {
		a := src.Request().Arrival
		if n == 0 {
			first = a
		}
		last = a
		n++
		if limit > 0 && n >= limit {
			break
		}
	}
	if err := src.Err(); err != nil {
		return n, 0, err
	}
	return n, last - first, nil
}

// planner decides, request by request, what a run does with the trace: it is the pure
// part of the scheduler (no clock), fed arrivals in trace order.
type planner struct {
	speedup  float64       // open loop; ignored when closed
	closed   bool          // closed loop: no due times
	duration time.Duration // 0 = unbounded; requests due later are not part of the run
	limit    int64         // 0 = unbounded; recorded requests
	warmup   int64         // leading requests sent but not recorded

	n         int64 // requests planned so far, warm-up included
	origin    time.Duration
	hasOrigin bool // origin given (a shard: the whole trace's first arrival), not the first seen
	recorded  int64
}

// plan returns the due offset of the next request (0 in closed loop), whether it is a
// warm-up request, and ok=false when the run has no more requests.
func (p *planner) plan(arrival time.Duration) (due time.Duration, warmup, ok bool) {
	if p.n == 0 && !p.hasOrigin {
		p.origin = arrival
	}
	if arrival < p.origin { // unsorted input: never schedule into the past
		arrival = p.origin
	}
	warmup = p.n < p.warmup
	if !warmup && p.limit > 0 && p.recorded >= p.limit {
		return 0, false, false
	}
	if !p.closed {
		due = Due(arrival, p.origin, p.speedup)
		if p.duration > 0 && due > p.duration {
			return 0, false, false
		}
	}
	p.n++
	if !warmup {
		p.recorded++
	}
	return due, warmup, true
}
