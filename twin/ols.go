package twin

import (
	"errors"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
)

// olsFit is an ordinary least-squares fit y = X b + e.
type olsFit struct {
	Coef, StdErr []float64
	// RobustStdErr are the standard errors robust to residuals of unequal variance.
	RobustStdErr []float64
	N            int     // observations
	RMS          float64 // residual standard deviation, sqrt(RSS / (N - p))
}

// ols fits y on the columns of x (rows are observations) by least squares. The standard
// errors are the usual ones from the residuals: sqrt(s^2 (X'X)^-1_jj), s^2 = RSS/(n-p)
// (e.g. Greene, Econometric Analysis, ch. 4); the robust ones are White's
// heteroskedasticity-consistent estimator with HC1's n/(n-p) (Greene, ch. 9): sqrt of
// the diagonal of (X'X)^-1 (sum of e_i^2 x_i x_i') (X'X)^-1 n/(n-p). Columns are scaled
// to unit norm before the solve so that ns-sized and token-count-sized regressors stay
// well conditioned.
func ols(x [][]float64, y []float64) (olsFit, error) {
	n := len(y)
	if n == 0 {
		return olsFit{}, errors.New("no observations")
	}
	p := len(x[0])
	if n <= p {
		return olsFit{}, errors.New("fewer observations than parameters")
	}
	scale := make([]float64, p)
	for _, row := range x {
		for j, v := range row {
			scale[j] += v * v
		}
	}
	for j := range scale {
		scale[j] = math.Sqrt(scale[j])
		if scale[j] == 0 {
			return olsFit{}, errors.New("a regressor is zero in every observation")
		}
	}
	X := mat.NewDense(n, p, nil)
	for i, row := range x {
		for j, v := range row {
			X.Set(i, j, v/scale[j])
		}
	}
	Y := mat.NewVecDense(n, y)
	var xtx mat.SymDense
	xtx.SymOuterK(1, X.T())
	var inv mat.Dense
	if err := inv.Inverse(&xtx); err != nil {
		return olsFit{}, errors.New("the regressors are collinear: the runs do not tell these parameters apart")
	}
	if c := mat.Cond(&xtx, 2); c > 1e12 {
		return olsFit{}, errors.New("the regressors are nearly collinear: the runs do not tell these parameters apart")
	}
	var xty mat.VecDense
	xty.MulVec(X.T(), Y)
	var b mat.VecDense
	b.MulVec(&inv, &xty)
	var fitted mat.VecDense
	fitted.MulVec(X, &b)
	rss := 0.0
	meat := mat.NewSymDense(p, nil) // sum of e_i^2 x_i x_i'
	for i := range n {
		d := y[i] - fitted.AtVec(i)
		rss += d * d
		meat.SymRankOne(meat, d*d, X.RowView(i))
	}
	var cov mat.Dense
	cov.Product(&inv, meat, &inv)
	s2 := rss / float64(n-p)
	f := olsFit{Coef: make([]float64, p), StdErr: make([]float64, p), RobustStdErr: make([]float64, p), N: n, RMS: math.Sqrt(s2)}
	for j := range p {
		f.Coef[j] = b.AtVec(j) / scale[j]
		f.StdErr[j] = math.Sqrt(s2*inv.At(j, j)) / scale[j]
		f.RobustStdErr[j] = math.Sqrt(cov.At(j, j)*float64(n)/float64(n-p)) / scale[j]
	}
	return f, nil
}

// term is one regressor of a fit of the step model.
type term struct {
	base   float64 // the base profile's value, kept when the runs do not determine it
	spread float64 // the regressor's range over the observations
	always bool    // always estimated: a constant that is no parameter of the engine
}

