package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/sweep"
)

func TestSweepUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--speedups", "1,2"}, "-o DIR is required"},
		{[]string{"-o", dir}, "exactly one of"},
		{[]string{"-o", dir, "--speedups", "1,2", "--rates", "3"}, "exactly one of"},
		{[]string{"-o", dir, "--speedups", "1,-2"}, "must be positive"},
		{[]string{"-o", dir, "--speedup", "2", "--speedups", "1"}, "give --speedups"},
		{[]string{"-o", dir, "--auto", "--auto-axis", "users"}, "--auto-axis"},
		{[]string{"-o", dir, "--auto", "--auto-axis", "concurrency", "--start", "1.5"}, "whole numbers"},
		{[]string{"-o", dir, "--auto", "--auto-axis", "concurrency", "--max", "100.5"}, "whole numbers"},
		{[]string{"-o", dir, "--concurrencies", "1,2", "--min-gain", "0"}, "--min-gain"},
		{[]string{"-o", dir, "--auto", "--auto-axis", "concurrency", "--min-gain", "1.5"}, "--min-gain"},
		{[]string{"-o", dir, "--auto", "--start", "10", "--max", "5"}, "max load"},
		{[]string{"-o", dir, "--rates", "1", "--attainment", "0"}, "--attainment"},
		{[]string{"-o", dir, "--rates", "1", "--scrape", "http://u:pw@h:9/metrics"}, "--scrape http://h:9/metrics carries credentials"},
		{[]string{"-o", dir, "--rates", "1", "--scrape", "ftp://h/metrics"}, "--scrape \"ftp://h/metrics\": scheme"},
		{[]string{"-o", dir, "--agents", "1,2", "--auto"}, "exactly one of"},
		{[]string{"-o", dir, "--agents", "1,2", "--concurrencies", "4"}, "exactly one of"},
		{[]string{"-o", dir, "--auto", "--auto-axis", "agents"}, "--auto does not search the agents axis"},
		{[]string{"-o", dir, "--agents", "1", "--agent-sessions", "2"}, "--agent-sessions is set per point: give --agents instead"},
		{[]string{"-o", dir, "--speedups", "1", "--max-slowdown", "1.2"}, "--max-slowdown judges agent sessions"},
		{[]string{"-o", dir, "--agents", "1,2", "--max-slowdown", "-1"}, "--max-slowdown -1"},
		{[]string{"-o", dir, "--agents", "1,0"}, "must be positive"},
	} {
		err := runSweep(context.Background(), tc.args, io.Discard, io.Discard)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sweep %q: got %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
	// A bad replay option is refused before the sweep makes its folder or sends a request.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rates", "1,2", "--max-inflight", "0"}, "--max-inflight 0"},
		{[]string{"--auto", "--sim-profile", "nope"}, "--sim-profile"},
		{[]string{"--concurrencies", "1", "--prompt-format", "token-ids", "--api", "chat"}, "token-ids"},
		{[]string{"--speedups", "1", "--slo", "ttft=fast"}, "--slo"},
		{[]string{"--agents", "1,2", "--slo", "ttft=1s"}, "give --max-slowdown instead"},
		{[]string{"--agents", "1,2", "--limit", "10"}, "drop --limit"},
		{[]string{"--agents", "1,2", "--max-slowdown", "1.2"}, "has no agent sessions"}, // the bundled sample
	} {
		out := filepath.Join(dir, "never-made-"+tc.want)
		err := runSweep(context.Background(), append(tc.args, "-o", out), io.Discard, io.Discard)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sweep %q: got %v, want a usage error containing %q", tc.args, err, tc.want)
		}
		if _, serr := os.Stat(out); !os.IsNotExist(serr) {
			t.Errorf("sweep %q: made %s before refusing its options", tc.args, out)
		}
	}
	if err := runSweep(context.Background(), []string{"--resume", t.TempDir()}, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "sweep-state.json") {
		t.Errorf("resume of an empty dir: got %v, want an error naming the state file", err)
	}
}

