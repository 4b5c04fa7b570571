//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"math"
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
// on them with two runs held out at higher loads (4 and 8, past the slots). It asserts
// what the fit decides: the batch cap is determined and is Ollama's slot count, and the
// decode, attention and request-overhead terms are determined (attention is what a CPU's
// prefill grows by: tiny's base of 1 ns a pair is 500 times too small, and a fit that
// kept it predicted every TTFT a tenth of the measured; the overhead is the ~8 ms Ollama
// spends on a request before its runner schedules it, most of a short prompt's TTFT).
//
// It computes and logs, and does not assert, the figures: the twin's sustained
// output tok/s on the two held-out runs against the measured, and the closed-loop knee
// (the concurrency after which doubling adds less than 10% throughput,
// stats.SaturationOf, as a closed-loop sweep finds it) of the five measured runs against
// the twin's predictions of them. They are timed figures of a real engine on a shared
// machine, and on the development VM Ollama did not repeat itself to 10%: its TPOT p50
// with the same two sequences decoding ranged from 1.23 to 1.54 ms between the runs of
// one test, so a held-out error was within 10% in some repeats and up to 15% in others,
// and the measured knee moved between 1 and 2 with it. What the twin leaves out is
// smaller and steady: about 10 ms Ollama spends on each request outside its engine's
// steps (TTFT p50 at concurrency 1 and 2 under-predicted by 15-34%). docs/sim.md, "How
// large the error was on each engine", has the figures of every repeat.
func TestOllamaTwin(t *testing.T) {
	srv := ollamatest.Start(t, ollamatest.Options{Parallel: 2})
	dir := t.TempDir()
	tr := filepath.Join(dir, "trace.parquet")
	ollamaRun(t, "trace", "synth", "--arrival", "poisson", "--rate", "4", "--duration", "120s",
		"--prompt-tokens", "uniform:16,600", "--output-tokens", "uniform:64,256", "--seed", "34", "-o", tr)
	loads := []int{1, 2, 3, 4, 8}
	runs := make([]string, len(loads))
	// Fitted and held-out runs alternate, so that a drift of the machine's speed over the
	// test (other work on its cores) falls on both alike.
	for _, i := range []int{0, 3, 1, 4, 2} {
		runs[i] = filepath.Join(dir, fmt.Sprintf("c%d.parquet", loads[i]))
		ollamaRun(t, "replay", "--trace", tr, "--endpoint", srv.BaseURL, "--model", ollamatest.Model,
			"--concurrency", fmt.Sprint(loads[i]), "--duration", "15s", "--quiet", "-o", runs[i])
	}
	prof := filepath.Join(dir, "twin.json")
	args := append([]string{"sim", "fit"}, runs[:3]...)
	args = append(args, "--holdout", runs[3], "--holdout", runs[4], "-o", prof)
	out := ollamaRun(t, args...)
	t.Logf("llmreplay sim fit c1 c2 c3 --holdout c4 --holdout c8:\n%s", out)
	p, err := sim.ReadProfileFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range p.Fit.Params {
		switch q.Name {
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
	for i, c := range loads {
		f, ok := tokS[filepath.Base(runs[i])]
		if !ok {
			t.Fatalf("sim fit stated no output_tok_s error for %s", filepath.Base(runs[i]))
		}
		measured[i] = stats.SweepPoint{Load: float64(c), SustainedTokensPerSecond: f[0]}
		predicted[i] = stats.SweepPoint{Load: float64(c), SustainedTokensPerSecond: f[1]}
		if i >= 3 {
			rel := (f[1] - f[0]) / f[0]
			t.Logf("held out at concurrency %d: the twin predicts %.1f sustained output tok/s, Ollama did %.1f (%+.1f%%; within 10%%: %v; not asserted, see the test's comment)",
				c, f[1], f[0], 100*rel, math.Abs(rel) <= 0.10)
		}
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
	if err := json.Unmarshal([]byte(ollamaRun(t, "plan", "--trace", tr, "--profile", prof, "--concurrencies", "1,2,4,8", "--json")), &pl); err != nil {
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
