package twin

import (
	"math"
	"math/rand/v2"
	"testing"
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

// TestFitTermsFixesTheUndetermined: two regressors that move together cannot be told
// apart: the less determined is fixed at its base value and the other fitted given it,
// not left as uncertain as both are together.
func TestFitTermsFixesTheUndetermined(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var x [][]float64
	var y []float64
	for range 300 {
		a := float64(rng.IntN(100))
		b := 10*a + rng.Float64()*0.5
		x = append(x, []float64{a, b, 1})
		y = append(y, 2*a+3*b+50+5*rng.NormFloat64())
	}
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