// TestSweepResume: a sweep whose state lists one finished point of two continues with only
// the missing one, keeping the finished point's results file, and reports both.
func TestSweepResume(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two short replays")
	}
	dir := filepath.Join(t.TempDir(), "sw")
	common := []string{"--limit", "15", "--cooldown", "0s", "--prewarm", "2", "-o", dir}
	var errb bytes.Buffer
	if err := runSweep(context.Background(), append([]string{"--speedups", "40"}, common...), io.Discard, &errb); err != nil {
		t.Fatalf("first sweep: %v\n%s", err, errb.String())
	}
	// As if the sweep had been started over two loads and interrupted after the first.
	st, err := sweep.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	st.Args = append([]string{"--speedups", "40,80"}, common...)
	if err := st.Write(dir); err != nil {
		t.Fatal(err)
	}
	if err := runSweep(context.Background(), []string{"--speedups", "40"}, io.Discard, io.Discard); err == nil {
		t.Error("a second sweep into the same directory without --resume was accepted")
	}
	errb.Reset()
	var out bytes.Buffer
	if err := runSweep(context.Background(), []string{"--resume", dir, "--json"}, &out, &errb); err != nil {
		t.Fatalf("resume: %v\n%s", err, errb.String())
	}
	log := errb.String()
	if !strings.Contains(log, "kept speedup 40") || strings.Contains(log, "point 2: speedup 40") || !strings.Contains(log, "point 2: speedup 80") {
		t.Errorf("resume did not keep 40 and run only 80:\n%s", log)
	}
	var got struct {
		Points []struct {
			Load float64 `json:"load"`
			File string  `json:"file"`
		} `json:"points"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got.Points) != 2 || got.Points[0].Load != 40 || got.Points[1].Load != 80 {
		t.Fatalf("resumed sweep points %+v (%v)\n%s", got.Points, err, out.String())
	}
	for _, p := range got.Points {
		if _, err := os.Stat(filepath.Join(dir, p.File)); err != nil {
			t.Errorf("point file: %v", err)
		}
		// Each point's replay scraped the in-process engine, beside its results.
		if _, err := os.Stat(results.MetricsPath(filepath.Join(dir, p.File))); err != nil {
			t.Errorf("point metrics file: %v", err)
		}
	}
}

// stopOnWrite is a stderr that calls stop once it has been written want. Writes come from
// several goroutines (the progress line, the stop message), as os.Stderr takes them.
type stopOnWrite struct {
	mu sync.Mutex
	bytes.Buffer
	want string
	stop func()
}

func (w *stopOnWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	n, err := w.Buffer.Write(p)
	seen := strings.Contains(w.Buffer.String(), w.want)
	w.mu.Unlock()
	if seen {
		w.stop()
	}
	return n, err
}

// TestSweepGracefulStop: a graceful stop (main's first signal) during a sweep's second
// point ends that point, drops its file, keeps the finished point and says how to resume.
func TestSweepGracefulStop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a short replay")
	}
	dir := filepath.Join(t.TempDir(), "sw")
	ctx, stop, abort := replay.WithStop(context.Background())
	defer abort()
	errb := &stopOnWrite{want: "point 2: speedup 80", stop: stop}
	err := runSweep(ctx, []string{"--speedups", "40,80", "--limit", "15", "--cooldown", "0s", "--prewarm", "2", "--model", "sim-tiny", "-o", dir}, io.Discard, errb)
	if err == nil || !strings.Contains(err.Error(), "sweep: interrupted after 1 points") {
		t.Fatalf("sweep: %v, want interrupted after 1 point\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "llmreplay: stopping: no more requests") {
		t.Errorf("no stop message:\n%s", errb.String())
	}
	st, err := sweep.ReadState(dir)
	if err != nil || len(st.Points) != 1 || st.Points[0].Load != 40 {
		t.Fatalf("state after the stop: %+v, %v", st, err)
	}
	// The finished point's results and metrics files; nothing of the interrupted one.
	files, _ := filepath.Glob(filepath.Join(dir, "point-*"))
	if len(files) != 2 || filepath.Base(files[1]) != st.Points[0].File || files[0] != results.MetricsPath(files[1]) {
		t.Errorf("point files %v, want only %s and its metrics file", files, st.Points[0].File)
	}
}

// TestSweepAutoConcurrencyPlumbing: `sweep --auto --auto-axis concurrency` runs the
// doubling search (closed-loop points 1, 2, 4 at most, against the in-process engine)
// and reports a closed-loop sweep: --min-gain, no offered columns.
func TestSweepAutoConcurrencyPlumbing(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three short replays")
	}
	dir := filepath.Join(t.TempDir(), "sw")
	var out, errb bytes.Buffer
	err := runSweep(context.Background(), []string{"--auto", "--auto-axis", "concurrency", "--max", "4", "--min-gain", "0.2",
		"--limit", "12", "--cooldown", "0s", "--json", "-o", dir}, &out, &errb)
	if err != nil {
		t.Fatalf("sweep: %v\n%s", err, errb.String())
	}
	var got struct {
		Axis    string   `json:"axis"`
		Auto    bool     `json:"auto"`
		MinGain *float64 `json:"min_gain"`
		Points  []map[string]any
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	// Points this short say little about throughput: the search may stop after 2 (saturated at 1).
	if got.Axis != "concurrency" || !got.Auto || got.MinGain == nil || *got.MinGain != 0.2 || len(got.Points) < 2 {
		t.Fatalf("sweep JSON: %+v\n%s", got, out.String())
	}
	for i, p := range got.Points {
		if p["load"] != float64(int(1)<<i) {
			t.Errorf("point %d at load %v, want %d", i, p["load"], 1<<i)
		}
		if _, ok := p["offered_output_tokens_per_s"]; ok {
			t.Errorf("point %d has an offered load", i)
		}
		if _, ok := p["per_user"]; !ok {
			t.Errorf("point %d has no per-user speed", i)
		}
	}
	if !strings.Contains(errb.String(), "point 2: concurrency 2") || !strings.Contains(errb.String(), "per user") {
		t.Errorf("no closed-loop point 2:\n%s", errb.String())
	}
}

// TestSweepPointsSendFreshPrompts: every point of a sweep replays the same trace, so
// without a seed of its own a later point would send the prompts an earlier one sent, and
// an engine with automatic prefix caching (the simulated engine's, vLLM's default) would
// serve them from cache. Against the simulated engine with its cache on, three points
// with text and with token-id prompts leave the cache without a single hit, and each
// point's run metadata records its seed.
func TestSweepPointsSendFreshPrompts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs six short replays")
	}
	for _, format := range []string{"text", "token-ids"} {
		t.Run(format, func(t *testing.T) {
			cfg, _ := sim.Profile("tiny")
			cfg.TimeScale = 20
			s, err := sim.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			srv := httptest.NewServer(s.Handler())
			defer srv.Close()
			dir := filepath.Join(t.TempDir(), "sw")
			var errb bytes.Buffer
			err = runSweep(context.Background(), []string{"--endpoint", srv.URL + "/v1", "--speedups", "20,40,80", "--limit", "20",
				"--prompt-format", format, "--seed", "5", "--cooldown", "0s", "--idle-check=false", "--prewarm", "2", "-o", dir}, io.Discard, &errb)
			if err != nil {
				t.Fatalf("sweep: %v\n%s", err, errb.String())
			}
			resp, err := http.Get(srv.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			page, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			queries, hits := metricValue(string(page), "vllm:prefix_cache_queries_total"), metricValue(string(page), "vllm:prefix_cache_hits_total")
			if queries < 60*16 || hits != 0 {
				t.Errorf("prefix cache after three points of 20 requests: %v tokens queried, %v hit; want >= %d queried and no hit", queries, hits, 60*16)
			}
			st, err := sweep.ReadState(dir)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range st.Points {
				d, err := analysis.Load(context.Background(), decode.LoadOptions{}, filepath.Join(dir, p.File))
				if err != nil {
					t.Fatal(err)
				}
				if got, want := d.Runs[0].Flags["seed"], strconv.FormatUint(5+uint64(i)<<40, 10); got != want { // points 2^40 apart
					t.Errorf("point %d: run metadata seed %q, want %q", i+1, got, want)
				}
			}
		})
	}
}

// metricValue sums the samples of a metric in a Prometheus text page, whatever their labels.
func metricValue(page, name string) float64 {
	var sum float64
	for _, line := range strings.Split(page, "\n") {
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			fields := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
			if len(fields) > 0 {
				f, _ := strconv.ParseFloat(fields[0], 64)
				sum += f
			}
		}
	}
	return sum
}
