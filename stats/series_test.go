package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestMSER(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	// A ramp over the first 8 batches, then a level with noise: the cut is at the ramp's end.
	z := make([]float64, 60)
	for i := range z {
		z[i] = 100 + rng.NormFloat64()
		if i < 8 {
			z[i] = 100 * float64(i) / 8
		}
	}
	if d, atLimit := MSER(z); d < 6 || d > 10 || atLimit {
		t.Errorf("ramp of 8: d = %d (at limit %v), want about 8", d, atLimit)
	}
	flat := make([]float64, 40)
	for i := range flat {
		flat[i] = 7
	}
	if d, atLimit := MSER(flat); d != 0 || atLimit {
		t.Errorf("constant: d = %d (at limit %v), want 0", d, atLimit)
	}
	// A series that keeps rising never settles: the variance of what is kept falls as fast
	// as its length, so the cut is at the limit, m/2.
	rising := make([]float64, 40)
	for i := range rising {
		rising[i] = float64(i)
	}
	if d, atLimit := MSER(rising); d != 20 || !atLimit {
		t.Errorf("rising: d = %d (at limit %v), want 20 at the limit", d, atLimit)
	}
}

func TestSlopeHAC(t *testing.T) {
	x := make([]float64, 200)
	line := make([]float64, len(x))
	for i := range x {
		x[i] = float64(i)
		line[i] = 1 + 2*x[i]
	}
	if b, tt, my, ok := SlopeHAC(x, line); !ok || math.Abs(b-2) > 1e-12 || !math.IsInf(tt, 1) || math.Abs(my-200) > 1e-9 {
		t.Errorf("exact line: slope %v t %v mean %v ok %v, want 2, +Inf, 200, true", b, tt, my, ok)
	}
	same := []float64{3, 3, 3, 3}
	if b, tt, my, ok := SlopeHAC(same, []float64{1, 2, 3, 4}); ok || b != 0 || tt != 0 || my != 2.5 {
		t.Errorf("constant x: %v %v %v %v, want no fit with the mean 2.5", b, tt, my, ok)
	}
	// Autocorrelated noise without a trend (AR(1), phi 0.9): the HAC t must stay small in
	// most series where the plain OLS t, which assumes independent errors, often does not.
	rng := rand.New(rand.NewPCG(1, 1))
	hacBig, olsBig := 0, 0
	const trials = 200
	for range trials {
		y := make([]float64, len(x))
		e := 0.0
		for i := range y {
			e = 0.9*e + rng.NormFloat64()
			y[i] = 10 + e
		}
		b, tt, _, _ := SlopeHAC(x, y)
		if math.Abs(tt) > 3 {
			hacBig++
		}
		if math.Abs(b/olsSE(x, y, b)) > 3 {
			olsBig++
		}
	}
	if hacBig >= olsBig/2 || hacBig > trials/4 {
		t.Errorf("|t| > 3 on trendless AR(1) noise: HAC %d, OLS %d of %d", hacBig, olsBig, trials)
	}
}

// olsSE is the slope's standard error under independent errors, for comparison.
func olsSE(x, y []float64, b float64) float64 {
	n := float64(len(x))
	var mx, my float64
	for i := range x {
		mx += x[i] / n
		my += y[i] / n
	}
	a := my - b*mx
	var sxx, rss float64
	for i := range x {
		sxx += (x[i] - mx) * (x[i] - mx)
		r := y[i] - a - b*x[i]
		rss += r * r
	}
	return math.Sqrt(rss / (n - 2) / sxx)
}
