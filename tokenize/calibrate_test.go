package tokenize

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
)

// linearCount is a server that counts 1.1 tokens a word plus a 3-token template, and fails
// every method but the one it serves.
func linearCount(serves string) CountFunc {
	return func(_ context.Context, method, text string) (int, int, error) {
		if method != serves {
			return 0, 0, errors.New("POST /tokenize: HTTP 404: not found")
		}
		return 3 + int(math.Ceil(1.1*float64(len(strings.Fields(text))))), 8192, nil
	}
}

// TestCalibrateFits: the fit finds the server's template and ratio, the held-out probes
// land within rounding, the first method that counts is the one used (earlier ones are
// warnings), and the context length the server reported is kept.
func TestCalibrateFits(t *testing.T) {
	b := testBuilder(t, CL100kBase, BuilderOptions{})
	cal, err := Calibrate(context.Background(), CalibrateOptions{API: "chat", Methods: []string{"a", "b"}, Count: linearCount("b"), Builder: b})
	if err != nil {
		t.Fatal(err)
	}
	if cal.Method != "b" || cal.API != "chat" || len(cal.Warnings) != 1 || !strings.Contains(cal.Warnings[0], "fell back") {
		t.Errorf("method %s api %s warnings %v", cal.Method, cal.API, cal.Warnings)
	}
	if math.Abs(cal.Overhead-3) > 2 || math.Abs(cal.Ratio-1.1) > 0.01 || cal.MaxRelError > 0.005 || cal.MaxModelLen != 8192 {
		t.Errorf("fit %v, max_model_len %d", cal, cal.MaxModelLen)
	}
	if len(cal.Fit) != 3*len(DefaultFitLengths) || len(cal.Check) != len(DefaultCheckLengths) {
		t.Errorf("probes: fit %v check %v", cal.Fit, cal.Check)
	}
	_, err = Calibrate(context.Background(), CalibrateOptions{API: "chat", Methods: []string{"a", "b"}, Count: linearCount("c"), Builder: b})
	if err == nil || !strings.Contains(err.Error(), "every method failed") {
		t.Errorf("no method counts: %v", err)
	}
	// A count far below the prompt (a /tokenize that ignored the field) is no measurement.
	zero := func(context.Context, string, string) (int, int, error) { return 0, 0, nil }
	if _, err := Calibrate(context.Background(), CalibrateOptions{Methods: []string{"a"}, Count: zero, Builder: b}); err == nil || !strings.Contains(err.Error(), "not a count of this prompt") {
		t.Errorf("zero counts: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	canceled := func(ctx context.Context, _, _ string) (int, int, error) { return 0, 0, ctx.Err() }
	if _, err := Calibrate(ctx, CalibrateOptions{Methods: []string{"a", "b"}, Count: canceled, Builder: b}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
}

func TestCalibrateOptionsValidate(t *testing.T) {
	b := testBuilder(t, CL100kBase, BuilderOptions{})
	good := CalibrateOptions{API: "chat", Methods: []string{"usage"}, Count: linearCount("usage"), Builder: b}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*CalibrateOptions){
		"no method":      func(o *CalibrateOptions) { o.Methods = nil },
		"no count":       func(o *CalibrateOptions) { o.Count = nil },
		"no builder":     func(o *CalibrateOptions) { o.Builder = nil },
		"one fit length": func(o *CalibrateOptions) { o.FitLengths = []int{5, 5} },
		"no check":       func(o *CalibrateOptions) { o.CheckLengths = []int{} },
		"zero length":    func(o *CalibrateOptions) { o.CheckLengths = []int{0} },
		"repeats":        func(o *CalibrateOptions) { o.Repeats = 101 },
	} {
		o := good
		mod(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%s: Validate passed", name)
		}
	}
}

func TestTargetZeroAndEdges(t *testing.T) {
	var zero Calibration
	for _, n := range []int{-5, 0, 1, 77} {
		if got := zero.Target(n); got != max(n, 1) {
			t.Errorf("zero.Target(%d) = %d", n, got)
		}
	}
	c := Calibration{Overhead: 12, Ratio: 1.1}
	if got := c.Target(5); got != 1 {
		t.Errorf("Target below the overhead = %d, want 1", got)
	}
	if got := c.Target(1112); got != 1000 {
		t.Errorf("Target(1112) = %d, want 1000", got)
	}
}

// TestCalibrationTruncation: a server that cuts prompts to a context shows in the probes,
// as a count that stops growing when the held-out probes are cut too, as a bend in the
// fit's growth when only the longest fit probes are, or as a count at the context the
// server said; a linear server (a template and a tokenizer that splits some words) shows
// none of it.
func TestCalibrationTruncation(t *testing.T) {
	b := testBuilder(t, CL100kBase, BuilderOptions{})
	cut := func(ctxLen, maxModelLen int) CountFunc {
		return func(_ context.Context, _, text string) (int, int, error) {
			return min(len(strings.Fields(text))+1, ctxLen), maxModelLen, nil
		}
	}
	for _, tc := range []struct {
		name  string
		count CountFunc
		fit   []int
		check []int
		want  string
	}{
		{"linear", linearCount("usage"), nil, nil, ""},
		{"stops growing", cut(2048, 0), nil, nil, "no more than one of"},
		{"bend", cut(2600, 0), []int{128, 1024, 2048, 3072}, []int{400}, "were cut short at about 2600 tokens"},
		{"at the context", cut(2600, 2600), nil, []int{400}, "the model's context of 2600"},
	} {
		cal, err := Calibrate(context.Background(), CalibrateOptions{API: "completions", Methods: []string{"usage"}, Count: tc.count, Builder: b,
			FitLengths: tc.fit, CheckLengths: tc.check})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := cal.Truncation()
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: Truncation() = %q, want %q", tc.name, got, tc.want)
		}
	}
}
