package analysis

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkSummarize1M: the reported figures (mean and five type-7 percentiles) of 10^6
// latencies, sort included, as every latency column of a 1 M-request report costs.
func BenchmarkSummarize1M(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]float64, 1_000_000)
	for i := range src {
		src[i] = 50 + rng.ExpFloat64()*200
	}
	xs := make([]float64, len(src))
	b.ReportAllocs()
	for b.Loop() {
		copy(xs, src)
		summarize(xs)
	}
}
