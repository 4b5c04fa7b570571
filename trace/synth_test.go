package trace

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// genSource streams n arrivals of g as requests, so statistics run over a million
// arrivals without holding them.
type genSource struct {
	g    *arrivalGen
	n, i int
	cur  Request
}

func (s *genSource) Next() bool {
	if s.i >= s.n {
		return false
	}
	s.i++
	s.cur = Request{ID: int64(s.i), Arrival: time.Duration(s.g.next()), PromptTokens: 1, OutputTokens: 1}
	return true
}
func (s *genSource) Request() Request { return s.cur }
func (s *genSource) Err() error       { return nil }

// TestArrivalRateAndCV measures rate and inter-arrival CV over n = 10⁶ arrivals.
//
// Tolerances are six standard errors, so a correct generator fails with probability
// below 10⁻⁸ per check. With gaps of mean 1/R and CV c (gamma shape k = 1/c²):
//   - the measured rate is (n−1)/Tₙ with Tₙ a sum of n−1 gaps: relative SE c/√n;
//   - the sample SD s of gaps has Var(s²) ≈ (μ₄ − σ⁴)/n = σ⁴(2 + 6/k)/n (gamma's excess
//     kurtosis is 6/k), so s has relative SE √((1 + 3c²)/(2n)); the mean has c/√n; the
//     CV's relative SE is at most their sum.
//
// For c = 3 that is 0.3 % for the rate and 0.67 % for the CV; six SEs are 1.8 % and 4 %.
func TestArrivalRateAndCV(t *testing.T) {
	const n = 1_000_000
	for _, c := range []struct {
		spec ArrivalSpec
		cv   float64
	}{
		{ArrivalSpec{Process: ArrivalPoisson, Rate: 100, Seed: 1}, 1},
		{ArrivalSpec{Process: ArrivalGamma, Rate: 50, CV: 3, Seed: 2}, 3},
		{ArrivalSpec{Process: ArrivalGamma, Rate: 200, CV: 0.5, Seed: 3}, 0.5},
		{ArrivalSpec{Process: ArrivalConstant, Rate: 7, Seed: 4}, 0},
	} {
		info, err := ComputeInfo(context.Background(), &genSource{g: newArrivalGen(c.spec), n: n}, Meta{})
		if err != nil {
			t.Fatal(err)
		}
		seRate := c.cv / math.Sqrt(n)
		seCV := math.Sqrt((1+3*c.cv*c.cv)/(2*n)) + c.cv/math.Sqrt(n)
		// MeanRate, (n−1)/span, measures R itself (count/span measured R·n/(n−1)); the
		// constant process is exact up to 1 ns rounding per arrival.
		wantRate := c.spec.Rate
		if rel := math.Abs(info.MeanRatePerSecond/wantRate - 1); rel > 6*seRate+1e-6 {
			t.Errorf("%s rate %v: measured %.4f (%.3f %% off, tolerance %.3f %%)", c.spec.Process, c.spec.Rate, info.MeanRatePerSecond, 100*rel, 100*(6*seRate+1e-6))
		}
		if c.cv == 0 {
			if info.InterArrivalCV > 1e-6 {
				t.Errorf("constant: CV %v, want 0", info.InterArrivalCV)
			}
			continue
		}
		if rel := math.Abs(info.InterArrivalCV/c.cv - 1); rel > 6*seCV {
			t.Errorf("%s cv %v: measured %.4f (%.3f %% off, tolerance %.3f %%)", c.spec.Process, c.cv, info.InterArrivalCV, 100*rel, 100*6*seCV)
		}
		if c.spec.Process == ArrivalPoisson {
			// Poisson counts in 1 s bins: dispersion 1; the estimate over B = 10⁴ bins
			// has SE ≈ √(2/B) = 0.014.
			if math.Abs(info.Dispersion1s-1) > 6*math.Sqrt(2/1e4) {
				t.Errorf("poisson dispersion at 1 s: %v, want 1", info.Dispersion1s)
			}
		}
	}
}

