package stats

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
)

func TestBootstrapValidate(t *testing.T) {
	for _, c := range []struct {
		b    Bootstrap
		want string
	}{
		{Bootstrap{}, ""},
		{Bootstrap{Confidence: 0.9, Resamples: 500}, ""},
		{Bootstrap{Confidence: 1}, "--confidence 1"},
		{Bootstrap{Confidence: -0.1}, "--confidence -0.1"},
		{Bootstrap{Resamples: 10}, "--resamples 10"},
	} {
		err := c.b.Validate()
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: Validate() = %v, want %q", c.b, err, c.want)
		}
	}
}

func lognormal(rng *rand.Rand, n int, scale float64) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = scale * math.Exp(0.8*rng.NormFloat64())
	}
	slices.Sort(xs)
	return xs
}

func TestBootstrapDeterministic(t *testing.T) {
	xs := lognormal(rand.New(rand.NewPCG(1, 2)), 1000, 100)
	b := Bootstrap{Seed: 42, Resamples: 500}
	a1, a2 := b.QuantileSorted(xs, 0.99, "ttft"), b.QuantileSorted(xs, 0.99, "ttft")
	if !slices.Equal(a1.Reps, a2.Reps) {
		t.Fatal("same seed and stream gave different replicates")
	}
	if other := b.QuantileSorted(xs, 0.99, "tpot"); slices.Equal(a1.Reps, other.Reps) {
		t.Error("two streams gave the same replicates")
	}
	b.Seed = 43
	if other := b.QuantileSorted(xs, 0.99, "ttft"); slices.Equal(a1.Reps, other.Reps) {
		t.Error("two seeds gave the same replicates")
	}
	if want := Type7(xs, 0.99); a1.Value != want {
		t.Errorf("Value %v, want the type-7 p99 %v", a1.Value, want)
	}
	w1 := b.Resample(100, 1, "x", func(w []int32, out []float64) { out[0] = float64(w[0]) })
	w2 := b.Resample(100, 1, "x", func(w []int32, out []float64) { out[0] = float64(w[0]) })
	if !slices.Equal(w1[0], w2[0]) {
		t.Error("Resample is not deterministic")
	}
	m1, m2 := b.BlockMean(xs, 10, "x"), b.BlockMean(xs, 10, "x")
	if !slices.Equal(m1.Reps, m2.Reps) {
		t.Error("BlockMean is not deterministic")
	}
}

// ks is the two-sample Kolmogorov–Smirnov statistic of a and b (sorted in place).
func ks(a, b []float64) float64 {
	slices.Sort(a)
	slices.Sort(b)
	var d float64
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		x := min(a[i], b[j])
		for i < len(a) && a[i] == x {
			i++
		}
		for j < len(b) && b[j] == x {
			j++
		}
		d = max(d, math.Abs(float64(i)/float64(len(a))-float64(j)/float64(len(b))))
	}
	return d
}

// TestBootstrapQuantileExact holds Quantile's order-statistic draws against the plain
// bootstrap (n indices drawn with replacement, the quantile of the resample): the two
// replicate distributions must agree (two-sample KS statistic below its 0.1% critical
// value). An off-by-one rank in the Beta parameters fails it.
func TestBootstrapQuantileExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const reps = 20000
	for _, n := range []int{5, 30, 200} {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(i) + rng.Float64() // distinct, so ranks are visible
		}
		for _, p := range []float64{0.1, 0.5, 0.9, 0.99} {
			b := Bootstrap{Seed: 9, Resamples: reps}
			fast := b.QuantileSorted(xs, p, "q").Reps
			plain := make([]float64, reps)
			rs := make([]float64, n)
			for i := range plain {
				for k := range rs {
					rs[k] = xs[rng.IntN(n)]
				}
				slices.Sort(rs)
				plain[i] = Type7(rs, p)
			}
			crit := 1.95 * math.Sqrt(2.0/reps) // alpha = 0.001
			if d := ks(fast, plain); d > crit {
				t.Errorf("n=%d p=%v: KS distance %.4f between order-statistic and plain bootstrap > %.4f", n, p, d, crit)
			}
			// m out of n: resamples of m = n/5 draws.
			m := max(n/5, 1)
			fastM := b.QuantileM(int64(n), int64(m), func(r int64) float64 { return xs[r] }, p, "qm").Reps
			rm := make([]float64, m)
			for i := range plain {
				for k := range rm {
					rm[k] = xs[rng.IntN(n)]
				}
				slices.Sort(rm)
				plain[i] = Type7(rm, p)
			}
			if d := ks(fastM, plain); d > crit {
				t.Errorf("n=%d m=%d p=%v: KS distance %.4f between order-statistic and plain m-out-of-n bootstrap > %.4f", n, m, p, d, crit)
			}
		}
	}
}

