package main

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/twin"
)

// TestSimFit runs `sim fit` on results files of a known engine (made in model time) and
// checks what it prints and the profile file it writes: the batch cap and decode terms
// recovered, the KV budget not determined and advised on, the held-out run marked.
func TestSimFit(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"sim", "fit", "--help"}, &out, &errb); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if s := out.String(); !strings.Contains(s, "Examples:") || !strings.Contains(s, "--holdout c16.parquet") {
		t.Fatalf("--help lacks its examples:\n%s", s)
	}
	cfg, _ := sim.Profile("tiny")
	cfg.MaxBatch, cfg.StepBase, cfg.DecodePerSeq = 10, 1500*time.Microsecond, 70*time.Microsecond
	rng := rand.New(rand.NewPCG(3, 4))
	reqs := func(n int, gap time.Duration) []sim.SimRequest {
		r := make([]sim.SimRequest, n)
		for i := range r {
			r[i] = sim.SimRequest{Arrival: time.Duration(i) * gap, Prompt: 50 + rng.IntN(2000), Output: 10 + rng.IntN(60)}
		}
		return r
	}
	dir := t.TempDir()
	meta := results.RunMeta{ToolVersion: "test", Model: "m", ShardCount: 1, Flags: map[string]string{}}
	var paths []string
	for _, r := range []struct {
		name string
		reqs []sim.SimRequest
		c    int
	}{{"solo", reqs(40, 2*time.Second), 0}, {"c3", reqs(60, 0), 3}, {"c14", reqs(60, 0), 14}, {"c20", reqs(100, 0), 20}} {
		p := filepath.Join(dir, r.name+".parquet")
		if err := twin.SimulateRun(p, cfg, r.reqs, r.c, meta); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	prof := filepath.Join(dir, "twin.json")
	out.Reset()
	args := append([]string{"sim", "fit"}, paths[:3]...)
	if err := run(context.Background(), append(args, "--holdout", paths[3], "-o", prof), &out, &errb); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"step_base_ns", "decode_per_seq_ns", "± ", "kv_cache_tokens", "not determined",
		"KV-usage gauge", "output_tok_s", "tpot_p99_ms", "wrote " + prof} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Fields(line); len(f) > 2 && strings.HasSuffix(f[0], ".parquet") && (f[0] == "c20.parquet") != (f[1] == "held") {
			t.Errorf("held-out mark wrong: %q", line)
		}
	}
	p, err := sim.ReadProfileFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if p.Config.MaxBatch != 10 || p.Config.StepBase < 1490*time.Microsecond || p.Config.StepBase > 1510*time.Microsecond ||
		p.Config.Model != "m" || len(p.Fit.Runs) != 4 || !p.Fit.Runs[3].Holdout || p.Fit.Runs[0].Holdout || len(p.Fit.Errors) != 4*len(twin.Figures) {
		t.Fatalf("profile: config %+v\nfit %+v", p.Config, p.Fit)
	}
	out.Reset()
	if err := run(context.Background(), []string{"sim", "--profile-file", prof, "--print-info"}, &out, &errb); err != nil {
		t.Fatalf("serving the fitted profile: %v", err)
	}
	if !strings.Contains(out.String(), `"max_batch": 10`) {
		t.Errorf("sim --profile-file of the fit does not serve its batch cap:\n%.500s", out.String())
	}
	for _, bad := range [][]string{{"sim", "fit", paths[0]}, {"sim", "fit", "-o", prof}, {"sim", "fit", paths[0], "-o", prof, "--base", "nope"}} {
		var ue *usageError
		if err := run(context.Background(), bad, &out, &errb); !errors.As(err, &ue) {
			t.Errorf("%v: got %v, want a usage error", bad, err)
		}
	}
}

// TestSimFitOnReplays runs `sim fit` on results files `replay` wrote against the
// in-process engine (one at a time, concurrency 4, and 24 past tiny's batch cap of 16),
// so that the fit reads what a replay really writes (its run metadata, closed loops, chunk
// offsets). Real-time stamps on a shared machine vary, so it asserts what the files
// decide, not the fitted times: every run read, listed and predicted.
func TestSimFitOnReplays(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "trace.parquet")
	var out, errb bytes.Buffer
	ctx := context.Background()
	if err := run(ctx, []string{"trace", "synth", "--rate", "100", "--count", "60", "--prompt-tokens", "uniform:50,1500",
		"--output-tokens", "uniform:10,40", "--seed", "7", "-o", tr}, &out, &errb); err != nil {
		t.Fatalf("trace synth: %v\n%s", err, errb.String())
	}
	var paths []string
	for _, c := range []string{"1", "4", "24"} {
		res := filepath.Join(dir, "c"+c+".parquet")
		if err := run(ctx, []string{"replay", "--trace", tr, "--sim-profile", "tiny", "--concurrency", c, "--quiet", "-o", res}, &out, &errb); err != nil {
			t.Fatalf("replay: %v\n%s", err, errb.String())
		}
		paths = append(paths, res)
	}
	prof := filepath.Join(dir, "twin.json")
	out.Reset()
	if err := run(ctx, append([]string{"sim", "fit", "-o", prof, "--holdout", paths[2]}, paths[:2]...), &out, &errb); err != nil {
		t.Fatalf("sim fit: %v\n%s", err, out.String())
	}
	p, err := sim.ReadProfileFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]bool{}
	for _, r := range p.Fit.Runs {
		runs[r.File] = r.Holdout
	}
	errs := map[string]int{}
	for _, e := range p.Fit.Errors {
		errs[e.Run]++
	}
	if len(runs) != 3 || !runs["c24.parquet"] || runs["c1.parquet"] || errs["c1.parquet"] == 0 || errs["c24.parquet"] == 0 || len(p.Fit.Params) == 0 {
		t.Fatalf("fit report: runs %v, errors per run %v, %d params\n%s", runs, errs, len(p.Fit.Params), out.String())
	}
	t.Log(out.String())
}
