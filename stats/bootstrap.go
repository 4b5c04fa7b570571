package stats

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"

	mstats "github.com/montanaflynn/stats"
	"gonum.org/v1/gonum/stat/distuv"
)

// The bootstrap defaults: a 95% interval from 2000 resamples. 2000 resamples put the 2.5%
// and 97.5% points of the bootstrap distribution on 50 replicates each side: across seeds
// the ends of a p99 change's interval move by a standard deviation of 1–2% of its width
// (TestBootstrapResamplesEnough -v), and 12 percentile figures of 100k requests take
// milliseconds (BenchmarkBootstrapQuantile).
const (
	DefaultConfidence = 0.95
	DefaultResamples  = 2000
)

// BootstrapIntervalMethod names how an interval is read off the bootstrap distribution.
const BootstrapIntervalMethod = "percentile bootstrap interval (" + Type7Name + ")"

// Bootstrap says how confidence intervals are computed: the level, the number of
// resamples, and the seed. The same inputs, options and stream name give the same
// interval: every figure draws from its own PCG stream, (Seed, FNV-1a of its name), so
// adding a figure changes no other figure's interval.
//
// The resampling is ours, not montanaflynn/stats' Sample's: v0.14 draws from
// math/rand's global, unseeded source, so its intervals could not be reproduced.
type Bootstrap struct {
	Confidence float64 // in (0, 1); 0 means DefaultConfidence
	Resamples  int     // >= 100; 0 means DefaultResamples
	Seed       uint64
}

// Validate checks the options (zero fields are defaults).
func (b Bootstrap) Validate() error {
	var errs []error
	if b.Confidence != 0 && !(b.Confidence > 0 && b.Confidence < 1) {
		errs = append(errs, fmt.Errorf("--confidence %v: want a level between 0 and 1, e.g. 0.95", b.Confidence))
	}
	if b.Resamples != 0 && b.Resamples < 100 {
		errs = append(errs, fmt.Errorf("--resamples %d: want at least 100 (default %d)", b.Resamples, DefaultResamples))
	}
	return errors.Join(errs...)
}

// WithDefaults returns b with zero fields set to the defaults.
func (b Bootstrap) WithDefaults() Bootstrap {
	if b.Confidence == 0 {
		b.Confidence = DefaultConfidence
	}
	if b.Resamples == 0 {
		b.Resamples = DefaultResamples
	}
	return b
}

// rng is the figure's own random stream.
func (b Bootstrap) rng(stream string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(stream))
	return rand.New(rand.NewPCG(b.Seed, h.Sum64()))
}

// Estimate is a figure and its bootstrap replicates: Reps[i] is the figure computed on the
// i-th resample. Reps is nil when the figure is undefined (no samples) and Value is NaN.
type Estimate struct {
	Value float64
	Reps  []float64
}

// Scale returns e with the value and every replicate multiplied by f (units, percent).
func (e Estimate) Scale(f float64) Estimate {
	out := Estimate{Value: e.Value * f, Reps: make([]float64, len(e.Reps))}
	for i, v := range e.Reps {
		out.Reps[i] = v * f
	}
	return out
}

// CI is a confidence interval [Lo, Hi]; both NaN when there is none.
type CI struct{ Lo, Hi float64 }

// Valid reports whether c is an interval.
func (c CI) Valid() bool { return !math.IsNaN(c.Lo) && !math.IsNaN(c.Hi) }

// Contains reports whether x lies in c (false when c is not Valid).
func (c CI) Contains(x float64) bool { return c.Valid() && c.Lo <= x && x <= c.Hi }

// NoCI returns the interval of an undefined figure: both ends NaN.
func NoCI() CI { return CI{math.NaN(), math.NaN()} }

// percentileCI returns the central conf interval of reps: their (1−conf)/2 and (1+conf)/2
// quantiles by montanaflynn/stats' Percentile, which is Type7 (held by
// TestType7MatchesLibrary). Replicates that are NaN (a resample where the figure is
// undefined) make the interval undefined: it would otherwise describe another population.
func percentileCI(reps []float64, conf float64) CI {
	if len(reps) == 0 {
		return NoCI()
	}
	for _, v := range reps {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return NoCI()
		}
	}
	lo, err1 := mstats.Percentile(reps, 100*(1-conf)/2)
	hi, err2 := mstats.Percentile(reps, 100*(1+conf)/2)
	if err1 != nil || err2 != nil {
		return NoCI()
	}
	return CI{lo, hi}
}