func TestBootstrapProportionAndResample(t *testing.T) {
	b := Bootstrap{Seed: 1, Resamples: 4000}
	e := b.Proportion(30, 1000, "err")
	mean, sd := meanSD(e.Reps)
	if e.Value != 0.03 || math.Abs(mean-0.03) > 0.001 || math.Abs(sd-math.Sqrt(0.03*0.97/1000)) > 0.0005 {
		t.Errorf("Proportion(30, 1000): value %v, replicates mean %v sd %v; want 0.03, 0.03, %.5f", e.Value, mean, sd, math.Sqrt(0.03*0.97/1000))
	}
	if e := b.Proportion(0, 10, "err"); e.Value != 0 || !allZero(e.Reps) {
		t.Errorf("Proportion(0, 10) = %v", e.Value)
	}
	reps := b.Resample(50, 2, "w", func(w []int32, out []float64) {
		var s, first int32
		for _, v := range w {
			s += v
		}
		first = w[0]
		out[0], out[1] = float64(s), float64(first)
	})
	for i := range reps[0] {
		if reps[0][i] != 50 {
			t.Fatalf("resample %d: multiplicities sum to %v, want 50", i, reps[0][i])
		}
	}
	if m, _ := meanSD(reps[1]); math.Abs(m-1) > 0.1 {
		t.Errorf("item 0 drawn %v times a resample on average, want 1", m)
	}
}

func meanSD(xs []float64) (float64, float64) {
	var s, ss float64
	for _, x := range xs {
		s += x
	}
	m := s / float64(len(xs))
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return m, math.Sqrt(ss / float64(len(xs)-1))
}

func TestCompare(t *testing.T) {
	a := Estimate{Value: 100, Reps: []float64{90, 100, 110}}
	b := Estimate{Value: 110, Reps: []float64{99, 110, 121}}
	c := Compare(a, b, 0.95, true)
	if math.Abs(c.Delta-10) > 1e-9 || math.Abs(c.CI.Lo-10) > 1e-9 || math.Abs(c.CI.Hi-10) > 1e-9 || !c.Significant() {
		t.Errorf("relative: %+v, want +10%% [10, 10], significant", c)
	}
	c = Compare(a, b, 0.95, false)
	if c.Delta != 10 || c.CI.Lo < 9 || c.CI.Hi > 11 {
		t.Errorf("absolute: %+v", c)
	}
	zero := Estimate{Value: 0, Reps: []float64{0, 0, 0}}
	if c := Compare(zero, zero, 0.95, true); c.Delta != 0 || c.Significant() || !c.CI.Valid() {
		t.Errorf("0 vs 0: %+v, want 0 with a zero-width interval, not significant", c)
	}
	if c := Compare(zero, b, 0.95, true); !math.IsNaN(c.Delta) || c.CI.Valid() {
		t.Errorf("0 vs 110: %+v, want undefined", c)
	}
	if c := Compare(Undefined(), b, 0.95, true); c.CI.Valid() || c.Significant() {
		t.Errorf("undefined baseline: %+v", c)
	}
}

