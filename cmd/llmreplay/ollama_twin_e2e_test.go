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
// on them with two runs held out at higher loads (4 and 8, past the slots; the first run,
// made again last, is held out too, as the engine's own repeat). It asserts
// what the fit decides: the batch cap is determined and is Ollama's slot count, and the
// decode, attention and request-overhead terms are determined (attention is what a CPU's
// prefill grows by: tiny's base of 1 ns a pair is 500 times too small, and a fit that
// kept it predicted every TTFT a tenth of the measured; the overhead is the ~8 ms Ollama
// spends on a request before its runner schedules it, most of a short prompt's TTFT).
//
// The figures: the twin's sustained output tok/s on the two held-out runs must be
// within 10% of Ollama's, when the engine held its speed through the test: its first run,
// at concurrency 1, made again at the end, is within 5% of the first time. On a busy
// machine Ollama does not repeat itself to 10% (TPOT p50 with the same two sequences
// decoding ranged from 1.23 to 1.62 ms between runs), and a held-out run then judges the
// machine: the test logs it and says why. The closed-loop knee (the
// concurrency after which doubling adds less than 10% throughput, as a closed-loop sweep
// finds it) is logged, Ollama's from the runs and the twin's from `llmreplay plan
// --concurrencies`: Ollama's gain from 1 to 2 workers is 6-8%, near the 10% that decides
// the knee, so a twin 3% off there can put it a doubling away. docs/sim.md, "How large
// the error was on each engine", has the figures of every repeat.
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
	// The first run again, last: how far Ollama's own speed moved over the test.
	again := replay("c1-again", 1)
	prof := filepath.Join(dir, "twin.json")
	args := append([]string{"sim", "fit"}, runs[:3]...)
	args = append(args, "--holdout", runs[3], "--holdout", runs[4], "--holdout", again, "-o", prof)
	out := mustRun(t, args...)
	t.Logf("llmreplay sim fit c1 c2 c3 --holdout c4 --holdout c8 --holdout c1-again:\n%s", out)
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
	// steady: Ollama repeated its first run's tok/s within 5% at the end of the test, so
	// it held its speed through it and the held-out runs judge the twin, not the machine.
	first, last := tokS[filepath.Base(runs[0])][0], tokS[filepath.Base(again)][0]
	drift := (last - first) / first
	steady := math.Abs(drift) <= 0.05
	t.Logf("Ollama's own repeat: concurrency 1 did %.1f sustained output tok/s first and %.1f last (%+.1f%%)", first, last, 100*drift)
	for i, c := range loads {
		f, ok := tokS[filepath.Base(runs[i])]
		if !ok {
			t.Fatalf("sim fit stated no output_tok_s error for %s", filepath.Base(runs[i]))
		}
		measured[i] = stats.SweepPoint{Load: float64(c), SustainedTokensPerSecond: f[0]}
		predicted[i] = stats.SweepPoint{Load: float64(c), SustainedTokensPerSecond: f[1]}
		if i >= 3 {
			rel := (f[1] - f[0]) / f[0]
			t.Logf("held out at concurrency %d: the twin predicts %.1f sustained output tok/s, Ollama did %.1f (%+.1f%%)", c, f[1], f[0], 100*rel)
			switch {
			case steady && !(math.Abs(rel) <= 0.10):
				t.Errorf("held out at concurrency %d: the twin's sustained output tok/s is %+.1f%% off Ollama's, beyond 10%% (Ollama repeated itself within %.1f%%)", c, 100*rel, 100*math.Abs(drift))
			case !steady:
				t.Logf("not judged: Ollama did not repeat its first run within 5%% (%+.1f%%): its speed moved through the test (a busy machine), so a held-out run would judge the machine, not the twin", 100*drift)
			}
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