// CI returns the percentile interval of e at level conf.
func (e Estimate) CI(conf float64) CI { return percentileCI(e.Reps, conf) }

// Change is how a figure moved from a baseline run A to a run B, with the interval of
// that move. Relative changes are percent, 100·(B/A − 1); absolute ones (figures that are
// already percentages, such as error rates, where a baseline of 0 is common) are B − A in
// the figure's own unit, percentage points.
type Change struct {
	Delta    float64
	CI       CI
	Relative bool
}

// Significant reports whether the interval excludes zero: benchstat's "~" is its negation.
func (c Change) Significant() bool { return c.CI.Valid() && !c.CI.Contains(0) }

// Compare returns the change from a to b at level conf. The replicates of a and b come
// from independent resamples of the two runs, so pairing them by index draws from the
// bootstrap distribution of the change. A relative change whose baseline is zero is
// undefined (Delta NaN), unless both runs are zero in every resample (no change).
func Compare(a, b Estimate, conf float64, relative bool) Change {
	c := Change{Delta: math.NaN(), CI: NoCI(), Relative: relative}
	if math.IsNaN(a.Value) || math.IsNaN(b.Value) {
		return c
	}
	n := min(len(a.Reps), len(b.Reps))
	d := make([]float64, n)
	if !relative {
		c.Delta = b.Value - a.Value
		for i := range d {
			d[i] = b.Reps[i] - a.Reps[i]
		}
		c.CI = percentileCI(d, conf)
		return c
	}
	if a.Value == 0 {
		if b.Value == 0 && allZero(a.Reps[:n]) && allZero(b.Reps[:n]) {
			c.Delta, c.CI = 0, CI{0, 0}
		}
		return c
	}
	c.Delta = 100 * (b.Value/a.Value - 1)
	for i := range d {
		if a.Reps[i] == 0 {
			return Change{Delta: c.Delta, CI: NoCI(), Relative: true}
		}
		d[i] = 100 * (b.Reps[i]/a.Reps[i] - 1)
	}
	c.CI = percentileCI(d, conf)
	return c
}

func allZero(xs []float64) bool {
	for _, x := range xs {
		if x != 0 {
			return false
		}
	}
	return true
}

// Undefined returns the estimate of a figure with no samples: Value NaN, no replicates.
func Undefined() Estimate { return Estimate{Value: math.NaN()} }

// QuantileSorted bootstraps the p-quantile (type 7, the reports' method) of the sorted
// samples xs, which it does not modify. See Quantile.
func (b Bootstrap) QuantileSorted(sorted []float64, p float64, stream string) Estimate {
	return b.Quantile(int64(len(sorted)), func(r int64) float64 { return sorted[r] }, p, stream)
}

// Quantile bootstraps the p-quantile (type 7) of n samples whose rank-r order statistic
// (0-based) is at(r): a sorted slice or a histogram's cumulative counts.
//
// It draws each resample's two order statistics directly instead of n indices: a resample
// is n indices ⌊n·Uᵢ⌋ of iid uniforms Uᵢ, and since ⌊n·u⌋ is monotone its rank-k index is
// ⌊n·U₍ₖ₊₁₎⌋, where the (k+1)-th smallest of n uniforms U₍ₖ₊₁₎ ~ Beta(k+1, n−k); the next
// one is U₍ₖ₊₂₎ = U₍ₖ₊₁₎ + (1 − U₍ₖ₊₁₎)·(1 − V^(1/(n−k−1))), V uniform (the smallest of the
// n−k−1 uniforms above it). This is exactly the ordinary bootstrap of the quantile, at
// O(1) per resample instead of O(n): 2000 resamples of a p99 take microseconds whatever n
// (BenchmarkBootstrapQuantile; TestBootstrapQuantileExact holds it against index resampling).
func (b Bootstrap) Quantile(n int64, at func(rank int64) float64, p float64, stream string) Estimate {
	return b.QuantileM(n, n, at, p, stream)
}

