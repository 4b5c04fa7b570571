package stats

import (
	"math"

	mstats "github.com/montanaflynn/stats"
)

// MSER returns the truncation d in [0, m/2] that the MSER rule (White 1997; Franklin and
// White 2008) chooses over the batch means z₁..zₘ of a series: the d that minimises
//
//	MSER(d) = Σ_{i>d} (zᵢ − mean(z_{d+1..m}))² / (m−d)²,
//
// the squared standard error of the mean of what is kept: dropping a ramp at the start
// lowers the variance faster than it shrinks the sample. Of equal values (within a relative
// 1e-12) the smallest d wins. atLimit is set when d = m/2, MSER's sign that the series never
// settled. With batches of 5 values it is MSER-5. z must not be empty.
func MSER(z []float64) (d int, atLimit bool) {
	m := len(z)
	// Suffix sums give each MSER(d) in O(1).
	var sum, sq float64
	sufSum := make([]float64, m+1)
	sufSq := make([]float64, m+1)
	for j := m - 1; j >= 0; j-- {
		sum += z[j]
		sq += z[j] * z[j]
		sufSum[j], sufSq[j] = sum, sq
	}
	best, bestD := math.Inf(1), 0
	for d := 0; d <= m/2; d++ {
		k := float64(m - d)
		mean := sufSum[d] / k
		ss := sufSq[d] - k*mean*mean
		if ss < 0 {
			ss = 0
		}
		if v := ss / (k * k); v < best*(1-1e-12) {
			best, bestD = v, d
		}
	}
	return bestD, bestD == m/2
}

// SlopeHAC fits y = a + b·x by ordinary least squares over the n pairs (x, y) and returns the
// slope b, its t statistic b / se(b), and the mean of y. se(b) is Newey and West's (1987)
// heteroscedasticity- and autocorrelation-consistent error, √S / Σ(xᵢ − x̄)², where
// S = Σ gᵢ² + 2 Σ_{l=1..L} (1 − l/(L+1)) Σ_{i>l} gᵢ gᵢ₋ₗ over the score terms
// gᵢ = (xᵢ − x̄)·(yᵢ − a − b·xᵢ), Bartlett weights, lag L = ⌊4 (n/100)^(2/9)⌋: the series
// of a run (queue lengths, latencies) are autocorrelated, and a plain OLS t-test would find
// trends in noise. A zero error gives t = ±Inf by the slope's sign (0 for a flat fit).
// ok is false, and slope and t 0, when every x is the same (no line to fit).
//
// The means come from montanaflynn/stats; the slope and its error are computed here: the
// library's LinearRegression returns fitted points, not the slope, and it has no
// autocorrelation-robust variance.
func SlopeHAC(x, y []float64) (slope, t, meanY float64, ok bool) {
	n := len(x)
	mx, _ := mstats.Mean(x)
	my, _ := mstats.Mean(y)
	var sxx, sxy float64
	for i := range x {
		sxx += (x[i] - mx) * (x[i] - mx)
		sxy += (x[i] - mx) * (y[i] - my)
	}
	if sxx == 0 {
		return 0, 0, my, false
	}
	b := sxy / sxx
	a := my - b*mx
	g := make([]float64, n) // score terms (x - mean) * residual
	for i := range x {
		g[i] = (x[i] - mx) * (y[i] - a - b*x[i])
	}
	L := int(math.Floor(4 * math.Pow(float64(n)/100, 2.0/9)))
	var s float64
	for i := range g {
		s += g[i] * g[i]
	}
	for l := 1; l <= L && l < n; l++ {
		w := 1 - float64(l)/float64(L+1)
		var c float64
		for i := l; i < n; i++ {
			c += g[i] * g[i-l]
		}
		s += 2 * w * c
	}
	switch se := math.Sqrt(math.Max(s, 0)) / sxx; {
	case se > 0:
		t = b / se
	case b > 0:
		t = math.Inf(1)
	case b < 0:
		t = math.Inf(-1)
	}
	return b, t, my, true
}
