// Package quantile holds the project's quantile functions, one per named method, so that
// every figure printed under a method's name is computed by the one function of that
// name. It imports the standard library only.
package quantile

import "math"

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
