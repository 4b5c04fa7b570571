package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmreplay/llmreplay/sim"
)

// TestE2ECompareSlowerDecode replays one closed-loop workload (8 users, 64-token prompts,
// 128-token outputs) against the tiny simulated engine at time scale 0.1 (A) and at
// 0.1/1.1 (B: every step 10% slower). B's TPOT is 10% longer and, the loop being closed,
// its throughput 1/1.1 − 1 = −9.1% lower: compare must call both significant with
// intervals holding those true changes to within tol. The intervals come from the
// requests of each run (±0.05 points for TPOT) and cannot hold what differs between the
// two runs themselves: the sim's step timers fire a few µs late, more on a loaded machine,
// which at time scale 0.1 (steps of about a millisecond) shifts a run's TPOT by a few
// tenths of a percent (CI with two CPU burners: tpot_p50 +10.0% [+10.0%, +10.1%], the
// truth 0.05 points below the interval).
func TestE2ECompareSlowerDecode(t *testing.T) {
	if os.Getenv("LLMREPLAY_E2E") == "" {
		t.Skip("real-time end-to-end test: set LLMREPLAY_E2E=1 (scripts/test does)")
	}
	dir := t.TempDir()
	ctx := context.Background()
	var out, errb bytes.Buffer
	tr := filepath.Join(dir, "trace.parquet")
	if err := run(ctx, []string{"trace", "synth", "--arrival", "constant", "--rate", "50", "--count", "2000",
		"--prompt-tokens", "fixed:64", "--output-tokens", "fixed:128", "--seed", "1", "-o", tr}, &out, &errb); err != nil {
		t.Fatalf("trace synth: %v\n%s", err, errb.String())
	}
	files := map[string]string{}
	for _, v := range []struct {
		name  string
		scale float64
	}{{"a", 0.1}, {"b", 0.1 / 1.1}} {
		cfg, err := sim.Profile("tiny")
		if err != nil {
			t.Fatal(err)
		}
		cfg.TimeScale = v.scale
		sctx, cancel := context.WithCancel(ctx)
		srv, err := sim.Start(sctx, "127.0.0.1:0", cfg)
		if err != nil {
			t.Fatal(err)
		}
		files[v.name] = filepath.Join(dir, v.name+".parquet")
		err = run(ctx, []string{"replay", "--trace", tr, "--endpoint", srv.BaseURL(), "--model", srv.Info().Config.Model,
			"--concurrency", "8", "--duration", "20s", "--prompt-format", "token-ids", "--quiet", "-o", files[v.name]}, &out, &errb)
		srv.Close()
		cancel()
		if err != nil {
			t.Fatalf("replay %s: %v\n%s", v.name, err, errb.String())
		}
	}
	out.Reset()
	if err := run(ctx, []string{"compare", files["a"], files["b"], "--json"}, &out, &errb); err != nil {
		t.Fatalf("compare: %v\n%s", err, errb.String())
	}
	var c struct {
		Sections []struct {
			Figures []struct {
				Key     string
				Changes []struct {
					Delta       float64
					Lo          float64 `json:"ci_lo"`
					Hi          float64 `json:"ci_hi"`
					Significant bool
				}
			}
		}
	}
	if err := json.Unmarshal(out.Bytes(), &c); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"tpot_p50_ms": 10, "sustained_output_tokens_per_s": 100*(1/1.1) - 100}
	const tol = 0.5 // percentage points
	for _, f := range c.Sections[0].Figures {
		ch := f.Changes[0]
		t.Logf("%-30s %+6.1f%% [%+6.1f%%, %+6.1f%%] significant %v", f.Key, ch.Delta, ch.Lo, ch.Hi, ch.Significant)
		if w, ok := want[f.Key]; ok && (!ch.Significant || w < ch.Lo-tol || w > ch.Hi+tol) {
			t.Errorf("%s: %+.2f%% [%+.2f%%, %+.2f%%], want significant and holding %+.2f%% to within %.1f points", f.Key, ch.Delta, ch.Lo, ch.Hi, w, tol)
		}
	}
}
