package stats

import (
	"math"
	"slices"
	"unsafe"
)

// Type7Name names the method of Type7 in outputs (reports, docs).
const Type7Name = "linear interpolation between closest ranks (numpy default, Hyndman-Fan type 7)"

// Rank7 returns, for the p-quantile of n sorted samples x₀..xₙ₋₁ (n > 0, 0 <= p <= 1),
// the 0-based rank lo and the weight frac of the rank above it under Hyndman and Fan's
// type 7: with h = (n−1)p, lo = ⌊h⌋, frac = h − ⌊h⌋, and
// Q(p) = x_lo + frac·(x_lo+1 − x_lo); at the top (lo >= n−1) Q(p) = xₙ₋₁ with frac 0.
// It serves callers whose samples are not a slice (a histogram of counts).
func Rank7(n int64, p float64) (lo int64, frac float64) {
	h := float64(n-1) * p
	lo = int64(math.Floor(h))
	if lo >= n-1 {
		return n - 1, 0
	}
	return lo, h - float64(lo)
}

// Type7 returns the p-quantile (0 <= p <= 1) of sorted, non-empty xs by linear
// interpolation between closest ranks: Hyndman and Fan's type 7, numpy's default
// ("linear"), pandas', R's default and DuckDB's quantile_cont. See Rank7 for the maths.
func Type7(sorted []float64, p float64) float64 {
	lo, frac := Rank7(int64(len(sorted)), p)
	if frac == 0 {
		return sorted[lo]
	}
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

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

// Summarize returns the reported figures of xs (percentiles by Type7), sorting xs in place:
// the figures a report gives for every latency. The mean is summed in float64 with
// Neumaier compensation (a running sum s and a correction c that collects what each
// addition s+x rounds away) so that 10^6 samples lose no visible digits.
func Summarize(xs []float64) Quantiles {
	if len(xs) == 0 {
		return Quantiles{}
	}
	SortFloat64s(xs)
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
		ps[i] = Type7(xs, p)
	}
	q.set(ps[:])
	return q
}

// SortFloat64s sorts xs ascending (finite values), in place, as slices.Sort would: an LSD
// radix sort on the order-preserving bit pattern (sign bit flipped for positives, every bit
// for negatives), 4 passes of 16 bits (passes where every key has the same digit are
// skipped), several times faster than a comparison sort for the 10^6 latencies of a large run.
func SortFloat64s(xs []float64) {
	if len(xs) < 4096 {
		slices.Sort(xs)
		return
	}
	keys := unsafe.Slice((*uint64)(unsafe.Pointer(&xs[0])), len(xs))
	for i, x := range xs {
		b := math.Float64bits(x)
		if b&(1<<63) != 0 {
			keys[i] = ^b
		} else {
			keys[i] = b | 1<<63
		}
	}
	tmp := make([]uint64, len(keys))
	src, dst := keys, tmp
	var count [1 << 16]int
	for shift := uint(0); shift < 64; shift += 16 {
		clear(count[:])
		for _, k := range src {
			count[(k>>shift)&0xffff]++
		}
		if count[(src[0]>>shift)&0xffff] == len(src) {
			continue
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for _, k := range src {
			d := (k >> shift) & 0xffff
			dst[count[d]] = k
			count[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
	}
	for i, k := range keys {
		if k&(1<<63) != 0 {
			keys[i] = k &^ (1 << 63)
		} else {
			keys[i] = ^k
		}
	}
}
