package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/twintest"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
)

// TestE2ETwinRecoversAndPredicts is the twin's proof over HTTP. For engines drawn at
// random around tiny, each written as a profile file the fit is not told, it replays with
// the real CLI against the in-process simulated engine served from that file (real HTTP
// on loopback, chunks dated by the kernel's receive stamps as from any endpoint; every
// run scrapes the engine's /metrics): three light runs (one request at a time with prompts of 100-3,000
// tokens; conversations in a closed loop at concurrency 3, whose prompts share prefixes;
// a closed loop 4 past the batch cap) and two it holds out (a closed loop at twice the
// cap, past the knee, and an open loop at 85% of the rate that one served). `sim fit`
// must determine step_base, decode_per_seq, prefill_per_token and max_batch; every
// determined parameter must be within 3 of its stated standard errors of the truth or
// within 10% of it (a parameter stated without an error, exactly); the held-out
// sustained output tok/s within 5% and TTFT p50 within 10% of the measured.
//
// The standard errors are the fit's own, from its residuals: over HTTP on a shared
// machine a decode gap carries some 0.4-0.75 ms of timer and scheduling noise (40 µs in
// twin's in-package proof), so decode_per_seq and attention come with errors of 10-40%
// of their value, and the 10% alone would fail an honest fit. On a machine too busy to
// give the engine the CPU on time (two CPU burners) its tokens leave in bursts and the
// runs are not of the engine drawn: the test measures that (burstShare), and what the fit
// got wrong on such runs is reported in a skip, not as a failure.
// docs/sim.md, "How large the error was on each engine", has the figures. Real time, about 20 s a seed, so it runs
// only with LLMREPLAY_E2E=1.
func TestE2ETwinRecoversAndPredicts(t *testing.T) {
	if os.Getenv("LLMREPLAY_E2E") == "" {
		t.Skip("real-time end-to-end test: set LLMREPLAY_E2E=1 (scripts/test does)")
	}
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { twinProofHTTP(t, seed) })
	}
}

// okRows reads the results file at path, every request of which must be ok: a failed one
// held the engine too, and the fit would not see it.
func okRows(t *testing.T, path string) []results.Result {
	t.Helper()
	rows, _, err := results.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Status != results.StatusOK {
			t.Fatalf("%s: request %d: %s", path, r.RequestID, r.Status)
		}
	}
	return rows
}

// reqPerSec is how many requests a second the run at path completed, over the span from
// its first send to its last end.
func reqPerSec(t *testing.T, path string) float64 {
	t.Helper()
	rows := okRows(t, path)
	first, last := int64(math.MaxInt64), int64(0)
	for _, r := range rows {
		first, last = min(first, r.SentNS), max(last, r.EndNS)
	}
	return float64(len(rows)) / time.Duration(last-first).Seconds()
}

// maxBursts is the largest burst share (burstShare) of a run past which the engine's
// process was starved of the CPU: two CPU burners made 1.6-31% and broke the fit; an
// idle machine makes under 2% on most runs (14% once on a one-at-a-time run whose fit
// held).
const maxBursts = 0.05

// burstShare is the share of a run's gaps between consecutive chunks of a request that
// are under a fifth of the shortest step the engine takes: tokens that left the engine in
// a burst, late. The replayer's chunk times are the kernel's receive stamps, so a
// large share says the engine's process did not get the CPU on time (the machine is
// busy), which is where the fit's decode and prefill terms lose their precision.
func burstShare(t *testing.T, path string, step time.Duration) float64 {
	t.Helper()
	rows := okRows(t, path)
	n, short := 0, 0
	for _, r := range rows {
		for k := 1; k < len(r.ChunkNS); k++ {
			n++
			if time.Duration(r.ChunkNS[k]-r.ChunkNS[k-1]) < step/5 {
				short++
			}
		}
	}
	return float64(short) / float64(max(n, 1))
}

