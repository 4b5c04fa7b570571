package twin

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/montanaflynn/stats"
)

// TestOLSRecovers: a known line with noise is recovered within 3 standard errors, and
// the standard error matches its textbook value for a single slope.
func TestOLSRecovers(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var x [][]float64
	var y []float64
	for i := range 400 {
		a, b := float64(i%17), float64(1000+rng.IntN(5000))
		x = append(x, []float64{1, a, b})
		y = append(y, 1e6+5e4*a+200*b+rng.NormFloat64()*1e3)
	}
	f, err := ols(x, y)
	if err != nil {
		t.Fatal(err)
	}
	for j, want := range []float64{1e6, 5e4, 200} {
		if math.Abs(f.Coef[j]-want) > 3*f.StdErr[j] || f.StdErr[j] <= 0 {
			t.Errorf("coef %d = %v ± %v, want %v", j, f.Coef[j], f.StdErr[j], want)
		}
	}
	if math.Abs(f.RMS-1e3) > 100 {
		t.Errorf("rms %v, want ~1000", f.RMS)
	}
	if _, err := ols([][]float64{{1, 2}, {1, 2}, {1, 2}}, []float64{1, 2, 3}); err == nil {
		t.Error("collinear: no error")
	}
}

// movingTogether is 300 observations of y = 2a + 3b + 50 with noise, where b is 10a give
// or take 0.5: the two terms cannot be told apart, and a constant is fitted beside them.
func movingTogether(rng *rand.Rand) (x [][]float64, y []float64) {
	for range 300 {
		a := float64(rng.IntN(100))
		b := 10*a + rng.Float64()*0.5
		x = append(x, []float64{a, b, 1})
		y = append(y, 2*a+3*b+50+5*rng.NormFloat64())
	}
	return x, y
}

// TestFitTermsFixesTheUndetermined: two regressors that move together cannot be told
// apart: the less determined is fixed at its base value and the other fitted given it,
// not left as uncertain as both are together.
func TestFitTermsFixesTheUndetermined(t *testing.T) {
	x, y := movingTogether(rand.New(rand.NewPCG(3, 4)))
	terms := []term{{base: 2, spread: 99}, {base: 3, spread: 990}, {always: true}}
	f, ok, err := fitTerms(x, y, terms, 1600)
	if err != nil {
		t.Fatal(err)
	}
	if ok[0] == ok[1] || !ok[2] {
		t.Fatalf("fitted %v: want exactly one of the two moving together fixed", ok)
	}
	for j := range 2 {
		if !ok[j] && (f.Coef[j] != terms[j].base || f.StdErr[j] != 0) || ok[j] && math.Abs(f.Coef[j]-terms[j].base) > 3*f.StdErr[j] {
			t.Errorf("term %d: fitted %v, %v ± %v", j, ok[j], f.Coef[j], f.StdErr[j])
		}
	}
	if _, ok, _ := fitTerms(x, y, []term{{base: 2, spread: 99, always: true}, {base: 3, spread: 990, always: true}, {always: true}}, 1600); !ok[0] || !ok[1] {
		t.Fatal("a term marked always was fixed")
	}
}

func TestFitTermsAllFixed(t *testing.T) {
	x := [][]float64{{1}, {2}, {3}, {4}}
	y := []float64{1e6, -1e6, 1e6, -1e6} // nothing explains it
	f, ok, err := fitTerms(x, y, []term{{base: 7, spread: 3}}, 1)
	if err != nil || ok[0] || f.Coef[0] != 7 {
		t.Fatalf("ok %v coef %v err %v", ok, f.Coef, err)
	}
}

// TestFitTermsKeepsARejectedBase: a term too uncertain for determined, whose base value
// the runs reject (many standard errors off), keeps its estimate: fixing it at the base
// would put the fit further from the truth than its imprecision does. Prefill against
// attention over short prompts, with a base attention 700 times too small, as tiny's is
// for Ollama on a CPU.
func TestFitTermsKeepsARejectedBase(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var x [][]float64
	var y []float64
	for range 66 {
		n := float64(16 + rng.IntN(585))
		pairs := n * (n + 1) / 2
		x = append(x, []float64{n, pairs, 1})
		y = append(y, 4000*n+700*pairs+12e6+8e6*rng.NormFloat64())
	}
	terms := []term{{base: 10000, spread: 585}, {base: 1, spread: 601 * 602 / 2}, {always: true}}
	f, ok, err := fitTerms(x, y, terms, 58e6)
	if err != nil {
		t.Fatal(err)
	}
	if ok[1] && determined(f.StdErr[1], terms[1].spread, 58e6) {
		t.Fatalf("attention %v ± %v is determined: the case is not the one under test", f.Coef[1], f.StdErr[1])
	}
	if !ok[1] || math.Abs(f.Coef[1]-700) > 3*f.StdErr[1] {
		t.Errorf("attention: fitted %v, %v ± %v; want the estimate near 700 kept, not the rejected base 1", ok[1], f.Coef[1], f.StdErr[1])
	}
	if ok[0] {
		t.Errorf("prefill: fitted %v ± %v; want it fixed at its base, which the runs allow", f.Coef[0], f.StdErr[0])
	}
}

