package analysis

import (
	"math"
	"slices"
)

// PercentileMethod names how every percentile in a report is computed. It is printed in the
// text report and documented in docs/metrics.md.
const PercentileMethod = "linear interpolation between closest ranks (numpy default, Hyndman-Fan type 7)"

// Quantiles are the figures reported for every latency: mean, p50, p90, p95, p99, p99.9 and
// max, over N samples. N == 0 means there were no samples and every figure is undefined.
type Quantiles struct {
	N    int64
	Mean float64
	P50  float64
	P90  float64
	P95  float64
	P99  float64
	P999 float64
	Max  float64
}

// reportedPs are the percentiles every Quantiles holds, in field order.
var reportedPs = [...]float64{0.50, 0.90, 0.95, 0.99, 0.999}

func (q *Quantiles) set(ps []float64) {
	q.P50, q.P90, q.P95, q.P99, q.P999 = ps[0], ps[1], ps[2], ps[3], ps[4]
}

// rankOf returns, for the p-quantile of n samples, the 0-based rank lo and the weight
// frac of the rank above it: Q(p) = x[lo] + frac*(x[lo+1]-x[lo]), with h = (n-1)p
// (Hyndman and Fan's type 7, numpy's "linear", DuckDB's quantile_cont).
func rankOf(n int64, p float64) (lo int64, frac float64) {
	h := float64(n-1) * p
	lo = int64(math.Floor(h))
	if lo >= n-1 {
		return n - 1, 0
	}
	return lo, h - float64(lo)
}

// quantileSorted returns the p-quantile of sorted xs by type-7 linear interpolation.
func quantileSorted(xs []float64, p float64) float64 {
	lo, frac := rankOf(int64(len(xs)), p)
	if frac == 0 {
		return xs[lo]
	}
	return xs[lo] + frac*(xs[lo+1]-xs[lo])
}

// summarize returns the reported figures of xs, sorting xs in place. The mean is summed in
// float64 with Neumaier compensation so that 10^6 samples lose no visible digits.
func summarize(xs []float64) Quantiles {
	if len(xs) == 0 {
		return Quantiles{}
	}
	slices.Sort(xs)
	q := Quantiles{N: int64(len(xs)), Max: xs[len(xs)-1]}
	var sum, c float64
	for _, x := range xs {
		t := sum + x
		if math.Abs(sum) >= math.Abs(x) {
			c += (sum - t) + x
		} else {
			c += (x - t) + sum
		}
		sum = t
	}
	q.Mean = (sum + c) / float64(len(xs))
	var ps [len(reportedPs)]float64
	for i, p := range reportedPs {
		ps[i] = quantileSorted(xs, p)
	}
	q.set(ps[:])
	return q
}

// float32Key maps a float32 to a uint32 whose unsigned order is the float order
// (negative floats have every bit flipped, positive ones only the sign bit).
func float32Key(f float32) uint32 {
	b := math.Float32bits(f)
	if b&0x80000000 != 0 {
		return ^b
	}
	return b | 0x80000000
}

func keyFloat32(k uint32) float32 {
	if k&0x80000000 != 0 {
		return math.Float32frombits(k &^ 0x80000000)
	}
	return math.Float32frombits(^k)
}

// summarizeLarge returns the reported figures of the multiset in which xs[i] occurs ws[i]
// times (once each when ws is nil), without sorting or copying xs: the chunk-level samples
// (ITL) of a long run number in the hundreds of millions.
//
// It is an exact radix selection on the float32 bit pattern: one pass histograms the top 16
// bits of the order-preserving key (and sums the mean), a second pass histograms the low 16
// bits inside only the buckets that hold a wanted rank, which pins each wanted rank to one
// exact value. The percentiles are then type-7 interpolations between those exact order
// statistics: the same numbers a full sort would give, in O(n) time and O(1) extra memory.
func summarizeLarge(xs []float32, ws []uint32) Quantiles {
	if len(xs) == 0 {
		return Quantiles{}
	}
	var hi [1 << 16]int64
	var n int64
	var sum, c float64
	maxKey := uint32(0)
	add := func(x float64) {
		t := sum + x
		if math.Abs(sum) >= math.Abs(x) {
			c += (sum - t) + x
		} else {
			c += (x - t) + sum
		}
		sum = t
	}
	for i, x := range xs {
		k := float32Key(x)
		w := int64(1)
		if ws != nil {
			w = int64(ws[i])
			if w == 0 {
				continue
			}
		}
		hi[k>>16] += w
		n += w
		add(float64(x) * float64(w))
		if k > maxKey {
			maxKey = k
		}
	}
	if n == 0 {
		return Quantiles{}
	}
	q := Quantiles{N: n, Mean: (sum + c) / float64(n), Max: float64(keyFloat32(maxKey))}

	// The ranks wanted: lo and lo+1 of every reported percentile.
	type want struct {
		rank   int64
		bucket int   // top-16-bit bucket holding the rank
		before int64 // samples in lower buckets
		value  float64
	}
	var wants []want
	for _, p := range reportedPs {
		lo, _ := rankOf(n, p)
		wants = append(wants, want{rank: lo})
		if lo+1 < n {
			wants = append(wants, want{rank: lo + 1})
		} else {
			wants = append(wants, want{rank: lo})
		}
	}
	for i := range wants {
		var cum int64
		b := 0
		for cum+hi[b] <= wants[i].rank {
			cum += hi[b]
			b++
		}
		wants[i].bucket, wants[i].before = b, cum
	}
	// Second pass: low 16 bits, only in the candidate buckets.
	slot := map[int]int{}
	for _, w := range wants {
		if _, ok := slot[w.bucket]; !ok {
			slot[w.bucket] = len(slot)
		}
	}
	var isCand [1 << 16]int8
	for i := range isCand {
		isCand[i] = -1
	}
	for bk, s := range slot {
		isCand[bk] = int8(s)
	}
	lows := make([][]int64, len(slot))
	for i := range lows {
		lows[i] = make([]int64, 1<<16)
	}
	for i, x := range xs {
		k := float32Key(x)
		s := isCand[k>>16]
		if s < 0 {
			continue
		}
		w := int64(1)
		if ws != nil {
			w = int64(ws[i])
		}
		lows[s][k&0xffff] += w
	}
	for i := range wants {
		low := lows[slot[wants[i].bucket]]
		cum := wants[i].before
		for l := 0; l < 1<<16; l++ {
			if cum+low[l] > wants[i].rank {
				wants[i].value = float64(keyFloat32(uint32(wants[i].bucket)<<16 | uint32(l)))
				break
			}
			cum += low[l]
		}
	}
	var ps [len(reportedPs)]float64
	for i, p := range reportedPs {
		_, frac := rankOf(n, p)
		a, bv := wants[2*i].value, wants[2*i+1].value
		ps[i] = a + frac*(bv-a)
	}
	q.set(ps[:])
	return q
}