// twinProofHTTP is one seed's proof: its engine, five replays, the fit and the checks.
func twinProofHTTP(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 34))
	cfg := twintest.Engine(rng)
	dir := t.TempDir()
	prof := filepath.Join(dir, "truth.json")
	if err := sim.WriteProfileFile(prof, sim.ProfileFile{Format: sim.ProfileFormat, Version: sim.ProfileVersion, Name: "truth", Config: cfg}); err != nil {
		t.Fatal(err)
	}
	t.Logf("truth: step_base %v decode_per_seq %v context_per_token %v prefill_per_token %v attention %.3g ns max_batch %d block %d request_overhead %v",
		cfg.StepBase, cfg.DecodePerSeq, cfg.ContextPerToken, cfg.PrefillPerToken, cfg.AttentionPerPairNs, cfg.MaxBatch, cfg.PrefixBlockTokens, cfg.RequestOverhead)
	// One trace per run shape, seeded by the test's seed.
	synth := func(name string, rate string, count int, prompts, outputs string) string {
		p := filepath.Join(dir, name+"-trace.parquet")
		mustRun(t, "trace", "synth", "--arrival", "poisson", "--rate", rate, "--count", fmt.Sprint(count),
			"--prompt-tokens", prompts, "--output-tokens", outputs, "--seed", fmt.Sprint(seed+1), "-o", p)
		return p
	}
	bursts := 0.0 // the largest burst share of a run
	replay := func(name, tr string, extra ...string) string {
		res := filepath.Join(dir, name+".parquet")
		start := time.Now()
		mustRun(t, append([]string{"replay", "--trace", tr, "--sim-profile", prof, "--quiet", "--scrape-interval", "100ms", "-o", res}, extra...)...)
		b := burstShare(t, res, cfg.StepBase+cfg.DecodePerSeq)
		bursts = max(bursts, b)
		t.Logf("%s: %v; %.1f%% of its chunk gaps under a fifth of the shortest step", name, time.Since(start).Round(time.Millisecond), 100*b)
		return res
	}
	b := cfg.MaxBatch
	solo := replay("solo", synth("solo", "1", 30, "uniform:100,3000", "uniform:10,60"), "--concurrency", "1")
	// Conversations, so that prompts share prefixes of varied lengths and the server says
	// how many tokens it read from its cache: the prefix cache and its block size.
	conv := filepath.Join(dir, "c3-trace.parquet")
	mustRun(t, "trace", "synth", "--rate", "1", "--count", "90", "--turns", "uniform:2,4", "--sessions", "8",
		"--prompt-tokens", "uniform:50,800", "--output-tokens", "uniform:20,120", "--prompt-max", "4000", "--seed", fmt.Sprint(seed+1), "-o", conv)
	c3 := replay("c3", conv, "--concurrency", "3")
	capRun := replay("cap", synth("cap", "1", 4*b, "uniform:50,800", "uniform:20,80"), "--concurrency", fmt.Sprint(b+4))
	knee := replay("knee", synth("knee", "1", 10*b, "uniform:50,1500", "uniform:20,120"), "--concurrency", fmt.Sprint(2*b))
	// The open loop's rate is 85% of the requests a second the engine served past its
	// knee, so that it runs near capacity whatever engine was drawn.
	rate := 0.85 * reqPerSec(t, knee)
	open := replay("open", synth("open", fmt.Sprintf("%.2f", rate), int(5*rate), "uniform:50,1500", "uniform:20,120"))

	// What the proof finds wrong: failures, unless the runs were of a starved engine
	// (below).
	var problems []string
	fail := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	defer func() {
		if len(problems) == 0 || t.Failed() {
			return
		}
		if bursts > maxBursts {
			// The runs are then of a starved engine, not of the one drawn: what the fit
			// made of them proves nothing either way.
			t.Skipf("up to %.0f%% of a run's chunk gaps were bursts (an idle machine: under 2%%): the engine's process did not get the CPU on time, so the runs do not measure the engine drawn, and what the fit made of them is not checked: %s; rerun on a machine with a core to spare (docs/sim.md, \"How large the error was on each engine\")",
				100*bursts, strings.Join(problems, "; "))
		}
		for _, p := range problems {
			t.Error(p)
		}
	}()
	twin := filepath.Join(dir, "twin.json")
	out := mustRun(t, "sim", "fit", solo, c3, capRun, "--holdout", open, "--holdout", knee, "-o", twin)
	t.Logf("llmreplay sim fit solo c3 cap --holdout open --holdout knee:\n%s", out)
	p, err := sim.ReadProfileFile(twin)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"step_base_ns": float64(cfg.StepBase), "decode_per_seq_ns": float64(cfg.DecodePerSeq),
		"context_per_token_ns": float64(cfg.ContextPerToken), "prefill_per_token_ns": float64(cfg.PrefillPerToken),
		"attention_per_pair_ns": cfg.AttentionPerPairNs, "max_batch": float64(cfg.MaxBatch), "prefix_cache": 1,
		"prefix_block_tokens": float64(cfg.PrefixBlockTokens), "kv_cache_tokens": float64(cfg.KVCacheTokens)}
	// The overhead fitted is the engine's and the client's HTTP time beside it: logged
	// against the engine's, not bounded by it.
	over := float64(cfg.RequestOverhead)
	for _, q := range p.Fit.Params {
		w, ok := want[q.Name]
		switch {
		case !q.Determined:
			t.Logf("%s = %g (not determined: %s)", q.Name, q.Value, q.Advice)
			continue
		case q.Name == "request_overhead_ns":
			t.Logf("%s = %g ± %g (the engine's %g, and %.2f ms of HTTP and parsing)", q.Name, q.Value, q.StdErr, over, (q.Value-over)/1e6)
			continue
		case !ok:
			// A term the drawn engine has no truth for (the engine's own, outside the
			// step model: HTTP and parsing): logged, not bounded.
			t.Logf("%s = %g ± %g (no truth drawn)", q.Name, q.Value, q.StdErr)
			continue
		}
		d := math.Abs(q.Value - w)
		if q.StdErr > 0 {
			t.Logf("%s = %g ± %g (truth %g: %+.2f%%, %.1f standard errors)", q.Name, q.Value, q.StdErr, w, 100*(q.Value-w)/w, d/q.StdErr)
		} else {
			t.Logf("%s = %g (truth %g)", q.Name, q.Value, w)
		}
		switch {
		case q.StdErr == 0 && d != 0:
			// Stated without an error (the batch cap, the prefix cache and its block):
			// the fit claims the value exactly.
			fail("%s = %g, truth %g: stated exactly, and wrong", q.Name, q.Value, w)
		case d > 3*q.StdErr && d > 0.1*w:
			fail("%s = %g ± %g, truth %g: neither within 3 standard errors nor within 10%%", q.Name, q.Value, q.StdErr, w)
		}
		delete(want, q.Name)
	}
	for _, name := range []string{"step_base_ns", "decode_per_seq_ns", "prefill_per_token_ns", "max_batch"} {
		if _, left := want[name]; left {
			fail("%s not determined by the three runs", name)
		}
	}
	checked := 0
	for _, e := range p.Fit.Errors {
		if e.Run != "open.parquet" && e.Run != "knee.parquet" {
			continue
		}
		t.Logf("held out %s %s: measured %.3f, predicted %.3f (%+.2f%%)", e.Run, e.Figure, e.Measured, e.Predicted, 100*e.RelErr)
		bound := map[string]float64{"output_tok_s": 0.05, "ttft_p50_ms": 0.10}[e.Figure]
		if bound == 0 {
			continue
		}
		checked++
		if !(math.Abs(e.RelErr) <= bound) {
			fail("held-out %s %s: measured %g, predicted %g: error %+.1f%% beyond %g%%", e.Run, e.Figure, e.Measured, e.Predicted, 100*e.RelErr, 100*bound)
		}
	}
	if checked != 4 {
		fail("sim fit stated %d of the 4 held-out errors the test bounds (output_tok_s and ttft_p50_ms of open and knee)", checked)
	}
}
