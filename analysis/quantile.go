package analysis

import (
	"math"
	"slices"
	"unsafe"

	"github.com/llmreplay/llmreplay/internal/quantile"
)

// PercentileMethod names how every percentile in a report is computed. It is printed in the
// text report and documented in docs/metrics.md.
const PercentileMethod = quantile.Type7Name + "; ITL over gaps rounded to 1 us"

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

// Summarize returns the reported figures of xs (percentiles by quantile.Type7), sorting xs
// in place: the figures a report gives for every latency. The mean is summed in float64
// with Neumaier compensation so that 10^6 samples lose no visible digits.
func Summarize(xs []float64) Quantiles { return summarize(xs) }

func summarize(xs []float64) Quantiles {
	if len(xs) == 0 {
		return Quantiles{}
	}
	sortFloat64s(xs)
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
		ps[i] = quantile.Type7(xs, p)
	}
	q.set(ps[:])
	return q
}

// sortFloat64s sorts xs ascending (finite values): an LSD radix sort on the order-preserving
// bit pattern, 4 passes of 16 bits (passes where every key has the same digit are skipped),
// several times faster than a comparison sort for the 10^6 latencies of a large run.
func sortFloat64s(xs []float64) {
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
