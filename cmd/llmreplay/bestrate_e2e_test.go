package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmreplay/llmreplay/replay/results"
)

// TestE2EBestRateBound replays a `trace synth --turns` trace with prefix blocks against the
// in-process simulated engine (its prefix cache on) in independent and in sequential mode
// (actual history), and checks that the hit rate analyze measures never passes the best
// rate the run recorded, and that the rule named is the mode's. Before the actual-history
// rule, the sequential run measured about 78% against a "best" of 58%.
func TestE2EBestRateBound(t *testing.T) {
	if os.Getenv("LLMREPLAY_E2E") == "" {
		t.Skip("real-time end-to-end test: set LLMREPLAY_E2E=1 (scripts/test does)")
	}
	dir := t.TempDir()
	tr := filepath.Join(dir, "conv.parquet")
	ctx := context.Background()
	var out, errb bytes.Buffer
	if err := run(ctx, []string{"trace", "synth", "--arrival", "poisson", "--rate", "8", "--duration", "12s",
		"--prompt-tokens", "uniform:50,200", "--output-tokens", "uniform:50,300", "--turns", "uniform:2,6",
		"--sessions", "16", "--block-tokens", "16", "--seed", "3", "-o", tr}, &out, &errb); err != nil {
		t.Fatalf("trace synth: %v\n%s", err, errb.String())
	}
	for _, tc := range []struct{ mode, rule string }{
		{"independent", results.ReusableBlocks},
		{"sequential", results.ReusableHistory},
	} {
		res := filepath.Join(dir, tc.mode+".parquet")
		out.Reset()
		errb.Reset()
		if err := run(ctx, []string{"replay", "--trace", tr, "--sim-profile", "tiny", "--speedup", "2", "--sessions", tc.mode,
			"--quiet", "-o", res}, &out, &errb); err != nil {
			t.Fatalf("%s: replay: %v\n%s", tc.mode, err, errb.String())
		}
		out.Reset()
		if err := run(ctx, []string{"analyze", res, "--json"}, &out, &errb); err != nil {
			t.Fatalf("%s: analyze: %v\n%s", tc.mode, err, errb.String())
		}
		var rep struct {
			Requests struct {
				Total, OK int64
			} `json:"requests"`
			Conversations *struct {
				PrefixCache struct {
					Requests int64    `json:"requests"`
					HitRate  *float64 `json:"hit_rate"`
					BestRate *float64 `json:"best_rate"`
					BestRule *string  `json:"best_rate_rule"`
				} `json:"prefix_cache"`
			} `json:"conversations"`
			Warnings []string `json:"warnings"`
		}
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%s: analyze --json: %v", tc.mode, err)
		}
		if rep.Conversations == nil {
			t.Fatalf("%s: no conversations section", tc.mode)
		}
		pc := rep.Conversations.PrefixCache
		if rep.Requests.OK != rep.Requests.Total || pc.Requests != rep.Requests.OK || pc.HitRate == nil || pc.BestRate == nil || pc.BestRule == nil {
			t.Fatalf("%s: requests %+v, prefix_cache %+v", tc.mode, rep.Requests, pc)
		}
		t.Logf("%s: %d requests, hit rate %.4f, best %.4f (%s)", tc.mode, pc.Requests, *pc.HitRate, *pc.BestRate, *pc.BestRule)
		if *pc.BestRule != tc.rule {
			t.Errorf("%s: best rate rule %q, want %q", tc.mode, *pc.BestRule, tc.rule)
		}
		if *pc.HitRate > *pc.BestRate {
			t.Errorf("%s: measured hit rate %.4f passes the best the replay allows, %.4f", tc.mode, *pc.HitRate, *pc.BestRate)
		}
		if *pc.HitRate < 0.5 {
			t.Errorf("%s: measured hit rate %.4f: the engine's cache did not work, the bound was not tested", tc.mode, *pc.HitRate)
		}
	}
}
