package trace

import (
	"fmt"
	"math"
	"time"
)

// MeanRate is a trace's mean arrival rate, the one definition `trace info`, `trace slice
// --rate` and `replay --rate` share: n arrivals spanning span (last − first) have n−1 gaps,
// so the rate is (n−1)/span per second, the reciprocal of the mean inter-arrival gap.
// Dividing every arrival by a speedup s divides the span by s and so multiplies this rate
// by exactly s (n/span would not: rescaled to R it gives a mean gap of (n−1)/(nR)).
// ok is false when there is no rate: n < 2 or span <= 0.
func MeanRate(n int64, span time.Duration) (perSecond float64, ok bool) {
	if n < 2 || span <= 0 {
		return 0, false
	}
	return float64(n-1) / span.Seconds(), true
}

// SpeedupForRate returns the speedup that brings n arrivals spanning span to a MeanRate of
// ratePerSecond: ratePerSecond / MeanRate(n, span) = ratePerSecond · span / (n−1).
func SpeedupForRate(n int64, span time.Duration, ratePerSecond float64) (float64, error) {
	switch {
	case !(ratePerSecond > 0) || math.IsInf(ratePerSecond, 0):
		return 0, fmt.Errorf("rate %v: must be a positive number of requests per second", ratePerSecond)
	case n < 2:
		return 0, fmt.Errorf("rate: the trace has %d request(s): a rate needs at least 2", n)
	case span <= 0:
		return 0, fmt.Errorf("rate: all %d requests arrive at the same time: there is no rate to rescale", n)
	}
	return ratePerSecond * span.Seconds() / float64(n-1), nil
}
