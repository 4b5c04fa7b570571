package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/llmreplay/llmreplay/sim"
)

// planTrace writes a trace of n requests of 16 prompt and 50 output tokens at a constant
// 1 request/s with `trace synth`.
func planTrace(t *testing.T, dir string, n int) string {
	t.Helper()
	path := filepath.Join(dir, "even.parquet")
	var out, errb bytes.Buffer
	args := []string{"trace", "synth", "--arrival", "constant", "--rate", "1", "--count", strconv.Itoa(n),
		"--prompt-tokens", "fixed:16", "--output-tokens", "fixed:50", "--seed", "1", "-o", path}
	if err := run(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("trace synth: %v\n%s", err, errb.String())
	}
	return path
}

type planJSON struct {
	Axis       string `json:"axis"`
	Fitted     bool   `json:"fitted"`
	Saturation struct {
		Found     bool    `json:"found"`
		Bracketed bool    `json:"bracketed"`
		PassLoad  float64 `json:"pass_load"`
		FailLoad  float64 `json:"fail_load"`
	} `json:"saturation"`
	SLOLimit *struct {
		Found    bool    `json:"found"`
		PassLoad float64 `json:"pass_load"`
		FailLoad float64 `json:"fail_load"`
	} `json:"slo_limit"`
	Points []struct {
		Load       float64  `json:"load"`
		Sustained  *float64 `json:"sustained_output_tokens_per_s"`
		Attainment *float64 `json:"attainment"`
		TPOT       struct {
			P50 *float64 `json:"p50"`
		} `json:"tpot_ms"`
		BeyondFit bool `json:"beyond_fit"`
	} `json:"points"`
	TwinError []struct {
		Figure  string  `json:"figure"`
		MaxAbs  float64 `json:"max_abs_rel_err"`
		Runs    int     `json:"runs"`
		HeldOut bool    `json:"held_out"`
	} `json:"twin_error"`
	Note string `json:"twin_error_note"`
}