// CombineRepeats: the value is the mean of the repeats', each replicate a mean of r of the
// repeats' replicates at that index (drawn with replacement), the same draw for every
// figure; a figure undefined in any repeat is undefined; one repeat passes through.
func TestCombineRepeats(t *testing.T) {
	b := Bootstrap{Resamples: 200, Seed: 3}
	rep := func(v, spread float64) Estimate {
		e := Estimate{Value: v, Reps: make([]float64, b.Resamples)}
		for i := range e.Reps {
			e.Reps[i] = v + spread*float64(i%5-2)
		}
		return e
	}
	one := []map[string]Estimate{{"x": rep(10, 1)}}
	if got := CombineRepeats(one, b, "s"); got["x"].Value != 10 || len(got["x"].Reps) != b.Resamples {
		t.Errorf("one repeat: %+v", got["x"].Value)
	}
	ests := []map[string]Estimate{
		{"x": rep(10, 0), "y": rep(1, 0), "u": rep(5, 0)},
		{"x": rep(20, 0), "y": rep(2, 0), "u": Undefined()},
		{"x": rep(30, 0), "y": rep(3, 0), "u": rep(5, 0)},
	}
	got := CombineRepeats(ests, b, "s")
	if math.Abs(got["x"].Value-20) > 1e-9 || math.Abs(got["y"].Value-2) > 1e-9 {
		t.Errorf("values x %v y %v, want the means 20 and 2", got["x"].Value, got["y"].Value)
	}
	if u := got["u"]; !math.IsNaN(u.Value) || u.Reps != nil {
		t.Errorf("u undefined in one repeat: %+v, want Undefined", u)
	}
	distinct := map[float64]bool{}
	for i, x := range got["x"].Reps {
		// Repeats without spread of their own: x's replicate is 10 × the mean of the drawn
		// repeat numbers, y's the same mean; the same draw makes x = 10 y exactly.
		if y := got["y"].Reps[i]; math.Abs(x-10*y) > 1e-9 || x < 10 || x > 30 {
			t.Fatalf("replicate %d: x %v y %v, want x = 10 y in [10, 30]", i, x, y)
		}
		distinct[x] = true
	}
	if len(distinct) < 5 {
		t.Errorf("%d distinct replicates of 200: the repeats are not resampled", len(distinct))
	}
	again := CombineRepeats(ests, b, "s")
	if !slices.Equal(again["x"].Reps, got["x"].Reps) {
		t.Error("the same seed and stream gave other replicates")
	}
}

// TestBootstrapCoverage checks the interval's promise by simulation: two runs' latency
// samples (lognormal, 2000 each) where run B is run A's distribution 10% slower, 200
// trials; the 95% interval of each percentile's change must hold the true +10% in 90–99%
// of them. Also for a rate (3% vs 3.3% errors: +0.3 points) and a block-bootstrapped mean
// of an autocorrelated series (AR(1), phi 0.8, shifted by 10%).
func TestBootstrapCoverage(t *testing.T) {
	const trials, n = 200, 2000
	rng := rand.New(rand.NewPCG(2026, 12))
	b := Bootstrap{Seed: 7}
	covered := map[string]int{}
	for trial := range trials {
		xa, xb := lognormal(rng, n, 100), lognormal(rng, n, 110)
		for _, p := range []float64{0.5, 0.9, 0.99} {
			name := fmt.Sprintf("p%g", p*100)
			b.Seed = uint64(trial)
			c := Compare(b.QuantileSorted(xa, p, "a"), b.QuantileSorted(xb, p, "b"), 0.95, true)
			if c.CI.Contains(10) {
				covered[name]++
			}
		}
		var ka, kb int64
		for range n {
			if rng.Float64() < 0.03 {
				ka++
			}
			if rng.Float64() < 0.033 {
				kb++
			}
		}
		c := Compare(b.Proportion(ka, n, "a").Scale(100), b.Proportion(kb, n, "b").Scale(100), 0.95, false)
		if c.CI.Contains(0.3) {
			covered["error rate"]++
		}
		sa, sb := ar1(rng, 600, 1000), ar1(rng, 600, 1100)
		c = Compare(b.BlockMean(sa, BlockLength(sa, 1), "a"), b.BlockMean(sb, BlockLength(sb, 1), "b"), 0.95, true)
		if c.CI.Contains(10) {
			covered["block mean"]++
		}
	}
	keys := make([]string, 0, len(covered))
	for k := range covered {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) != 5 {
		t.Fatalf("figures %v, want 5", keys)
	}
	for _, k := range keys {
		pct := 100 * float64(covered[k]) / trials
		t.Logf("%-10s coverage %.1f%%", k, pct)
		if pct < 90 || pct > 99 {
			t.Errorf("%s: the 95%% interval held the true change in %.1f%% of %d trials, want 90–99%%", k, pct, trials)
		}
	}
}