// TestRamp checks a Poisson ramp from 100 to 1000 req/s over 100 s: the counts in each
// half are Poisson with means ∫rate = 100·50 + 9·50²/2 = 16,250 and 55,000 − 16,250 =
// 38,750; six SDs (√mean) bound them.
func TestRamp(t *testing.T) {
	spec := ArrivalSpec{Process: ArrivalPoisson, Rate: 100, RateEnd: 1000, Ramp: 100 * time.Second, Seed: 9}
	g := newArrivalGen(spec)
	var first, second float64
	for {
		a := g.next()
		if a >= int64(100*time.Second) {
			break
		}
		if a < int64(50*time.Second) {
			first++
		} else {
			second++
		}
	}
	for _, c := range []struct{ got, want float64 }{{first, 16250}, {second, 38750}} {
		if math.Abs(c.got-c.want) > 6*math.Sqrt(c.want) {
			t.Errorf("ramp half count %v, want %v ± %.0f", c.got, c.want, 6*math.Sqrt(c.want))
		}
	}
	// Past the ramp the rate holds at its end.
	if err := (ArrivalSpec{Process: ArrivalPoisson, Rate: 1, RateEnd: 2}).Validate(); err == nil {
		t.Error("a ramp without a duration validated")
	}
}

func TestParseDist(t *testing.T) {
	good := map[string]Dist{
		"fixed:512":               {Kind: "fixed", A: 512},
		"uniform:1,4096":          {Kind: "uniform", A: 1, B: 4096},
		"normal:1000,200":         {Kind: "normal", A: 1000, B: 200},
		"lognormal:1000, 600":     {Kind: "lognormal", A: 1000, B: 600},
		"zipf:1.2,8192":           {Kind: "zipf", A: 1.2, B: 8192},
		"empirical:a/b:c.parquet": {Kind: "empirical", Path: "a/b:c.parquet"},
	}
	for s, want := range good {
		d, err := ParseDist(s)
		if err != nil {
			t.Errorf("ParseDist(%q): %v", s, err)
			continue
		}
		if d.Kind != want.Kind || d.A != want.A || d.B != want.B || d.Path != want.Path || d.String() != s {
			t.Errorf("ParseDist(%q) = %+v", s, d)
		}
	}
	for _, s := range []string{"", "fixed", "fixed:", "fixed:0", "fixed:1.5", "fixed:1,2", "uniform:5,1", "uniform:1", "normal:1,-1", "lognormal:0,1", "zipf:1,100", "zipf:2,0", "gauss:1,2", "uniform:a,b", "normal:NaN,1", "fixed:Inf"} {
		if _, err := ParseDist(s); err == nil {
			t.Errorf("ParseDist(%q) succeeded", s)
		}
	}
}