// QuantileM is Quantile's m-out-of-n bootstrap: each resample draws m of the n samples
// (with replacement), so the replicates spread as the quantile of m independent samples
// would. For samples that come in m correlated groups (the chunk gaps of m requests), the
// spread of m independent samples is the honest one where no per-group data is kept: the
// n gaps treated as independent would give far too narrow an interval. m = n is Quantile.
func (b Bootstrap) QuantileM(n, m int64, at func(rank int64) float64, p float64, stream string) Estimate {
	if n == 0 || m <= 0 {
		return Undefined()
	}
	b = b.WithDefaults()
	lo, frac := Rank7(n, p)
	val := at(lo)
	if frac > 0 {
		val += frac * (at(lo+1) - val)
	}
	e := Estimate{Value: val, Reps: make([]float64, b.Resamples)}
	rng := b.rng(stream)
	// The resample's ranks among its own m draws.
	mlo, mfrac := Rank7(m, p)
	beta := distuv.Beta{Alpha: float64(mlo + 1), Beta: float64(m - mlo), Src: rng}
	index := func(u float64) int64 { return min(int64(math.Floor(float64(n)*u)), n-1) }
	for i := range e.Reps {
		u := beta.Rand()
		x := at(index(u))
		if mfrac > 0 && mlo+1 < m {
			u2 := u + (1-u)*(1-math.Pow(rng.Float64(), 1/float64(m-mlo-1)))
			x += mfrac * (at(index(u2)) - x)
		}
		e.Reps[i] = x
	}
	return e
}

// Proportion bootstraps the share k/n: a resample's count is Binomial(n, k/n), drawn
// directly (the same distribution as counting n indices drawn with replacement).
func (b Bootstrap) Proportion(k, n int64, stream string) Estimate {
	return b.ProportionM(k, n, n, stream)
}

// ProportionM is Proportion's m-out-of-n bootstrap: a resample's share is
// Binomial(m, k/n)/m, the spread of m independent items (m = n / VarianceInflation of the
// items' indicator when neighbours are not independent: errors come in bursts).
func (b Bootstrap) ProportionM(k, n, m int64, stream string) Estimate {
	if n == 0 || m <= 0 {
		return Undefined()
	}
	b = b.WithDefaults()
	p := float64(k) / float64(n)
	e := Estimate{Value: p, Reps: make([]float64, b.Resamples)}
	if k == 0 || k == n {
		for i := range e.Reps {
			e.Reps[i] = p
		}
		return e
	}
	bin := distuv.Binomial{N: float64(m), P: p, Src: b.rng(stream)}
	for i := range e.Reps {
		e.Reps[i] = bin.Rand() / float64(m)
	}
	return e
}

// Resample draws Resamples resamples of n items with replacement and calls stat on each
// with w, the multiplicity of every item (len n, summing to n), to fill out (len k): k
// figures computed on the same resample. It returns the k figures' replicates,
// reps[j][i] = figure j on resample i. O(n) per resample: for figures that are sums over
// requests (token counts, a duration's ends), which no shortcut serves.
func (b Bootstrap) Resample(n, k int, stream string, stat func(w []int32, out []float64)) [][]float64 {
	b = b.WithDefaults()
	reps := make([][]float64, k)
	for j := range reps {
		reps[j] = make([]float64, b.Resamples)
	}
	if n == 0 {
		for j := range reps {
			for i := range reps[j] {
				reps[j][i] = math.NaN()
			}
		}
		return reps
	}
	rng := b.rng(stream)
	w := make([]int32, n)
	out := make([]float64, k)
	for i := 0; i < b.Resamples; i++ {
		clear(w)
		for range n {
			w[rng.IntN(n)]++
		}
		stat(w, out)
		for j := range out {
			reps[j][i] = out[j]
		}
	}
	return reps
}