// ar1 is a series of n windows around mean with AR(1) noise (phi 0.8, sd 10% of mean).
func ar1(rng *rand.Rand, n int, mean float64) []float64 {
	xs := make([]float64, n)
	var e float64
	for i := range xs {
		e = 0.8*e + math.Sqrt(1-0.64)*0.1*mean*rng.NormFloat64()
		xs[i] = mean + e
	}
	return xs
}

// TestBootstrapResamplesEnough: with the default 2000 resamples, the Monte Carlo error of
// an interval's end (another seed) is small beside the interval's width.
func TestBootstrapResamplesEnough(t *testing.T) {
	xa := lognormal(rand.New(rand.NewPCG(5, 5)), 5000, 100)
	xb := lognormal(rand.New(rand.NewPCG(6, 6)), 5000, 100)
	var los, his []float64
	var width float64
	for seed := range uint64(20) {
		b := Bootstrap{Seed: seed}
		c := Compare(b.QuantileSorted(xa, 0.99, "a"), b.QuantileSorted(xb, 0.99, "b"), 0.95, true)
		los, his = append(los, c.CI.Lo), append(his, c.CI.Hi)
		width += (c.CI.Hi - c.CI.Lo) / 20
	}
	_, sdLo := meanSD(los)
	_, sdHi := meanSD(his)
	t.Logf("p99 change: interval width %.2f points; seed-to-seed sd of its ends %.3f, %.3f", width, sdLo, sdHi)
	if sdLo > 0.1*width || sdHi > 0.1*width {
		t.Errorf("ends move by sd %.3f/%.3f across seeds, over 10%% of the width %.2f", sdLo, sdHi, width)
	}
}

// BenchmarkBootstrapQuantile: a dozen percentile figures (TTFT, TPOT, ITL, E2E at p50,
// p90, p99) of 100k requests, 2000 resamples each.
func BenchmarkBootstrapQuantile(b *testing.B) {
	xs := lognormal(rand.New(rand.NewPCG(1, 1)), 100_000, 100)
	bs := Bootstrap{Seed: 1}
	b.ReportAllocs()
	for b.Loop() {
		for f := range 4 {
			for _, p := range []float64{0.5, 0.9, 0.99} {
				_ = bs.QuantileSorted(xs, p, string(rune('a'+f)))
			}
		}
	}
}

// BenchmarkBootstrapResample: one pass of 2000 resamples of 100k requests, the price of
// the figures that are sums over requests (throughputs).
func BenchmarkBootstrapResample(b *testing.B) {
	tok := make([]float64, 100_000)
	for i := range tok {
		tok[i] = float64(i % 300)
	}
	bs := Bootstrap{Seed: 1}
	b.ReportAllocs()
	for b.Loop() {
		_ = bs.Resample(len(tok), 1, "t", func(w []int32, out []float64) {
			var s float64
			for i, c := range w {
				s += float64(c) * tok[i]
			}
			out[0] = s
		})
	}
}