// fitTerms fits y on the columns of x, one per term. A coefficient that is not determined
// (determined) while its term's base value lies within 3 standard errors of it is fixed
// at that base value (of several, the one whose base is the fewest standard errors off),
// its part taken out of y, and the rest fitted again, until every
// term left is determined or rejects its base: a parameter the runs cannot tell keeps the
// base value, as every undetermined parameter does, and the others are fitted given it
// rather than made as uncertain as it is (the attention and prefill terms move together
// over short prompts, for one). A term whose base the runs reject keeps its estimate:
// against Ollama on a CPU, attention was 718 ± 73 ns a pair against tiny's 1, too
// uncertain for determined over 600-token prompts, and fixing it at 1 left every TTFT
// short by a factor of ten.
//
// No parameter of the step model is negative: a term (not always estimated) whose estimate
// is below zero, with no base left to fix, is held at zero and the rest fitted again (of
// several, the one the most standard errors below), the least-squares fit under the
// bound. Clamping its estimate at zero instead and keeping the others' put back the time
// they had fitted around it: against Ollama, step_base's estimate was -7 to -47 µs in
// four runs, beside a decode term fitted to match it, and clamped at zero every step of
// one or two sequences came out up to 30 and 60 µs long (decode_per_seq 438 µs clamped,
// 408 held at zero and fitted again). A term held at zero counts as fitted,
// at its bound, with the standard error of its last free estimate. ok[j] says whether
// term j was fitted.
func fitTerms(x [][]float64, y []float64, terms []term, meanY float64) (f olsFit, ok []bool, err error) {
	return fitTermsWith(x, y, terms, meanY, false)
}

// fitTermsWith is fitTerms, with standard errors robust to residuals of unequal
// variance when robust is set (olsFit.RobustStdErr).
func fitTermsWith(x [][]float64, y []float64, terms []term, meanY float64, robust bool) (f olsFit, ok []bool, err error) {
	ok = make([]bool, len(terms))
	for j := range ok {
		ok[j] = true
	}
	atZero := make([]bool, len(terms))   // held at the bound: fitted, out of the columns
	bound := make([]float64, len(terms)) // a held term's standard error when it was free
	for {
		var cols []int
		for j := range terms {
			if ok[j] && !atZero[j] {
				cols = append(cols, j)
			}
		}
		held := func(n int, rms float64) olsFit {
			f := olsFit{Coef: make([]float64, len(terms)), StdErr: make([]float64, len(terms)), N: n, RMS: rms}
			for j := range terms {
				if !ok[j] {
					f.Coef[j] = terms[j].base
				}
				if atZero[j] {
					f.StdErr[j] = bound[j]
				}
			}
			return f
		}
		if len(cols) == 0 { // every term fixed: nothing left to fit
			return held(len(y), 0), ok, nil
		}
		xs, ys := make([][]float64, len(y)), slices.Clone(y)
		for i, row := range x {
			xs[i] = make([]float64, 0, len(cols))
			for j, v := range row {
				switch {
				case !ok[j]:
					ys[i] -= terms[j].base * v
				case !atZero[j]:
					xs[i] = append(xs[i], v)
				}
			}
		}
		g, err := ols(xs, ys)
		if err != nil {
			return f, ok, err
		}
		if robust {
			g.StdErr = g.RobustStdErr
		}
		fix, fixZ := -1, math.Inf(1)
		neg, negZ := -1, 0.0
		f = held(g.N, g.RMS)
		for k, j := range cols {
			f.Coef[j], f.StdErr[j] = g.Coef[k], g.StdErr[k]
			// A term is fixed at its base value only when the runs allow that value: one
			// they reject (more than 3 standard errors from the estimate) keeps its
			// estimate, however imprecise, since the base is further from the truth.
			// Of the terms that may be fixed, the one whose base the runs find likeliest (the
			// fewest standard errors from its estimate) is: fixing the least likely one
			// instead moved the others, fitted given a wrong value, far off with small
			// errors (over HTTP under -race, prefill fixed at tiny's 10 µs against 16 left
			// attention at 5.1 ± 0.2 ns against 1.3).
			z := math.Abs(g.Coef[k]-terms[j].base) / g.StdErr[k]
			if !terms[j].always && z <= 3 && !determined(g.StdErr[k], terms[j].spread, meanY) && z < fixZ {
				fix, fixZ = j, z
			}
			if z := g.Coef[k] / g.StdErr[k]; !terms[j].always && g.Coef[k] < 0 && (neg < 0 || z < negZ) {
				neg, negZ = j, z
			}
		}
		switch {
		case fix >= 0:
			ok[fix] = false
		case neg >= 0:
			atZero[neg], bound[neg] = true, f.StdErr[neg]
		default:
			return f, ok, nil
		}
	}
}