// CombineRepeats returns one estimate per figure (the maps' keys) for a run of r repeats:
// the value is the mean of the repeats' values, and replicate i the mean of replicate i of
// r repeats drawn with replacement (the same draw for every figure), so that the spread
// between repeats (drift from run to run) widens the interval as well as the spread within
// each. A figure missing or undefined in any repeat is Undefined. One repeat is returned as is.
func CombineRepeats(ests []map[string]Estimate, b Bootstrap, stream string) map[string]Estimate {
	if len(ests) == 1 {
		return ests[0]
	}
	out := map[string]Estimate{}
	keys := make([]string, 0, len(ests[0]))
	for k := range ests[0] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	rng := b.rng(stream)
	r := len(ests)
	pick := make([]int, b.Resamples*r)
	for i := range pick {
		pick[i] = rng.IntN(r)
	}
	for _, k := range keys {
		e := Estimate{Reps: make([]float64, b.Resamples)}
		ok := true
		for _, m := range ests {
			x, has := m[k]
			if !has || x.Reps == nil {
				ok = false
				break
			}
			e.Value += x.Value / float64(r)
		}
		if !ok {
			out[k] = Undefined()
			continue
		}
		for i := range e.Reps {
			var s float64
			for j := range r {
				s += ests[pick[i*r+j]][k].Reps[i]
			}
			e.Reps[i] = s / float64(r)
		}
		out[k] = e
	}
	return out
}

// BlockLength is the block length for BlockMean over the series xs: Politis and White's
// (2004) automatic choice for the circular block bootstrap, with Patton, Politis and
// White's (2009) correction, b = (2G²/D)^(1/3)·n^(1/3), from the flat-top-weighted sample
// autocorrelations (see flatTop). The longer the series' memory, the longer the blocks.
// The result is at least minBlock (windows a sample's own dependence is known to span)
// and at most n/2 (so a resample holds at least two blocks).
func BlockLength(xs []float64, minBlock int) int {
	n := len(xs)
	if n < 4 {
		return max(1, min(minBlock, n))
	}
	g, s := flatTop(xs, int(math.Ceil(math.Sqrt(float64(n)))))
	d := 4.0 / 3 * s * s
	l := 1
	if d > 0 {
		l = int(math.Ceil(math.Cbrt(2*g*g/d) * math.Cbrt(float64(n))))
	}
	return min(max(l, minBlock, 1), max(n/2, 1))
}

// maxInflationLag bounds the lags VarianceInflation's flat-top sum looks at (its cost is n
// per lag); dependence longer than that is the batch-means estimate's.
const maxInflationLag = 1000

// VarianceInflation is how many times the variance of the mean of the series xs exceeds
// what n independent values would give: the sum of its autocorrelations over all lags,
// 1 + 2·Σρ(k), estimated with Politis and White's flat-top weights (see flatTop); at
// least 1. For the indicator 1{xᵢ ≤ q̂ₚ} of requests in arrival order it is the factor by
// which dependence between neighbouring requests (a queue that builds up makes them slow
// together) widens the p-quantile's variance (Bahadur: q̂ₚ − qₚ ≈ (p − F̂(qₚ))/f(qₚ)), so
// n / VarianceInflation is the number of independent requests the sample is worth.
func VarianceInflation(xs []float64) float64 {
	if len(xs) < 4 {
		return 1
	}
	_, s := flatTop(xs, min(len(xs)/4, maxInflationLag))
	return max(1, s, batchInflation(xs, 20))
}

// batchInflation estimates the same factor from k batch means: b·Var(batch means)/Var(x)
// for batches of b = n/k values. The flat-top sum stops at the first lags whose
// autocorrelations look like noise, and misses a long tail of small ones; batches longer
// than the dependence do not.
func batchInflation(xs []float64, k int) float64 {
	b := len(xs) / k
	if b < 2 {
		return 1
	}
	v, err := mstats.Variance(xs[:b*k])
	if err != nil || v == 0 {
		return 1
	}
	means := make([]float64, k)
	for i := range k {
		means[i], _ = mstats.Mean(xs[i*b : (i+1)*b])
	}
	vm, err := mstats.SampleVariance(means)
	if err != nil {
		return 1
	}
	return float64(b) * vm / v
}