func TestVarianceInflation(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	iid := make([]float64, 2000)
	runs := make([]float64, 2000)
	level := 0.0
	for i := range iid {
		if rng.Float64() < 0.5 {
			iid[i] = 1
		}
		if i%20 == 0 { // runs of 20 equal values
			level = float64(rng.IntN(2))
		}
		runs[i] = level
	}
	if d := VarianceInflation(iid); d > 1.3 {
		t.Errorf("independent values: inflation %.2f, want about 1", d)
	}
	// Runs of 20: the mean's variance is about 20 times an independent sample's.
	if d := VarianceInflation(runs); d < 8 || d > 30 {
		t.Errorf("runs of 20: inflation %.2f, want about 20", d)
	}
}

// burstyLatencies are n latencies in arrival order where a queue makes neighbours slow
// together: the level moves as an AR(1) of phi 0.95 between requests, times lognormal noise.
func burstyLatencies(rng *rand.Rand, n int, scale float64) []float64 {
	xs := make([]float64, n)
	var e float64
	for i := range xs {
		e = 0.95*e + math.Sqrt(1-0.95*0.95)*0.5*rng.NormFloat64()
		xs[i] = scale * math.Exp(e+0.3*rng.NormFloat64())
	}
	return xs
}

// TestBootstrapDependentRequests: two runs from one process whose neighbouring requests
// are slow together. Resampling requests as independent calls the p90 different in far more
// than 5% of 200 pairs; m out of n with m = n / VarianceInflation comes much nearer 5%.
func TestBootstrapDependentRequests(t *testing.T) {
	const trials, n = 200, 1000
	rng := rand.New(rand.NewPCG(4, 4))
	b := Bootstrap{Seed: 3, Resamples: 1000}
	var naive, eff int
	for range trials {
		var est [2][2]Estimate
		for k := range 2 {
			arrival := burstyLatencies(rng, n, 100)
			sorted := slices.Clone(arrival)
			slices.Sort(sorted)
			v := Type7(sorted, 0.9)
			ind := make([]float64, n)
			for i, x := range arrival {
				if x <= v {
					ind[i] = 1
				}
			}
			m := int64(math.Round(n / VarianceInflation(ind)))
			at := func(r int64) float64 { return sorted[r] }
			name := string(rune('a' + k))
			est[k] = [2]Estimate{b.Quantile(n, at, 0.9, name), b.QuantileM(n, m, at, 0.9, name)}
		}
		if Compare(est[0][0], est[1][0], 0.95, true).Significant() {
			naive++
		}
		if Compare(est[0][1], est[1][1], 0.95, true).Significant() {
			eff++
		}
	}
	t.Logf("p90 called different in %.1f%% of %d same-process pairs resampled as independent, %.1f%% m out of n", 100*float64(naive)/trials, trials, 100*float64(eff)/trials)
	// Measured: 62.5% and 11.5%. The strong dependence here (a correlation length of ~40
	// requests in runs of 1000) leaves the inflation estimate short of the truth; the bound
	// says how far from 5% the method still is (docs/compare.md), not what it promises.
	if float64(eff)/trials > 0.15 || eff*3 > naive {
		t.Errorf("m out of n: false alarms in %d of %d pairs (independent resampling: %d), want at most 15%% and a third of independent resampling's", eff, trials, naive)
	}
	if float64(naive)/trials < 0.15 {
		t.Errorf("independent resampling: %d of %d false alarms; the process is not dependent enough to test anything", naive, trials)
	}
}

// BenchmarkVarianceInflation: the indicator of 100k requests whose latency level wanders
// (the worst case: the flat-top search runs to its lag bound).
func BenchmarkVarianceInflation(b *testing.B) {
	xs := burstyLatencies(rand.New(rand.NewPCG(1, 1)), 100_000, 100)
	ind := make([]float64, len(xs))
	for i, x := range xs {
		if x <= 100 {
			ind[i] = 1
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = VarianceInflation(ind)
	}
}