// TestPlan runs `plan` on a built-in profile (no fit: the text says its error is unknown)
// and on a profile file with a fit, whose engine's knee is known: every step 10 ms, at
// most 8 sequences, so 50-token requests saturate it at 8/(0.01 x 50) = 16 requests/s.
func TestPlan(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"plan", "--help"}, &out, &errb); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if s := out.String(); !strings.Contains(s, "Examples:") || !strings.Contains(s, "--rates 5,10,20") {
		t.Fatalf("--help lacks its examples:\n%s", s)
	}
	dir := t.TempDir()
	tr := planTrace(t, dir, 600)

	out.Reset()
	if err := run(context.Background(), []string{"plan", "--trace", tr, "--profile", "tiny", "--slo", "ttft=2s,tpot=100ms", "--rates", "2,4"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	t.Logf("\n%s", text)
	for _, want := range []string{"on the twin tiny (no fit)", "saturation (sustained >= 95%", "highest rate meeting the SLO at 99.0% attainment: rate",
		"no fit: figures are the model's, error unknown", "note: the SLO limit lies above the saturation"} {
		if !strings.Contains(text, want) {
			t.Errorf("built-in profile: the text lacks %q", want)
		}
	}
	if strings.Contains(text, "twin error") {
		t.Error("built-in profile: the text states an error it does not have")
	}

	p, err := sim.BuiltinProfile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	c := &p.Config
	c.StepBase, c.PrefillPerToken, c.DecodePerSeq, c.ContextPerToken, c.AttentionPerPairNs = 10*time.Millisecond, 0, 0, 0, 0
	c.PrefixCache, c.MaxBatch, c.KVCacheTokens, c.MaxBatchedTokens = false, 8, 1<<20, 1<<16
	p.Name, p.Fit = "fitted", &sim.FitReport{Tool: "test", Runs: []sim.FitRun{{File: "a.parquet"}, {File: "b.parquet", Holdout: true}},
		Errors: []sim.FitError{{Run: "a.parquet", Figure: "output_tok_s", Measured: 300, RelErr: 0.3}, {Run: "b.parquet", Figure: "output_tok_s", Measured: 350, RelErr: -0.041},
			{Run: "b.parquet", Figure: "ttft_p50_ms", RelErr: 0.08}}}
	prof := filepath.Join(dir, "fitted.json")
	if err := sim.WriteProfileFile(prof, p); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"plan", "--trace", tr, "--profile", prof, "--slo", "ttft=200ms", "--speedups", "4,8"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	text = out.String()
	t.Logf("\n%s", text)
	for _, want := range []string{"(fitted to 2 runs, 1 held out)", "twin error", "±4.1%", "±8.0%", "?: the fit states no error on that figure", "over the fit's 1 held-out run(s) of 2",
		"beyond fit: the twin predicts more output tok/s than any run of its fit measured (at most 350.0)"} {
		if !strings.Contains(text, want) {
			t.Errorf("fitted profile: the text lacks %q", want)
		}
	}

	out.Reset()
	if err := run(context.Background(), []string{"plan", "--trace", tr, "--profile", prof, "--slo", "ttft=200ms", "--speedups", "4,8", "--json"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	var got planJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}
	const capacity, res = 16.0, 0.02
	s := got.Saturation
	if got.Axis != "speedup" || !got.Fitted || !s.Found || !s.Bracketed || s.FailLoad < capacity || s.PassLoad > capacity/0.95 || (s.FailLoad-s.PassLoad)/s.PassLoad > res {
		t.Errorf("--json: axis %q, saturation %+v: want the speedup axis and a bracket within %v of the capacity %v", got.Axis, s, res, capacity)
	}
	if l := got.SLOLimit; l == nil || !l.Found || l.FailLoad < capacity || l.PassLoad > capacity*(1+res) {
		t.Errorf("--json: SLO limit %+v: want it at the capacity %v", l, capacity)
	}
	if len(got.Points) != 2 || got.Points[0].Load != 4 || got.Points[1].Load != 8 {
		t.Fatalf("--json: points %+v: want speedups 4 and 8", got.Points)
	}
	// The fit's runs reached 350 tok/s: 200 (speedup 4) is inside, 400 (speedup 8) beyond.
	if got.Points[0].BeyondFit || !got.Points[1].BeyondFit {
		t.Errorf("--json: beyond_fit %v, %v: want false at 200 tok/s, true at 400 (the fit's runs reached 350)", got.Points[0].BeyondFit, got.Points[1].BeyondFit)
	}
	for _, pt := range got.Points {
		if pt.Sustained == nil || *pt.Sustained < 0.98*50*pt.Load || *pt.Sustained > 1.02*50*pt.Load || pt.Attainment == nil || *pt.Attainment != 1 || pt.TPOT.P50 == nil || *pt.TPOT.P50 != 10 {
			t.Errorf("--json: at %v: %+v: want %v tok/s sustained, attainment 1, TPOT 10 ms (below capacity)", pt.Load, pt, 50*pt.Load)
		}
	}
	if len(got.TwinError) != 2 || got.TwinError[0].Figure != "output_tok_s" || got.TwinError[0].MaxAbs != 0.041 || !got.TwinError[0].HeldOut || got.TwinError[0].Runs != 1 {
		t.Errorf("--json: twin_error %+v: want output_tok_s at 0.041 over the one held-out run", got.TwinError)
	}

	// Closed loop: c workers keep min(c, 8) sequences running, each step a token for each,
	// so doubling pays up to the 8 the batch holds and not past it.
	out.Reset()
	if err := run(context.Background(), []string{"plan", "--trace", tr, "--profile", prof, "--concurrencies", "2,16", "--json"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	var closed struct {
		planJSON
		MinGain *float64 `json:"min_gain"`
		Points  []struct {
			Load      float64  `json:"load"`
			Speedup   *float64 `json:"speedup"`
			Sustained *float64 `json:"sustained_output_tokens_per_s"`
		} `json:"points"`
	}
	if err := json.Unmarshal(out.Bytes(), &closed); err != nil {
		t.Fatalf("--concurrencies --json: %v\n%s", err, out.String())
	}
	if s := closed.Saturation; closed.Axis != "concurrency" || closed.MinGain == nil || *closed.MinGain != 0.1 || !s.Found || s.PassLoad != 8 || s.FailLoad != 16 {
		t.Errorf("--concurrencies: axis %q, min gain %v, saturation %+v: want concurrency 8 failing at 16", closed.Axis, closed.MinGain, s)
	}
	for i, want := range []float64{200, 800} { // 2 and 8 sequences, 100 tokens/s each
		if pt := closed.Points[i]; pt.Speedup != nil || pt.Sustained == nil || *pt.Sustained < 0.98*want || *pt.Sustained > 1.02*want {
			t.Errorf("--concurrencies: at %v: speedup %v, sustained %v; want no speedup and %v tok/s", pt.Load, pt.Speedup, pt.Sustained, want)
		}
	}
}

func TestPlanErrors(t *testing.T) {
	dir := t.TempDir()
	tr := planTrace(t, dir, 20)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", tr}, "--profile NAME|FILE is required"},
		{[]string{"--trace", tr, "--profile", "tiny", "--slo", "ttft=soon"}, "not a duration"},
		{[]string{"--trace", tr, "--profile", "tiny", "--rates", "1", "--speedups", "2"}, "give one of --rates, --speedups and --concurrencies"},
		{[]string{"--trace", tr, "--profile", "tiny", "--concurrencies", "1", "--rates", "2"}, "give one of"},
		{[]string{"--trace", tr, "--profile", "tiny", "--concurrencies", "4", "--auto-axis", "rate"}, "does not match"},
		{[]string{"--trace", tr, "--profile", "tiny", "--auto-axis", "concurrency", "--start", "1.5"}, "whole numbers"},
		{[]string{"--trace", tr, "--profile", "tiny", "--rates", "1", "--auto-axis", "speedup"}, "does not match"},
		{[]string{"--trace", tr, "--profile", "nosuch"}, "no built-in"},
		{[]string{"--trace", tr, "--profile", "fixed"}, "fixed latencies"},
		{[]string{"--trace", filepath.Join(dir, "missing.parquet"), "--profile", "tiny"}, "missing.parquet"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), append([]string{"plan"}, c.args...), &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v: want an error saying %q", c.args, err, c.want)
		}
	}
}

// TestPlanSaysPrefixesNotModelled: a trace whose prompts share prefixes is planned on a
// cold cache, and the text says so.
func TestPlanSaysPrefixesNotModelled(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "turns.parquet")
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"trace", "synth", "--rate", "2", "--count", "60", "--turns", "uniform:2,4",
		"--prompt-tokens", "fixed:64", "--output-tokens", "fixed:16", "--seed", "1", "-o", tr}, &out, &errb); err != nil {
		t.Fatalf("trace synth: %v\n%s", err, errb.String())
	}
	for _, c := range []struct {
		trace string
		note  bool
	}{{tr, true}, {planTrace(t, dir, 60), false}} {
		out.Reset()
		if err := run(context.Background(), []string{"plan", "--trace", c.trace, "--profile", "tiny"}, &out, &errb); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), "the plan does not model their cache hits"); got != c.note {
			t.Errorf("%s: note of the prefixes %v, want %v:\n%s", c.trace, got, c.note, out.String())
		}
	}
}
