package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/internal/repeat"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/sweep"
)

func TestRepeatRejected(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--repeat", "0"}, "--repeat 0"},
		{[]string{"--repeat", "300"}, "--repeat 300"},
		{[]string{"--repeat", "2", "--start-at", "2099-01-01T00:00:00Z"}, "--start-at"},
		{[]string{"--repeat", "2", "--shard", "0/2"}, "--shard 0/2"},
		{[]string{"--repeat", "2", "--cooldown", "-1s"}, "--cooldown"},
	} {
		err := runReplay(context.Background(), c.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("replay %v: error %v, want one naming %s", c.args, err, c.want)
		}
	}
}

// simServer serves the tiny simulated engine, its prefix cache on, 20 times faster.
func simServer(t *testing.T) *httptest.Server {
	t.Helper()
	cfg, _ := sim.Profile("tiny")
	cfg.TimeScale = 20
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

// TestReplayRepeats: three repeats send fresh prompts (the engine's prefix cache is never
// hit), carry their place in the group in their run metadata, and analyze reports the
// figures across them, in text and JSON.
func TestReplayRepeats(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three short replays")
	}
	srv := simServer(t)
	out := filepath.Join(t.TempDir(), "res.parquet")
	var stdout, stderr bytes.Buffer
	err := runReplay(context.Background(), []string{"--endpoint", srv.URL + "/v1", "--speedup", "20", "--limit", "20", "--seed", "5",
		"--repeat", "3", "--cooldown", "0s", "--prewarm", "2", "-q", "-o", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr.String())
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	queries, hits := metricValue(string(page), "vllm:prefix_cache_queries_total"), metricValue(string(page), "vllm:prefix_cache_hits_total")
	if queries < 60*16 || hits != 0 {
		t.Errorf("prefix cache after three repeats of 20 requests: %v tokens queried, %v hit; want >= %d queried and no hit", queries, hits, 60*16)
	}
	var group string
	var files []string
	for r := 1; r <= 3; r++ {
		p := repeat.Path(out, r, 3)
		files = append(files, p)
		d, err := analysis.Load(context.Background(), decode.LoadOptions{}, p)
		if err != nil {
			t.Fatal(err)
		}
		m := d.Runs[0]
		if r == 1 {
			group = m.RunID
		}
		if m.Repeat != r || m.RepeatCount != 3 || m.RepeatGroup != group || group == "" {
			t.Errorf("repeat %d: metadata repeat %d of %d, group %q; want %d of 3, group %q", r, m.Repeat, m.RepeatCount, m.RepeatGroup, r, group)
		}
		if want := strconv.FormatUint(5+uint64(r-1)<<repeat.SeedShift, 10); m.Flags["seed"] != want {
			t.Errorf("repeat %d: seed %q, want %s", r, m.Flags["seed"], want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s written: the repeats' files are named per repeat", out)
	}
	if s := stdout.String(); !strings.Contains(s, "Repeats: 3 of 3, group "+group) || !strings.Contains(s, repeat.Glob(out, 3)) {
		t.Errorf("replay did not print the report across repeats and the files' glob:\n%s", s)
	}

	// analyze of the three files: the pooled figures and the median across repeats.
	var js bytes.Buffer
	if err := runAnalyze(context.Background(), append([]string{"--json"}, files...), &js, io.Discard); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Throughput struct {
			Sustained *float64 `json:"sustained_output_tokens_per_s"`
		} `json:"throughput"`
		Repeats struct {
			Group   string `json:"group"`
			Count   int    `json:"repeat_count"`
			Repeats []int  `json:"repeats"`
			Figures map[string]struct {
				Pooled, Median, Min, Max *float64
				Values                   []*float64
			} `json:"figures"`
		} `json:"repeats"`
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Repeats.Group != group || got.Repeats.Count != 3 || !slices.Equal(got.Repeats.Repeats, []int{1, 2, 3}) {
		t.Errorf("repeats: %+v", got.Repeats)
	}
	// Each repeat's figure is its own report's; the pooled sustained rate weighs each
	// repeat by its window's length.
	var num, den float64
	var sus []float64
	for i, f := range files {
		d, err := analysis.Load(context.Background(), decode.LoadOptions{}, f)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := analysis.Analyze(d, analysis.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		th := rep.Throughput
		num += th.SustainedOutputTokensPerS * (th.WindowEndS - th.WindowStartS)
		den += th.WindowEndS - th.WindowStartS
		sus = append(sus, th.SustainedOutputTokensPerS)
		fig := got.Repeats.Figures["ttft_p99_ms"]
		if v := fig.Values[i]; v == nil || math.Abs(*v-rep.TTFT.P99) > 1e-9 {
			t.Errorf("repeat %d: ttft_p99_ms value %v, want its report's %v", i+1, deref(v), rep.TTFT.P99)
		}
	}
	slices.Sort(sus)
	fig := got.Repeats.Figures["sustained_output_tokens_per_s"]
	if fig.Pooled == nil || math.Abs(*fig.Pooled-num/den) > 1e-6 || got.Throughput.Sustained == nil || *got.Throughput.Sustained != *fig.Pooled {
		t.Errorf("pooled sustained %v (report %v), want %v", deref(fig.Pooled), deref(got.Throughput.Sustained), num/den)
	}
	if fig.Median == nil || *fig.Median != sus[1] || *fig.Min != sus[0] || *fig.Max != sus[2] {
		t.Errorf("sustained median %v min %v max %v, want %v", deref(fig.Median), deref(fig.Min), deref(fig.Max), sus)
	}
	// The HTML report carries the table.
	htmlPath := filepath.Join(t.TempDir(), "r.html")
	if err := runAnalyze(context.Background(), append([]string{"--html", htmlPath}, files...), io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(htmlPath); !strings.Contains(string(b), "<h2>Repeats: 3 of 3, group "+group) {
		t.Errorf("the HTML report has no repeats table")
	}
	// Files of one repeat alone are one run: no repeats key.
	js.Reset()
	if err := runAnalyze(context.Background(), []string{"--json", files[0]}, &js, io.Discard); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(js.String(), `"repeats"`) {
		t.Errorf("one repeat's report has a repeats key")
	}
}

// TestReplayRepeatsStop: a stop (Ctrl-C) after repeat 1 keeps it and runs no more.
func TestReplayRepeatsStop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a short replay")
	}
	srv := simServer(t)
	out := filepath.Join(t.TempDir(), "res.parquet")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Stop once repeat 1's file exists: during the (long) cooldown before repeat 2.
		for ctx.Err() == nil {
			if _, err := os.Stat(repeat.Path(out, 1, 3)); err == nil {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var stdout bytes.Buffer
	err := runReplay(ctx, []string{"--endpoint", srv.URL + "/v1", "--speedup", "20", "--limit", "10",
		"--repeat", "3", "--cooldown", "10m", "--prewarm", "2", "-q", "-o", out}, &stdout, io.Discard)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if _, err := os.Stat(repeat.Path(out, 1, 3)); err != nil {
		t.Errorf("repeat 1 not kept: %v", err)
	}
	for _, r := range []int{2, 3} {
		if _, err := os.Stat(repeat.Path(out, r, 3)); err == nil {
			t.Errorf("repeat %d ran after the stop", r)
		}
	}
	if !strings.Contains(stdout.String(), "stopped: repeats 1 to 1 of 3 kept") {
		t.Errorf("no stop notice:\n%s", stdout.String())
	}
}

// TestSweepRepeats: every repeat of every point sends fresh prompts (seed + (n−1)·2^40 +
// (r−1)·2^32), the state lists each point's repeats, and each point's row is its median
// repeat's.
func TestSweepRepeats(t *testing.T) {
	if testing.Short() {
		t.Skip("runs six short replays")
	}
	srv := simServer(t)
	dir := filepath.Join(t.TempDir(), "sw")
	var errb bytes.Buffer
	err := runSweep(context.Background(), []string{"--endpoint", srv.URL + "/v1", "--speedups", "20,40", "--limit", "20",
		"--seed", "5", "--repeat", "3", "--cooldown", "0s", "--idle-check=false", "--prewarm", "2", "-o", dir}, io.Discard, &errb)
	if err != nil {
		t.Fatalf("sweep: %v\n%s", err, errb.String())
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if hits := metricValue(string(page), "vllm:prefix_cache_hits_total"); hits != 0 {
		t.Errorf("prefix cache: %v hits over six runs; want none", hits)
	}
	st, err := sweep.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Points) != 2 {
		t.Fatalf("state: %d points, want 2", len(st.Points))
	}
	var js bytes.Buffer
	if err := runSweep(context.Background(), []string{"--resume", dir, "--json"}, &js, io.Discard); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if s := js.String(); !strings.Contains(s, `"saturation_bracket"`) || !strings.Contains(s, `"intervals"`) {
		t.Errorf("sweep JSON of repeated points has no intervals or knee bracket:\n%s", s)
	}
	if !strings.Contains(errb.String(), "3 repeats: sustained") {
		t.Errorf("no repeated point's progress line:\n%s", errb.String())
	}
	var rep struct {
		Points []struct {
			Load      float64 `json:"load"`
			Sustained float64 `json:"sustained_output_tokens_per_s"`
		} `json:"points"`
	}
	if err := json.Unmarshal(js.Bytes(), &rep); err != nil || len(rep.Points) != len(st.Points) {
		t.Fatalf("sweep JSON points %+v (%v)", rep.Points, err)
	}
	for i, p := range st.Points {
		if want := repeat.Path(p.File, 3, 3); len(p.Repeats) != 3 || p.Repeats[2] != want {
			t.Fatalf("point %d: repeats %v, want 3 ending in %s", i+1, p.Repeats, want)
		}
		var sus []float64
		var group string
		for r, f := range p.Repeats {
			d, err := analysis.Load(context.Background(), decode.LoadOptions{}, filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			m := d.Runs[0]
			if r == 0 {
				group = m.RunID
			}
			want := strconv.FormatUint(5+uint64(i)<<40+uint64(r)<<repeat.SeedShift, 10) // points 2^40 apart
			if m.Flags["seed"] != want || m.Repeat != r+1 || m.RepeatCount != 3 || m.RepeatGroup != group {
				t.Errorf("point %d repeat %d: seed %s, repeat %d of %d, group %q; want seed %s, %d of 3, group %q",
					i+1, r+1, m.Flags["seed"], m.Repeat, m.RepeatCount, m.RepeatGroup, want, r+1, group)
			}
			row, err := sweep.NewRow("speedup", p.Load, f, d, analysis.DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			sus = append(sus, row.Point().SustainedTokensPerSecond)
		}
		slices.Sort(sus)
		if got := rep.Points[i]; got.Load != p.Load || got.Sustained != sus[1] {
			t.Errorf("point %d: row at %v sustained %v, want at %v the median repeat's %v (of %v)", i+1, got.Load, got.Sustained, p.Load, sus[1], sus)
		}
	}
}

// deref prints a JSON number that may be null.
func deref(v *float64) any {
	if v == nil {
		return "null"
	}
	return *v
}

// TestReplayRepeatsStrict: --strict fails (status 3) once every repeat ran, not at the
// first client-limited one.
func TestReplayRepeatsStrict(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two short replays")
	}
	srv := simServer(t)
	out := filepath.Join(t.TempDir(), "res.parquet")
	err := runReplay(context.Background(), []string{"--endpoint", srv.URL + "/v1", "--speedup", "20", "--limit", "10",
		"--repeat", "2", "--cooldown", "0s", "--prewarm", "2", "-q", "--strict", "--max-lateness", "1ns", "-o", out}, io.Discard, io.Discard)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 3 {
		t.Fatalf("replay --strict of client-limited repeats: %v, want exit status 3", err)
	}
	if _, err := os.Stat(repeat.Path(out, 2, 2)); err != nil {
		t.Errorf("repeat 2 did not run after repeat 1 was client-limited: %v", err)
	}
}

// TestReplayRepeatsOutputs: with no -o the repeats are named after the run's start
// (results-<UTC>.rK.parquet); a second repeated run in the same folder gets new names; an
// -o whose second repeat's file exists is refused before any repeat runs.
func TestReplayRepeatsOutputs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs short replays")
	}
	srv := simServer(t)
	t.Chdir(t.TempDir())
	args := []string{"--endpoint", srv.URL + "/v1", "--speedup", "20", "--limit", "5", "--repeat", "2", "--cooldown", "0s", "--prewarm", "2", "-q"}
	for range 2 {
		if err := runReplay(context.Background(), args, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob("results-*Z*.r?.parquet")
	if len(files) != 4 {
		t.Fatalf("two repeated runs with no -o wrote %v, want 4 distinct files", files)
	}
	os.WriteFile("mine.r2.parquet", []byte("x"), 0o644)
	err := runReplay(context.Background(), append(args, "-o", "mine.parquet"), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "mine.r2.parquet: file exists") {
		t.Fatalf("an existing repeat file: %v", err)
	}
	if _, err := os.Stat("mine.r1.parquet"); err == nil {
		t.Error("repeat 1 ran although repeat 2's file was refused")
	}
}
