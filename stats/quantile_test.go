package stats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	mstats "github.com/montanaflynn/stats"
)

func TestType7(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		p    float64
		want float64
	}{
		// numpy.quantile([...], p) (method="linear") gives these.
		{[]float64{7}, 0.99, 7},
		{[]float64{1, 2}, 0.5, 1.5},
		{[]float64{1, 2, 3, 4}, 0.5, 2.5},
		{[]float64{1, 2, 3, 4}, 0.9, 3.7},
		{[]float64{1, 2, 3, 4}, 0, 1},
		{[]float64{1, 2, 3, 4}, 1, 4},
		{[]float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}, 0.99, 99.1},
		{[]float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}, 0.95, 95.5},
		{[]float64{0, 0, 0, 10}, 0.75, 2.5},
	} {
		if got := Type7(c.xs, c.p); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Type7(%v, %v) = %v, want %v", c.xs, c.p, got, c.want)
		}
	}
}

// TestType7MatchesLibrary holds Type7 against montanaflynn/stats.Percentile, which is
// type 7 in the version go.mod pins (v0.14.0; older versions used other methods, so this
// test also catches an upgrade that changes it). Percentile sorts a copy per call, so the
// hot paths use Type7 on data sorted once.
func TestType7MatchesLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{1, 2, 3, 10, 101, 1000} {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = math.Round(rng.ExpFloat64()*1e4) / 10
		}
		slices.Sort(xs)
		for _, p := range []float64{0.001, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1} {
			want, err := mstats.Percentile(xs, 100*p)
			if err != nil {
				t.Fatal(err)
			}
			if got := Type7(xs, p); math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
				t.Errorf("n=%d p=%v: Type7 %v, stats.Percentile %v", n, p, got, want)
			}
		}
	}
}

func TestRank7(t *testing.T) {
	for _, c := range []struct {
		n    int64
		p    float64
		lo   int64
		frac float64
	}{{1, 0.5, 0, 0}, {5, 1, 4, 0}, {5, 0.5, 2, 0}, {11, 0.99, 9, 0.9}, {3, 0.25, 0, 0.5}} {
		lo, frac := Rank7(c.n, c.p)
		if lo != c.lo || math.Abs(frac-c.frac) > 1e-12 {
			t.Errorf("Rank7(%d, %v) = %d, %v; want %d, %v", c.n, c.p, lo, frac, c.lo, c.frac)
		}
	}
}

func BenchmarkType7(b *testing.B) {
	xs := make([]float64, 1_000_000)
	for i := range xs {
		xs[i] = float64(i)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range []float64{0.5, 0.9, 0.95, 0.99, 0.999} {
			_ = Type7(xs, p)
		}
	}
}

func near(t *testing.T, name string, got, want float64) {
	t.Helper()
	if math.IsNaN(want) && math.IsNaN(got) {
		return
	}
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %.12g, want %.12g", name, got, want)
	}
}

func TestSummarizeType7(t *testing.T) {
	xs := []float64{10, 1, 9, 2, 8, 3, 7, 4, 6, 5}
	q := Summarize(xs)
	near(t, "mean", q.Mean, 5.5)
	near(t, "p50", q.P50, 5.5)
	near(t, "p90", q.P90, 9.1)
	near(t, "p95", q.P95, 9.55)
	near(t, "p99", q.P99, 9.91)
	near(t, "p99.9", q.P999, 9.991)
	near(t, "max", q.Max, 10)
	one := Summarize([]float64{42})
	near(t, "single p99", one.P99, 42)
	if Summarize(nil).N != 0 {
		t.Error("empty Summarize has samples")
	}
}

func TestSortFloat64s(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 100, 5000, 200000} {
		xs := make([]float64, n)
		for i := range xs {
			switch i % 4 {
			case 0:
				xs[i] = rng.NormFloat64() * 1e3
			case 1:
				xs[i] = rng.ExpFloat64()
			case 2:
				xs[i] = 0
			default:
				xs[i] = math.Copysign(0, -1) + float64(i%3)
			}
		}
		want := slices.Clone(xs)
		slices.Sort(want)
		SortFloat64s(xs)
		for i := range xs {
			if xs[i] != want[i] {
				t.Fatalf("n=%d: [%d] = %v, want %v", n, i, xs[i], want[i])
			}
		}
	}
}

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
		Summarize(xs)
	}
}
