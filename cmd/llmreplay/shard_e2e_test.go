package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/trace"
)

// TestE2EShards runs three shard processes of one run against a simulated engine in its
// own process, then the same trace in one process, and checks that
//   - the shards' records are exactly the trace: every request once, none twice;
//   - every request was due at the same offset from the run start as in the single run;
//   - the shards share one run (run_id, run start) and analyze merges them into figures
//     that match the single run's within the tolerances below.
func TestE2EShards(t *testing.T) {
	if os.Getenv("LLMREPLAY_E2E") == "" {
		t.Skip("real-time end-to-end test: set LLMREPLAY_E2E=1 (scripts/test does)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "llmreplay")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The engine, in its own process: tiny decodes ~7k tok/s, 5x what the trace asks.
	endpoint, stop := startSimProcess(t, ctx, bin, "tiny")
	defer stop()
	const n = 600
	tracePath := filepath.Join(dir, "t.parquet")
	writeShardTrace(t, tracePath, n)

	run := func(args ...string) *exec.Cmd {
		// Independent sessions: every request due at its trace time, so the shards' schedule
		// must equal the single run's to the nanosecond. (Sequential sessions, the default for
		// a trace with sessions, make a later turn due when its predecessor's answer ends,
		// which differs from run to run.)
		cmd := exec.CommandContext(ctx, bin, append([]string{"replay", "--trace", tracePath, "--endpoint", endpoint, "-q", "--sessions", "independent"}, args...)...)
		return cmd
	}
	startAt := time.Now().Add(3 * time.Second)
	var shards []string
	var cmds []*exec.Cmd
	for i := 0; i < 3; i++ {
		out := filepath.Join(dir, fmt.Sprintf("shard-%d.parquet", i))
		shards = append(shards, out)
		cmd := run("--shard", fmt.Sprintf("%d/3", i), "--start-at", strconv.FormatInt(startAt.Unix(), 10)+"."+fmt.Sprintf("%09d", startAt.Nanosecond()), "-o", out)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
	}
	// Each shard scrapes the engine's /metrics by default, into a file named after its own.
	for i, sh := range shards {
		_, meta, err := results.ReadFile(sh)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(results.MetricsPath(sh)); err != nil || meta.MetricsFile != fmt.Sprintf("shard-%d.metrics.parquet", i) {
			t.Errorf("shard %d: metrics file %q: %v", i, meta.MetricsFile, err)
		}
	}
	single := filepath.Join(dir, "single.parquet")
	if out, err := run("-o", single).CombinedOutput(); err != nil {
		t.Fatalf("single run: %v\n%s", err, out)
	}
	checkShardPartition(t, shards, single, startAt, n)
	checkShardAnalysis(t, ctx, shards, single, n)
}

// startSimProcess starts `llmreplay sim` of the given profile in its own process and
// returns the endpoint it says it listens at, and a stop that interrupts it and waits.
func startSimProcess(t *testing.T, ctx context.Context, bin, profile string) (endpoint string, stop func()) {
	t.Helper()
	simCmd := exec.CommandContext(ctx, bin, "sim", "--addr", "127.0.0.1:0", "--profile", profile)
	simErr, _ := simCmd.StderrPipe()
	if err := simCmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() { simCmd.Process.Signal(os.Interrupt); simCmd.Wait() }
	sc := bufio.NewScanner(simErr)
	re := regexp.MustCompile(`at (http://127\.0\.0\.1:\d+/v1)`)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			endpoint = m[1]
			break
		}
	}
	if endpoint == "" {
		stop()
		t.Fatal("the simulated engine did not say where it listens")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	return endpoint, stop
}

// writeShardTrace writes n Poisson arrivals at 40 req/s (15 s for 600), 64-token prompts,
// 20 output tokens, in 2-turn sessions half the time so that the session rule of the
// partition is exercised.
func writeShardTrace(t *testing.T, path string, n int) {
	t.Helper()
	w, err := trace.Create(path, trace.Meta{Source: "synth"})
	if err != nil {
		t.Fatal(err)
	}
	rng := uint64(42)
	var at time.Duration
	for i := 0; i < n; i++ {
		rng = rng*6364136223846793005 + 1442695040888963407
		u := (float64(rng>>11) + 0.5) / (1 << 53)
		at += time.Duration(-math.Log(u) / 40 * 1e9)
		r := trace.Request{ID: int64(i), Arrival: at, PromptTokens: 64, OutputTokens: 20}
		if i%2 == 0 {
			r.SessionID, r.HasSession = int64(i/4), true
		}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkShardPartition checks the partition and the schedule: the shards' records are the n
// requests of the single run, each once, each due at the single run's offset, and the
// shards share one run start, the one --start-at gave.
func checkShardPartition(t *testing.T, shards []string, single string, startAt time.Time, n int) {
	t.Helper()
	singleRes, _, err := results.ReadFile(single)
	if err != nil {
		t.Fatal(err)
	}
	due := map[int64]int64{}
	for _, r := range singleRes {
		due[r.RequestID] = r.ScheduledNS
	}
	if len(due) != n {
		t.Fatalf("single run recorded %d requests, the trace has %d", len(due), n)
	}
	seen := map[int64]int{}
	var runStart int64
	for i, path := range shards {
		res, meta, err := results.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if meta.ShardIndex != i || meta.ShardCount != 3 {
			t.Errorf("%s: shard %d/%d in its metadata", path, meta.ShardIndex, meta.ShardCount)
		}
		if i == 0 {
			runStart = meta.RunStartUnixNS
		} else if meta.RunStartUnixNS != runStart {
			t.Errorf("%s: run start %d, shard 0's %d", path, meta.RunStartUnixNS, runStart)
		}
		if meta.RunStartUnixNS != startAt.UnixNano() {
			t.Errorf("%s: run start %d, --start-at %d", path, meta.RunStartUnixNS, startAt.UnixNano())
		}
		for _, r := range res {
			if prev, dup := seen[r.RequestID]; dup {
				t.Fatalf("request %d sent by shards %d and %d", r.RequestID, prev, i)
			}
			seen[r.RequestID] = i
			if r.ScheduledNS != due[r.RequestID] {
				t.Errorf("request %d due at %d ns in shard %d, at %d ns in the single run", r.RequestID, r.ScheduledNS, i, due[r.RequestID])
			}
		}
	}
	if len(seen) != n {
		t.Fatalf("the shards recorded %d distinct requests, the trace has %d", len(seen), n)
	}
}

// checkShardAnalysis checks that analyze merges the shards into figures that match the
// single run's within the tolerances below.
func checkShardAnalysis(t *testing.T, ctx context.Context, shards []string, single string, n int) {
	t.Helper()
	analyse := func(paths ...string) *analysis.Report {
		d, err := analysis.Load(ctx, decode.LoadOptions{}, paths...)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := analysis.Analyze(d, analysis.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	merged, one := analyse(shards...), analyse(single)
	if merged.Requests.Total != int64(n) || merged.Requests.OK != one.Requests.OK {
		t.Errorf("merged: %d requests, %d ok; single: %d ok", merged.Requests.Total, merged.Requests.OK, one.Requests.OK)
	}
	within := func(name string, got, want, rel, abs float64) {
		if math.Abs(got-want) > math.Max(rel*math.Abs(want), abs) {
			t.Errorf("%s: merged shards %.3f, single run %.3f: apart by more than %.0f%% (or %.1f)", name, got, want, rel*100, abs)
		}
	}
	// Throughput follows the schedule, identical in both: 3%. Latencies are a few ms on
	// this engine, so they get an absolute allowance for scheduling noise on 2 cores.
	within("output tok/s", merged.Throughput.OutputTokensPerS, one.Throughput.OutputTokensPerS, 0.03, 0)
	within("requests/s", merged.Throughput.RequestsPerS, one.Throughput.RequestsPerS, 0.03, 0)
	within("TTFT p50 ms", merged.TTFT.P50, one.TTFT.P50, 0.25, 3)
	within("TPOT p50 ms", merged.TPOT.P50, one.TPOT.P50, 0.25, 1)
	within("E2E p50 ms", merged.E2E.P50, one.E2E.P50, 0.25, 5)
	t.Logf("merged: %.1f tok/s, TTFT p50 %.2f ms, TPOT p50 %.2f ms; single: %.1f tok/s, TTFT p50 %.2f ms, TPOT p50 %.2f ms",
		merged.Throughput.OutputTokensPerS, merged.TTFT.P50, merged.TPOT.P50, one.Throughput.OutputTokensPerS, one.TTFT.P50, one.TPOT.P50)
}

func TestParseStartAt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // unix ns; 0 = error
	}{
		{"2026-12-02T15:00:00Z", 1796223600 * 1e9},
		{"2026-12-02T15:00:00.000000123Z", 1796223600*1e9 + 123},
		{"1796223600", 1796223600 * 1e9},
		{"1796223600.5", 1796223600*1e9 + 5e8},
		{"1796223600.000000001", 1796223600*1e9 + 1},
		{"1796223600.0000000001", 0},
		{"-5", 0},
		{"soon", 0},
		{"1796223600.-5", 0},
	} {
		got, err := replay.ParseStartAt(tc.in)
		if tc.want == 0 {
			if err == nil {
				t.Errorf("replay.ParseStartAt(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got.UnixNano() != tc.want {
			t.Errorf("replay.ParseStartAt(%q) = %v (%d), %v; want %d", tc.in, got, got.UnixNano(), err, tc.want)
		}
	}
}
