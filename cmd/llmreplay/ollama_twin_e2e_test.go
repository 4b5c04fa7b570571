//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/internal/ollamatest"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/stats"
)

// TestOllamaTwin fits the simulated engine to the real one: three light closed-loop runs
// of one trace against Ollama with two slots (concurrency 1, whose requests each find
// the engine idle and whose prompts vary from 16 to 600 tokens, so prefill shows; 2, the
// slots; 3, one past them, where requests wait and the batch cap shows), and `sim fit`
// on them with two loads held out (4 and 8, past the slots, each run twice; the first
// run, made again last, is held out too, as the engine's own repeat). It asserts
// what the fit decides: the batch cap is determined and is Ollama's slot count, and the
// decode, attention and request-overhead terms are determined (attention is what a CPU's
// prefill grows by: tiny's base of 1 ns a pair is 500 times too small, and a fit that
// kept it predicted every TTFT a tenth of the measured; the overhead is the ~10 ms Ollama
// spends on a request before its runner schedules it, most of a short prompt's TTFT),
// and the prefill term too when Ollama held its speed (below).
//
// The figures: the twin's sustained output tok/s at the two held-out loads must be
// within 10% of Ollama's (the mean of the load's two runs), when the engine held its
// speed: its first run, at concurrency 1, made again at the end, is within 5% of the
// first time, and the load's two runs are within 5% of each other. On a busy
// machine Ollama does not repeat itself to 10% (TPOT p50 with the same two sequences
// decoding ranged from 1.23 to 1.62 ms between runs), and a held-out run then judges the
// machine: the test logs it and says why. The closed-loop knee (the
// concurrency after which doubling adds less than 10% throughput, as a closed-loop sweep
// finds it) is logged, Ollama's from the runs and the twin's from `llmreplay plan
// --concurrencies`: Ollama's gain from 1 to 2 workers was 0.3-10.0%, near the 10% that
// decides the knee, and the twin's 2-18 points more (its step cannot cost two sequences
// more than twice one), so the two knees are often a doubling apart. docs/sim.md, "How
// large the error was on each engine", has the figures of every repeat.
func TestOllamaTwin(t *testing.T) {
	srv := ollamatest.Start(t, ollamatest.Options{Parallel: 2})
	dir := t.TempDir()
	tr := filepath.Join(dir, "trace.parquet")
	mustRun(t, "trace", "synth", "--arrival", "poisson", "--rate", "4", "--duration", "120s",
		"--prompt-tokens", "uniform:16,600", "--output-tokens", "uniform:64,256", "--seed", "34", "-o", tr)
	loads := []int{1, 2, 3, 4, 8}
	runs := make([]string, len(loads))
	// Fitted and held-out runs alternate, so that a drift of the machine's speed over the
	// test (other work on its cores) falls on both alike.
	replay := func(name string, c int) string {
		path := filepath.Join(dir, name+".parquet")
		mustRun(t, "replay", "--trace", tr, "--endpoint", srv.BaseURL, "--model", ollamatest.Model,
			"--concurrency", fmt.Sprint(c), "--duration", "15s", "--quiet", "-o", path)
		return path
	}
	for _, i := range []int{0, 3, 1, 4, 2} {
		runs[i] = replay(fmt.Sprintf("c%d", loads[i]), loads[i])
	}
	// Each held-out load made twice, and the first run again, last: how far Ollama's own
	// speed moved over the test, and how far one run of a load is from another.
	repeats := []string{replay("c4-again", 4), replay("c8-again", 8)}
	again := replay("c1-again", 1)
	prof := filepath.Join(dir, "twin.json")
	args := append([]string{"sim", "fit"}, runs[:3]...)
	for _, h := range append(append(runs[3:], repeats...), again) {
		args = append(args, "--holdout", h)
	}
	if keep := os.Getenv("LLMREPLAY_OLLAMA_KEEP"); keep != "" {
		// The runs, to fit again with another build of `sim fit` (docs/sim.md).
		defer func() {
			if err := os.CopyFS(keep, os.DirFS(dir)); err != nil {
				t.Errorf("LLMREPLAY_OLLAMA_KEEP: %v", err)
			}
		}()
	}
	out := mustRun(t, append(args, "-o", prof)...)
	t.Logf("llmreplay sim fit c1 c2 c3 --holdout c4 --holdout c8 --holdout c4-again --holdout c8-again --holdout c1-again:\n%s", out)
	p, err := sim.ReadProfileFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	var prefill sim.FitParam
	for _, q := range p.Fit.Params {
		switch q.Name {
		case "prefill_per_token_ns":
			prefill = q // judged below, when Ollama held its speed
		case "max_batch":
			if !q.Determined || q.Value != float64(srv.Options.Parallel) {
				t.Errorf("max_batch %g (determined %v); want Ollama's %d slots, determined: concurrency 3 made a request wait at the cap",
					q.Value, q.Determined, srv.Options.Parallel)
			}
		case "decode_per_seq_ns", "attention_per_pair_ns", "request_overhead_ns":
			if !q.Determined {
				t.Errorf("%s: not determined (%s)", q.Name, q.Advice)
			}
		}
	}
	tokS := map[string][2]float64{}
	for _, e := range p.Fit.Errors {
		if e.Figure == "output_tok_s" {
			tokS[e.Run] = [2]float64{e.Measured, e.Predicted}
		}
	}
	measured, predicted := make([]stats.SweepPoint, len(loads)), make([]stats.SweepPoint, len(loads))
	// steady: Ollama repeated its first run's tok/s within 5% at the end of the test, so
	// it held its speed through it and the held-out runs judge the twin, not the machine.
	first, last := tokS[filepath.Base(runs[0])][0], tokS[filepath.Base(again)][0]
	drift := (last - first) / first
	steady := math.Abs(drift) <= 0.05
	t.Logf("Ollama's own repeat: concurrency 1 did %.1f sustained output tok/s first and %.1f last (%+.1f%%)", first, last, 100*drift)
	// The prefill term, told from the overhead by the prefills beside decodes at 2 and 3,
	// is determined when Ollama held its speed (the TTFTs at 1 are then of the engine
	// the gaps at 2 and 3 saw).
	switch {
	case steady && !prefill.Determined:
		t.Errorf("prefill_per_token_ns: not determined (%s)", prefill.Advice)
	case !prefill.Determined:
		t.Logf("prefill_per_token_ns not determined, not judged: Ollama's speed moved through the test (%+.1f%%)", 100*drift)
	}
	figures := func(path string) [2]float64 {
		f, ok := tokS[filepath.Base(path)]
		if !ok {
			t.Fatalf("sim fit stated no output_tok_s error for %s", filepath.Base(path))
		}
		return f
	}
	for i, c := range loads {
		f := figures(runs[i])
		if i >= 3 {
			// A held-out load's figure is the mean of its two runs, judged when they
			// agree within 5%: one 15 s run of Ollama at the slots' cap moved by up to 9%
			// from another (1,010 and 1,098 tok/s at 8 and 4 in one test), a machine's
			// hiccup that c1's repeat does not see.
			g := figures(repeats[i-3])
			spread := math.Abs(f[0]-g[0]) / ((f[0] + g[0]) / 2)
			f = [2]float64{(f[0] + g[0]) / 2, (f[1] + g[1]) / 2}
			rel := (f[1] - f[0]) / f[0]
			t.Logf("held out at concurrency %d: the twin predicts %.1f sustained output tok/s, Ollama did %.1f (%+.1f%%; its two runs %.1f%% apart)", c, f[1], f[0], 100*rel, 100*spread)
			switch {
			case steady && spread <= 0.05 && !(math.Abs(rel) <= 0.10):
				t.Errorf("held out at concurrency %d: the twin's sustained output tok/s is %+.1f%% off Ollama's, beyond 10%% (Ollama repeated itself within %.1f%% at the end and %.1f%% at this load)", c, 100*rel, 100*math.Abs(drift), 100*spread)
			case !steady:
				t.Logf("not judged: Ollama did not repeat its first run within 5%% (%+.1f%%): its speed moved through the test (a busy machine), so a held-out run would judge the machine, not the twin", 100*drift)
			case spread > 0.05:
				t.Logf("not judged: Ollama's two runs at concurrency %d are %.1f%% apart, beyond 5%%: a held-out figure would judge the machine's moment, not the twin", c, 100*spread)
			}
		}
		measured[i] = stats.SweepPoint{Load: float64(c), SustainedTokensPerSecond: f[0]}
		predicted[i] = stats.SweepPoint{Load: float64(c), SustainedTokensPerSecond: f[1]}
	}
	// The knee as a closed-loop sweep finds it, on its ladder of doublings: Ollama's from
	// the runs at 1, 2, 4 and 8, the twin's from `llmreplay plan` on the concurrency axis.
	minGain := stats.KneeOptions{}.WithDefaults().MinGain
	ladder := []stats.SweepPoint{measured[0], measured[1], measured[3], measured[4]}
	mk := stats.SaturationOf(ladder, minGain)
	var pl struct {
		Saturation struct {
			Found    bool    `json:"found"`
			PassLoad float64 `json:"pass_load"`
		} `json:"saturation"`
		Probes []struct {
			Load      float64 `json:"load"`
			Sustained float64 `json:"sustained_output_tokens_per_s"`
		} `json:"probes"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "plan", "--trace", tr, "--profile", prof, "--concurrencies", "1,2,4,8", "--json")), &pl); err != nil {
		t.Fatal(err)
	}
	var probes []string
	for _, p := range pl.Probes {
		probes = append(probes, fmt.Sprintf("%g: %.1f tok/s", p.Load, p.Sustained))
	}
	t.Logf("knee: Ollama's at concurrency %g (found %v; %s), the twin's (llmreplay plan --concurrencies) at %g (found %v; %s); the twin's predictions of the five runs: %s; not asserted, see the test's comment",
		mk.Pass, mk.Found, describe(ladder), pl.Saturation.PassLoad, pl.Saturation.Found, strings.Join(probes, ", "), describe(predicted))
}

func describe(pts []stats.SweepPoint) string {
	var s []string
	for _, p := range pts {
		s = append(s, fmt.Sprintf("%g: %.1f tok/s", p.Load, p.SustainedTokensPerSecond))
	}
	return strings.Join(s, ", ")
}
