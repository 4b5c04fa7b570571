package agent

import (
	"math"
	"slices"
	"time"

	"github.com/llmreplay/llmreplay/analysis/decode"
)

// series computes the live sessions and calls in flight over time, and their peaks. A
// call is in flight over [sent_ns, end_ns) (one without an end_ns, failed before any
// output, leaves when sent: the results record no failure time, as the report's in-flight
// series reads them); a session is live over [its first sent_ns, its last end_ns or
// sent_ns). Every session counts, complete or not: each loaded the server.
func (r *Report) series(d *decode.Data, calls []call, interval time.Duration) {
	callSpans := make([][2]int64, 0, len(calls))
	var sessionSpans [][2]int64
	groups(calls, func(cs []call) {
		first, last := int64(math.MaxInt64), int64(math.MinInt64)
		for _, c := range cs {
			a := d.Sent[c.row]
			if a == decode.Null64 {
				continue
			}
			b := d.End[c.row]
			if b == decode.Null64 || b < a {
				b = a
			}
			callSpans = append(callSpans, [2]int64{a, b})
			first, last = min(first, a), max(last, b)
		}
		if first != math.MaxInt64 {
			sessionSpans = append(sessionSpans, [2]int64{first, last})
		}
	})
	r.PeakSessions, r.PeakSessionsAtS = peak(sessionSpans)
	r.PeakCalls, r.PeakCallsAtS = peak(callSpans)
	iv := int64(interval)
	r.IntervalS = interval.Seconds()
	var end int64
	for _, s := range sessionSpans {
		end = max(end, s[1])
	}
	if len(sessionSpans) == 0 || iv <= 0 {
		return
	}
	n := int(end/iv) + 1
	live, inflight := timeAverage(sessionSpans, iv, n), timeAverage(callSpans, iv, n)
	r.Series = make([]Point, n)
	for k := range r.Series {
		r.Series[k] = Point{StartS: float64(int64(k)*iv) / 1e9, LiveSessions: live[k], CallsInFlight: inflight[k]}
	}
}

// peak is the most spans [a, b) open at once and when that was first reached (s; NaN
// when no span has a length). A span that ends when another starts does not overlap it.
func peak(spans [][2]int64) (int64, float64) {
	// An event is 2t+1 for a start at t and 2t for an end: sorted as integers, ends come
	// before starts at the same time ([a, b) is half-open). Offsets are in [0, 48 h), far
	// from overflowing; an integer sort is several times faster than one of pairs.
	ev := make([]int64, 0, 2*len(spans))
	for _, s := range spans {
		if s[1] > s[0] {
			ev = append(ev, 2*s[0]+1, 2*s[1])
		}
	}
	slices.Sort(ev)
	var open, best int64
	at := math.NaN()
	for _, e := range ev {
		if e&1 == 1 {
			open++
		} else {
			open--
		}
		if open > best {
			best, at = open, float64(e>>1)/1e9
		}
	}
	return best, at
}

// timeAverage is, for each interval [k·iv, (k+1)·iv) of n, the time-averaged number of the
// spans [a, b) open in it (the sum of their overlaps with it over its length).
func timeAverage(spans [][2]int64, iv int64, n int) []float64 {
	partial := make([]float64, n) // ns inside a span's first and last interval
	diff := make([]int64, n+1)    // spans open through whole intervals
	for _, s := range spans {
		a, b := max(s[0], 0), s[1]
		if b <= a {
			continue
		}
		ka, kb := a/iv, b/iv
		if ka == kb {
			partial[ka] += float64(b - a)
			continue
		}
		partial[ka] += float64((ka+1)*iv - a)
		if kb < int64(n) {
			partial[kb] += float64(b - kb*iv)
		}
		diff[ka+1]++
		diff[min(kb, int64(n))]--
	}
	out := make([]float64, n)
	var full int64
	for k := range out {
		full += diff[k]
		out[k] = (partial[k] + float64(full*iv)) / float64(iv)
	}
	return out
}