// TestDistMoments checks sample means against the distributions' means over 2·10⁵
// draws; six standard errors (SD/√n) bound each.
func TestDistMoments(t *testing.T) {
	const n = 200_000
	cases := []struct {
		dist     string
		mean, sd float64
	}{
		{"fixed:77", 77, 0},
		{"uniform:10,20", 15, math.Sqrt((11*11 - 1) / 12.0)},
		{"normal:1000,100", 1000, 100},
		{"lognormal:1000,600", 1000, 600},
	}
	for _, c := range cases {
		d, _ := ParseDist(c.dist)
		s := newSampler(&d, rand.New(rand.NewPCG(5, 6)))
		var sum, sumSq float64
		for i := 0; i < n; i++ {
			v := float64(s.draw())
			sum += v
			sumSq += v * v
		}
		mean := sum / n
		sd := math.Sqrt(sumSq/n - mean*mean)
		// Rounding to integers adds at most 0.5 to the mean's error.
		if math.Abs(mean-c.mean) > 6*c.sd/math.Sqrt(n)+0.5 {
			t.Errorf("%s: mean %.2f, want %.2f", c.dist, mean, c.mean)
		}
		if c.sd > 0 && math.Abs(sd/c.sd-1) > 0.05 {
			t.Errorf("%s: sd %.2f, want %.2f", c.dist, sd, c.sd)
		}
	}
	// zipf:2,100: P(1) = 1/H where H = Σ k⁻² for k ≤ 100 = 1.6350; SE of a proportion
	// is √(p(1−p)/n).
	d, _ := ParseDist("zipf:2,100")
	s := newSampler(&d, rand.New(rand.NewPCG(7, 8)))
	ones, hi := 0, int64(0)
	for i := 0; i < n; i++ {
		v := s.draw()
		if v == 1 {
			ones++
		}
		hi = max(hi, v)
	}
	var h float64
	for k := 1; k <= 100; k++ {
		h += 1 / float64(k*k)
	}
	p := 1 / h
	if got := float64(ones) / n; math.Abs(got-p) > 6*math.Sqrt(p*(1-p)/n) || hi > 100 {
		t.Errorf("zipf:2,100: P(1) = %.4f, want %.4f; max %d", got, p, hi)
	}
}

