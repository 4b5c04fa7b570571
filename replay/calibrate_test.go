package replay

import (
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/tokenize"
)

// TestCheckCalibration: a fit within its bound passes, at the bound too; one above it is
// refused with the error, the bound, what to do, and the likely reasons: a cut the probes
// show, or, when they show none, both reasons with the context the server said.
func TestCheckCalibration(t *testing.T) {
	fit := []tokenize.Probe{{BuilderTokens: 128, ServerTokens: 140}, {BuilderTokens: 1024, ServerTokens: 1100}, {BuilderTokens: 3072, ServerTokens: 3300}}
	nonLinear := tokenize.Calibration{Method: "tokenize", Overhead: 12, Ratio: 1.07, MaxModelLen: 32768, Fit: fit,
		Check:       []tokenize.Probe{{Want: 400, BuilderTokens: 363, ServerTokens: 440}},
		MaxAbsError: 40, MaxRelError: 0.1}
	cut := tokenize.Calibration{Method: "usage", Overhead: 186, Ratio: 0.63,
		Fit:         []tokenize.Probe{{BuilderTokens: 128, ServerTokens: 129}, {BuilderTokens: 1024, ServerTokens: 1025}, {BuilderTokens: 3072, ServerTokens: 2048}},
		Check:       []tokenize.Probe{{Want: 1500, BuilderTokens: 2100, ServerTokens: 2048}, {Want: 2500, BuilderTokens: 3698, ServerTokens: 2048}},
		MaxAbsError: 548, MaxRelError: 0.36533}
	for _, tc := range []struct {
		name  string
		c     tokenize.Calibration
		bound float64
		want  []string // nil: passes
	}{
		{"within", nonLinear, 0.2, nil},
		{"at the bound", nonLinear, 0.1, nil},
		{"not linear", nonLinear, 0.05, []string{"held-out error is 10.000% (40 tokens), above --calibrate-max-error 0.05 (5%)",
			"likely reasons: the server cuts prompts longer than its context", "the server says the model's context is 32768 tokens",
			"its count is not linear", "400 <- 363 -> 440", "context of at least 3456 tokens", "raise --calibrate-max-error to 0.100"}},
		{"cut", cut, 0.05, []string{"the server cuts prompts short: a probe of 3072 builder tokens counted 2048, no more than one of 2100 (2048)",
			"the server did not say its context length", "3072 -> 2048", "raise --calibrate-max-error to 0.366"}},
	} {
		err := checkCalibration(tc.c, tc.bound)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: passed", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error\n%s\nwant %q", tc.name, err, w)
			}
		}
	}
}