// flatTop returns G = Σ λ(k/M)·|k|·ρ(k) and S = Σ λ(k/M)·ρ(k) over lags |k| <= M, for the
// sample autocorrelations ρ of xs (montanaflynn/stats' AutoCorrelation) and the flat-top
// window λ (1 up to 1/2, then linear to 0 at 1). M = 2m̂, m̂ the first lag after which K_n
// autocorrelations in a row are insignificant, |ρ| < 2·√(log₁₀ n / n) (Politis and White
// 2004), searched up to lag maxLag + K_n (Politis and White: √n; VarianceInflation looks
// further, n/4, since requests can stay dependent over more than √n neighbours).
func flatTop(xs []float64, maxLag int) (g, s float64) {
	n := len(xs)
	acf := func(k int) float64 {
		r, err := mstats.AutoCorrelation(xs, k)
		if err != nil { // a constant series: no dependence
			return 0
		}
		return r
	}
	kn := max(5, int(math.Ceil(math.Sqrt(math.Log10(float64(n))))))
	mMax := min(maxLag+kn, n-1)
	c := 2 * math.Sqrt(math.Log10(float64(n))/float64(n))
	rho := make([]float64, mMax+1)
	mHat, run := mMax, 0
	for k := 0; k <= mMax; k++ {
		rho[k] = acf(k)
		if k == 0 {
			continue
		}
		if math.Abs(rho[k]) < c {
			run++
			if run == kn {
				mHat = k - kn
				break
			}
		} else {
			run = 0
		}
	}
	m := min(2*max(mHat, 1), mMax)
	lambda := func(t float64) float64 {
		t = math.Abs(t)
		switch {
		case t <= 0.5:
			return 1
		case t <= 1:
			return 2 * (1 - t)
		}
		return 0
	}
	s = 1 // rho[0]
	for k := 1; k <= m; k++ {
		if k > mHat+kn { // past the lags the search for m̂ computed
			rho[k] = acf(k)
		}
		w := lambda(float64(k) / float64(m))
		g += 2 * w * float64(k) * rho[k]
		s += 2 * w * rho[k]
	}
	return g, s
}

// BlockMean bootstraps the mean of the series xs (consecutive time windows, whose values
// depend on their neighbours) by the circular block bootstrap (Politis and Romano 1992):
// each resample is ⌈n/block⌉ blocks of block consecutive windows, starting anywhere and
// wrapping around the end, cut to n windows; block comes from BlockLength. Blocks keep the dependence inside them that
// resampling single windows would destroy, which would make the interval too narrow.
func (b Bootstrap) BlockMean(xs []float64, block int, stream string) Estimate {
	n := len(xs)
	if n == 0 {
		return Undefined()
	}
	b = b.WithDefaults()
	block = min(max(block, 1), n)
	// pre[i] = sum of xs over the first i windows of xs repeated twice (the wrap).
	pre := make([]float64, 2*n+1)
	for i := range 2 * n {
		pre[i+1] = pre[i] + xs[i%n]
	}
	mean, _ := mstats.Mean(xs) // n > 0: no error
	e := Estimate{Value: mean, Reps: make([]float64, b.Resamples)}
	rng := b.rng(stream)
	for i := range e.Reps {
		var sum float64
		for left := n; left > 0; left -= block {
			s, l := rng.IntN(n), min(block, left)
			sum += pre[s+l] - pre[s]
		}
		e.Reps[i] = sum / float64(n)
	}
	// Few blocks: the replicates' spread is itself estimated from n/block blocks, so the
	// interval is widened as a t interval is over a z one, by t(k−1)/z at the level
	// (k = n/block). Without it, the coverage of short, strongly dependent series falls
	// well under the level (TestBootstrapCoverage's block mean: docs/compare.md).
	if k := float64(n) / float64(block); k >= 2 {
		q := (1 + b.Confidence) / 2
		f := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: k - 1}.Quantile(q) / distuv.UnitNormal.Quantile(q)
		for i, v := range e.Reps {
			e.Reps[i] = mean + f*(v-mean)
		}
	}
	return e
}