// TestFitTermsFixesTheLikeliestBase: of two terms that move together, both undetermined
// and both allowed at their base values, the one whose base the runs find likeliest
// (its estimate exactly, 0 standard errors off) is fixed, and not the one with the larger
// spread whose base is 2.5 standard errors off: fixing that one would fit the other given
// a value the runs lean against, with an error that does not show it.
func TestFitTermsFixesTheLikeliestBase(t *testing.T) {
	x, y := movingTogether(rand.New(rand.NewPCG(7, 8)))
	g, err := ols(x, y)
	if err != nil {
		t.Fatal(err)
	}
	terms := []term{{base: g.Coef[0], spread: 99}, {base: g.Coef[1] + 2.5*g.StdErr[1], spread: 2000}, {always: true}}
	for j := range 2 {
		if determined(g.StdErr[j], terms[j].spread, 1600) {
			t.Fatalf("term %d is determined (%v ± %v): the case is not the one under test", j, g.Coef[j], g.StdErr[j])
		}
	}
	if !(g.StdErr[1]*2000 > g.StdErr[0]*99) {
		t.Fatal("the second term must be the less determined one, for the test to tell the rules apart")
	}
	_, ok, err := fitTerms(x, y, terms, 1600)
	if err != nil {
		t.Fatal(err)
	}
	if ok[0] || !ok[1] {
		t.Errorf("fitted %v: want the first term (its base the estimate) fixed and the second fitted", ok)
	}
}

// TestFitTermsHoldsANegativeAtZero: a decode step superlinear in the batch (one sequence
// 570 µs, two 1,270 µs, near Ollama's TPOT p50 at concurrency 1 and 2 on a CPU) makes
// the least-squares step_base negative.
// It is held at zero and the decode term fitted again: the fit under the bound, whose
// steps are as short as a non-negative step_base allows, not the unconstrained slope
// with a zero step_base added to it.
func TestFitTermsHoldsANegativeAtZero(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var x [][]float64
	var y []float64
	for i := range 400 {
		d := float64(1 + i%2)
		x = append(x, []float64{1, d})
		y = append(y, map[float64]float64{1: 570e3, 2: 1270e3}[d]+5e3*rng.NormFloat64())
	}
	terms := []term{{base: 5e6, spread: 1}, {base: 1e6, spread: 1}}
	g, err := ols(x, y)
	if err != nil {
		t.Fatal(err)
	}
	if !(g.Coef[0] < -3*g.StdErr[0]) {
		t.Fatalf("unconstrained step_base %v ± %v: the case is not the one under test", g.Coef[0], g.StdErr[0])
	}
	f, ok, err := fitTerms(x, y, terms, 920e3)
	if err != nil {
		t.Fatal(err)
	}
	// Through the origin: the slope minimises the squares with the constant at zero.
	var sxy, sxx float64
	for i := range y {
		sxy, sxx = sxy+x[i][1]*y[i], sxx+x[i][1]*x[i][1]
	}
	if !ok[0] || f.Coef[0] != 0 || f.StdErr[0] != g.StdErr[0] || !ok[1] || math.Abs(f.Coef[1]-sxy/sxx) > 1e-6*sxy/sxx {
		t.Errorf("fitted %v: step_base %v ± %v, decode %v; want step_base held at 0 ± %v and decode %v (refitted), not %v",
			ok, f.Coef[0], f.StdErr[0], f.Coef[1], g.StdErr[0], sxy/sxx, g.Coef[1])
	}
}

// TestRobustStdErr: with noise that grows with the regressor (as a gap's does with its
// step), the usual standard error of the slope understates how much the slope moves from
// sample to sample; the robust one (HC1) does not. Over 300 samples drawn alike, the
// robust error's mean is within 10% of the slopes' own spread, the usual one's is not.
func TestRobustStdErr(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	var slopes, usual, robust []float64
	for range 300 {
		var x [][]float64
		var y []float64
		for range 200 {
			v := 1 + 99*rng.Float64()
			x = append(x, []float64{1, v})
			y = append(y, 5+2*v+0.05*v*v*rng.NormFloat64())
		}
		f, err := ols(x, y)
		if err != nil {
			t.Fatal(err)
		}
		slopes, usual, robust = append(slopes, f.Coef[1]), append(usual, f.StdErr[1]), append(robust, f.RobustStdErr[1])
	}
	sd, _ := stats.StandardDeviationSample(slopes)
	meanUsual, _ := stats.Mean(usual)
	meanRobust, _ := stats.Mean(robust)
	t.Logf("slope's spread %.4g; mean usual error %.4g, mean robust error %.4g", sd, meanUsual, meanRobust)
	if r := meanRobust / sd; r < 0.9 || r > 1.1 {
		t.Errorf("robust standard error %.4g against the slope's spread %.4g: off by more than 10%%", meanRobust, sd)
	}
	if r := meanUsual / sd; r > 0.9 && r < 1.1 {
		t.Errorf("the usual standard error %.4g is within 10%% of the spread %.4g: the case does not tell the two apart", meanUsual, sd)
	}
}
