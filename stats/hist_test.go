package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The µs histogram must give exactly the type-7 percentiles of the samples rounded to the
// microsecond (so within 0.5 µs of the unrounded ones), weights meaning repetition, and the
// exact mean and max.
func TestHistMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 10, 1000, 100000} {
		for _, weighted := range []bool{false, true} {
			var h, h2 Hist
			var rounded, exact []float64
			for i := 0; i < n; i++ {
				ns := rng.ExpFloat64() * 30e6
				switch i % 7 {
				case 3:
					ns = 2e9 + rng.Float64()*1e9 // past the dense range
				case 5:
					ns = 20e6 // ties
				}
				w := int64(1)
				if weighted {
					w = int64(rng.IntN(4))
				}
				if i%2 == 0 {
					h.Add(ns, w)
				} else {
					h2.Add(ns, w)
				}
				for k := int64(0); k < w; k++ {
					rounded = append(rounded, math.Round(ns/1e3)/1e3)
					exact = append(exact, ns/1e6)
				}
			}
			h.Merge(&h2)
			got, want, ex := h.Summary(), Summarize(rounded), Summarize(exact)
			if got.N != want.N {
				t.Fatalf("n=%d: N %d, want %d", n, got.N, want.N)
			}
			if want.N == 0 {
				continue
			}
			for _, f := range []struct {
				name string
				g, w float64
			}{{"p50", got.P50, want.P50}, {"p90", got.P90, want.P90}, {"p95", got.P95, want.P95}, {"p99", got.P99, want.P99}, {"p999", got.P999, want.P999}, {"max", got.Max, ex.Max}, {"mean", got.Mean, ex.Mean}} {
				if math.Abs(f.g-f.w) > 1e-9*math.Max(1, math.Abs(f.w)) {
					t.Errorf("n=%d weighted=%v %s = %v, want %v", n, weighted, f.name, f.g, f.w)
				}
			}
			// Held against Type7 directly too (Summarize sorted rounded in place).
			gotPs := [...]float64{got.P50, got.P90, got.P95, got.P99, got.P999}
			for i, p := range reportedPs {
				if w := Type7(rounded, p); math.Abs(gotPs[i]-w) > 1e-9*math.Max(1, math.Abs(w)) {
					t.Errorf("n=%d weighted=%v p%v = %v, Type7 of the µs-rounded samples %v", n, weighted, 100*p, gotPs[i], w)
				}
			}
			if math.Abs(got.P99-ex.P99) > 0.0005 {
				t.Errorf("n=%d: p99 %v is more than 0.5 µs from the unrounded %v", n, got.P99, ex.P99)
			}
		}
	}
}

// BenchmarkHist: counting 10^7 chunk gaps.
func BenchmarkHist(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	xs := make([]float64, 10_000_000)
	for i := range xs {
		xs[i] = 20e6 + rng.ExpFloat64()*5e6
	}
	b.ReportAllocs()
	for b.Loop() {
		var h Hist
		for _, x := range xs {
			h.Add(x, 1)
		}
		h.Summary()
	}
}

// CountUS per sample plus AddTotals once must hold what Add does sample by sample, and
// Ranks must walk the same order statistics Summary interpolates between.
func TestHistCountUSAndRanks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var byAdd, byCount Hist
	var sum, mx float64
	var rounded []float64
	const n = 5000
	for i := range n {
		ns := math.Round(rng.ExpFloat64() * 20e6)
		if i%50 == 7 {
			ns = 1.5e9 + math.Round(rng.Float64()*1e9) // past the dense range
		}
		byAdd.Add(ns, 1)
		us := (int64(ns) + 500) / 1000
		byCount.CountUS(us)
		sum += ns
		mx = max(mx, ns)
		rounded = append(rounded, float64(us)/1e3)
	}
	byCount.AddTotals(n, sum, mx)
	if a, c := byAdd.Summary(), byCount.Summary(); a != c {
		t.Fatalf("CountUS+AddTotals summary %+v, Add %+v", c, a)
	}
	Summarize(rounded) // sorts
	gotN, at := byCount.Ranks()
	if gotN != n {
		t.Fatalf("Ranks n = %d, want %d", gotN, n)
	}
	for _, r := range []int64{0, 1, n / 2, n - 101, n - 2, n - 1} {
		if got := at(r); math.Abs(got-rounded[r]) > 1e-9 {
			t.Errorf("rank %d = %v ms, want %v", r, got, rounded[r])
		}
	}
	var empty Hist
	if n, at := empty.Ranks(); n != 0 || at != nil {
		t.Errorf("empty Ranks = %d, %v", n, at != nil)
	}
}
