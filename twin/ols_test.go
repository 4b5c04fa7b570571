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