func synthBytes(t *testing.T, spec SynthSpec) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, Meta{})
	if _, err := Synth(context.Background(), spec, w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func baseSpec() SynthSpec {
	p, _ := ParseDist("lognormal:500,300")
	o, _ := ParseDist("uniform:1,200")
	return SynthSpec{Arrivals: ArrivalSpec{Process: ArrivalGamma, Rate: 20, CV: 2, Seed: 42}, Count: 5000,
		Prompt: p, Output: o, PromptMin: 1, PromptMax: 4096, OutputMin: 1, OutputMax: 4096}
}

func TestSynthDeterministic(t *testing.T) {
	a, b := synthBytes(t, baseSpec()), synthBytes(t, baseSpec())
	if !bytes.Equal(a, b) {
		t.Fatal("the same spec and seed gave different bytes")
	}
	other := baseSpec()
	other.Arrivals.Seed = 43
	if bytes.Equal(a, synthBytes(t, other)) {
		t.Fatal("different seeds gave the same bytes")
	}
	r, err := NewReader(bytes.NewReader(a), "synth")
	if err != nil {
		t.Fatal(err)
	}
	var gen struct {
		Spec struct {
			Arrivals ArrivalSpec `json:"arrivals"`
			Count    int64       `json:"count"`
			Prompt   Dist        `json:"prompt_tokens"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(r.Meta().Generator), &gen); err != nil {
		t.Fatal(err)
	}
	if gen.Spec.Arrivals.Seed != 42 || gen.Spec.Arrivals.CV != 2 || gen.Spec.Count != 5000 || gen.Spec.Prompt.Kind != "lognormal" || r.Meta().Source != "synth" {
		t.Errorf("generator metadata %s", r.Meta().Generator)
	}
	n := 0
	for r.Next() {
		q := r.Request()
		if q.PromptTokens < 1 || q.PromptTokens > 4096 || q.OutputTokens > 200 {
			t.Fatalf("row %+v outside clamps", q)
		}
		n++
	}
	if n != 5000 || r.Err() != nil {
		t.Fatalf("%d rows, %v", n, r.Err())
	}
}

func TestSynthSessionsSharePrefix(t *testing.T) {
	spec := baseSpec()
	spec.Prompt, _ = ParseDist("fixed:100")
	spec.Output, _ = ParseDist("fixed:50")
	turns, _ := ParseDist("fixed:3")
	spec.Turns, spec.Sessions, spec.BlockTokens = &turns, 4, 16
	spec.Count = 3000
	r, err := NewReader(bytes.NewReader(synthBytes(t, spec)), "s")
	if err != nil {
		t.Fatal(err)
	}
	if r.Meta().BlockTokens != 16 {
		t.Errorf("block tokens %d", r.Meta().BlockTokens)
	}
	bySess := map[int64][]Request{}
	var reqs []Request
	for r.Next() {
		q := r.Request()
		bySess[q.SessionID] = append(bySess[q.SessionID], q)
		reqs = append(reqs, q)
	}
	full := 0
	for id, turns := range bySess {
		for j, q := range turns {
			// Turn j (0-based) holds j earlier prompts' 100 new tokens and outputs of 50.
			if want := int32(100 + 150*j); q.PromptTokens != want {
				t.Fatalf("session %d turn %d: prompt %d, want %d", id, j, q.PromptTokens, want)
			}
			if want := (int(q.PromptTokens) + 15) / 16; len(q.PrefixBlocks) != want {
				t.Fatalf("session %d turn %d: %d blocks for %d tokens", id, j, len(q.PrefixBlocks), q.PromptTokens)
			}
			if j > 0 {
				prev := turns[j-1]
				shared := int(prev.PromptTokens) / 16 // the previous turn's full blocks
				for b := 0; b < shared; b++ {
					if q.PrefixBlocks[b] != prev.PrefixBlocks[b] {
						t.Fatalf("session %d turn %d: block %d differs from the previous turn's", id, j, b)
					}
				}
				if q.PrefixBlocks[len(q.PrefixBlocks)-1] == prev.PrefixBlocks[len(prev.PrefixBlocks)-1] {
					t.Fatalf("session %d turn %d: a partial block is shared", id, j)
				}
			}
		}
		if len(turns) == 3 {
			full++
		}
		if len(turns) > 3 {
			t.Fatalf("session %d has %d turns, want at most 3", id, len(turns))
		}
	}
	// Only the conversations still open at the end (at most 4) are short.
	if len(bySess)-full > 4 {
		t.Errorf("%d of %d sessions are incomplete", len(bySess)-full, len(bySess))
	}
	// Sessions interleave: consecutive requests are not all of one conversation.
	switches := 0
	for i := 1; i < len(reqs); i++ {
		if reqs[i].SessionID != reqs[i-1].SessionID {
			switches++
		}
	}
	if switches < len(reqs)/2 {
		t.Errorf("only %d session switches in %d requests", switches, len(reqs))
	}
	info, err := ComputeInfo(context.Background(), NewSliceSource(reqs), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	if info.ReusableBlockShare < 0.3 {
		t.Errorf("reusable share %.3f: later turns should reuse their history", info.ReusableBlockShare)
	}
}

func TestSynthEmpiricalAndDuration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "src.parquet")
	writeFile(t, path, Meta{}, []Request{{ID: 0, PromptTokens: 11, OutputTokens: 3}, {ID: 1, Arrival: 1, PromptTokens: 22, OutputTokens: 4}})
	spec := baseSpec()
	spec.Count = 0
	spec.Duration = 10 * time.Second
	spec.Prompt, _ = ParseDist("empirical:" + path)
	spec.Output, _ = ParseDist("empirical:" + path)
	r, err := NewReader(bytes.NewReader(synthBytes(t, spec)), "e")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for r.Next() {
		q := r.Request()
		if (q.PromptTokens != 11 && q.PromptTokens != 22) || (q.OutputTokens != 3 && q.OutputTokens != 4) || q.Arrival >= 10*time.Second {
			t.Fatalf("row %+v", q)
		}
		n++
	}
	// 10 s at 20 req/s: 200 expected; gamma CV 2 counts have SD about 2·√200 = 28.
	if n < 200-6*28 || n > 200+6*28 {
		t.Errorf("%d rows in 10 s at 20 req/s", n)
	}
	spec.Prompt, _ = ParseDist("empirical:" + filepath.Join(t.TempDir(), "missing.parquet"))
	if _, err := Synth(context.Background(), spec, NewWriter(&bytes.Buffer{}, Meta{})); err == nil || !strings.Contains(err.Error(), "missing.parquet") {
		t.Errorf("missing empirical file: %v", err)
	}
}
