package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestE2ESweepAgentsAgainstSim runs the agent sweep through the CLI: `trace synth
// --agent-sessions 8` makes 8 sessions of 4 chained calls (a 2,000-token first prompt, 500
// tokens appended per call, 150 output tokens, 500 ms tool gaps) whose recorded durations
// are modelled at 100,000 prefill and 84 decode tokens/s, about what the simulated
// moe-230b-8gpu engine gives one stream alone (docs/sim.md, "Profiles": 84.0 tok/s at batch
// 1); then `sweep --agents 1,8 --max-slowdown 1.3` against that engine in process. It
// checks what the sweep decided, not how fast the machine was: each point ran its count of
// sessions, every point carries the trace's recorded makespan (1.806 + 3·1.791 + 3·0.5 =
// 8.678 s, from the model), and the SLO limit is the one its points' session attainments
// give; a point the replayer could not keep on schedule (client-limited, as on a machine
// with CPU burners beside it) judges nothing, and the limit must say the client stopped it.
//
// Real time (about 25 s), it runs only with LLMREPLAY_E2E=1.
func TestE2ESweepAgentsAgainstSim(t *testing.T) {
	if os.Getenv("LLMREPLAY_E2E") == "" {
		t.Skip("real-time end-to-end test: set LLMREPLAY_E2E=1 (scripts/test does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	tr := filepath.Join(dir, "agents.parquet")
	if err := runTraceSynth(ctx, []string{"--agent-sessions", "8", "--rate", "1", "--agent-calls", "fixed:4",
		"--agent-first-prompt", "fixed:2000", "--agent-append", "fixed:500", "--output-tokens", "fixed:150",
		"--agent-tool-gap", "fixed:500", "--agent-prefill-rate", "100000", "--agent-decode-rate", "84", "--seed", "1", "-o", tr}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "sweep")
	var stdout bytes.Buffer
	args := []string{"--trace", tr, "--sim-profile", "moe-230b-8gpu", "--agents", "1,8", "--max-slowdown", "1.3", "--attainment", "90",
		"--cooldown", "0s", "--quiet", "--json", "-o", out}
	if err := runSweep(ctx, args, &stdout, io.Discard); err != nil {
		t.Fatalf("sweep: %v\n%s", err, stdout.String())
	}
	type bound struct {
		Found, Bracketed bool
		PassLoad         float64 `json:"pass_load"`
		FailLoad         float64 `json:"fail_load"`
		LimitedBy        string  `json:"limited_by"`
	}
	var got struct {
		Axis        string
		MaxSlowdown float64          `json:"max_slowdown"`
		Saturation  *json.RawMessage `json:"saturation"`
		SLOLimit    *bound           `json:"slo_limit"`
		Points      []struct {
			Load   float64 `json:"load"`
			Agents struct {
				Complete   float64 `json:"sessions_complete"`
				Incomplete float64 `json:"sessions_incomplete"`
				Recorded   struct {
					P50 float64 `json:"p50"`
				} `json:"recorded_makespan_s"`
				Slowdown struct {
					P50 float64 `json:"p50"`
				} `json:"slowdown"`
			} `json:"agents"`
			Attainment    float64 `json:"session_attainment"`
			ClientLimited bool    `json:"client_limited"`
		} `json:"points"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("sweep --json: %v\n%s", err, stdout.String())
	}
	t.Logf("sweep: %s", stdout.String())
	if got.Axis != "agents" || got.MaxSlowdown != 1.3 || got.SLOLimit == nil || got.Saturation != nil || len(got.Points) != 2 {
		t.Fatalf("sweep --json: axis %q, max_slowdown %v, slo_limit %v, saturation %v, %d points: want agents, 1.3, a limit, null, 2",
			got.Axis, got.MaxSlowdown, got.SLOLimit, got.Saturation, len(got.Points))
	}
	pass, client := map[float64]bool{}, map[float64]bool{}
	for _, p := range got.Points {
		if client[p.Load] = p.ClientLimited; p.ClientLimited {
			// The replayer could not keep its schedule (a busy machine): the point says
			// nothing about the engine, and the sweep must not judge the limit by it.
			t.Logf("agents %g was client-limited: the limit must not be judged by it", p.Load)
		}
		if n := p.Agents.Complete + p.Agents.Incomplete; n != p.Load {
			t.Errorf("agents %g: %g sessions ran", p.Load, n)
		}
		if r := p.Agents.Recorded.P50; math.Abs(r-8.678) > 1e-3 {
			t.Errorf("agents %g: recorded makespan p50 %v s, want the trace's 8.678", p.Load, r)
		}
		pass[p.Load] = p.Attainment >= 0.9
	}
	l := *got.SLOLimit
	switch {
	case client[1]:
		if l.Found || l.LimitedBy != "client" {
			t.Errorf("limit %+v, but agents 1 was client-limited: want none found, limited by the client", l)
		}
	case !pass[1]:
		if l.Found {
			t.Errorf("limit %+v, but agents 1 fails the objective", l)
		}
	case client[8]:
		if !l.Found || l.PassLoad != 1 || l.Bracketed || l.LimitedBy != "client" {
			t.Errorf("limit %+v: agents 1 passes and 8 was client-limited, want at least 1, limited by the client", l)
		}
	case pass[8]:
		if !l.Found || l.PassLoad != 8 || l.Bracketed {
			t.Errorf("limit %+v: both points pass, want at least 8", l)
		}
	default:
		if !l.Found || l.PassLoad != 1 || l.FailLoad != 8 {
			t.Errorf("limit %+v: want 1 (fails at 8)", l)
		}
	}
	for _, f := range []string{"sweep.parquet", "sweep.json", "sweep.txt", "sweep.html", "point-01-agents-1.parquet", "point-02-agents-8.parquet"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("sweep output: %v", err)
		}
	}
}
