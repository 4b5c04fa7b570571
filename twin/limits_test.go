package twin

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis/scraped"
	"github.com/llmreplay/llmreplay/internal/prom"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
)

// TestFitKVFromGauge: a run whose metrics file has the KV-usage gauge (the tokens its
// admitted requests held, prefilling or decoding, over a capacity the fit is not told,
// with 1% noise, every 20 ms) and the waiting gauge determines kv_cache_tokens within 3
// standard errors and 2% (counting only the decoding requests came out 5-8% low); without the gauge the same
// run leaves it undetermined with advice, raised to what the run held.
func TestFitKVFromGauge(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cfg, _ := sim.Profile("tiny")
	const capacity = 23_000
	reqs := workload(rng, 120, 0, 200, 1500, 40, 160)
	res, err := sim.Simulate(cfg, reqs, 12)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "kv.parquet")
	meta := results.RunMeta{ToolVersion: "test", RunID: "kv", Mode: results.ModeClosed, Concurrency: 12, Model: "m", ShardCount: 1, Speedup: 1,
		Flags: map[string]string{}, Scrape: []string{"http://127.0.0.1:1/metrics"}, ScrapeIntervalNS: int64(20 * time.Millisecond), MetricsFile: "kv.metrics.parquet"}
	if err := WriteResults(path, meta, reqs, res, nil); err != nil {
		t.Fatal(err)
	}
	writeMetrics(t, path, meta, res, func(at time.Duration) []prom.Sample {
		// At concurrency 12 under tiny's batch cap of 16 nothing waits: a request holds its
		// KV from its arrival (prefilling, then decoding) to its end.
		held := 0
		for i, r := range res {
			if r.Arrival < at && r.End >= at {
				held += reqs[i].Prompt + reqs[i].Output
			}
		}
		return []prom.Sample{{Name: "vllm:kv_cache_usage_perc", Type: "gauge", Value: float64(held) / capacity * (1 + 0.01*rng.NormFloat64())},
			{Name: "vllm:num_requests_waiting", Type: "gauge", Value: 0}}
	})
	run, err := ReadRun(context.Background(), path, false)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg
	p := fitKV([]Run{run}, &c)
	if !p.Determined || math.Abs(p.Value-capacity) > 3*p.StdErr || math.Abs(p.Value-capacity) > 0.02*capacity || c.KVCacheTokens != int(p.Value) {
		t.Fatalf("kv_cache_tokens %+v (config %d), truth %d", p, c.KVCacheTokens, capacity)
	}
	run.Gauges = [scraped.NRoles][]scraped.Point{}
	c = cfg
	c.KVCacheTokens = 9000
	p = fitKV([]Run{run}, &c)
	if p.Determined || p.Advice == "" || c.KVCacheTokens <= 9000 {
		t.Fatalf("without the gauge: %+v, config %d", p, c.KVCacheTokens)
	}
}

// writeMetrics writes the metrics file of the run at path: every 20 ms up to the run's
// last token, the samples gauges gives.
func writeMetrics(t *testing.T, path string, meta results.RunMeta, res []sim.SimResult, gauges func(at time.Duration) []prom.Sample) {
	t.Helper()
	j, err := results.CreateMetricsJournal(results.MetricsPath(path)+".journal", &meta)
	if err != nil {
		t.Fatal(err)
	}
	var end time.Duration
	for _, r := range res {
		end = max(end, r.End)
	}
	for at := time.Duration(0); at < end; at += 20 * time.Millisecond {
		up := results.ScrapeRows("", time.Millisecond, 1)
		if err := j.AddSamples(int64(at), meta.Scrape[0], gauges(at), up[:]); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := results.ConvertMetricsJournal(results.MetricsPath(path)+".journal", results.MetricsPath(path)); err != nil {
		t.Fatal(err)
	}
}

// TestFitMaxBatchFromWaitingGauge: a run at concurrency = max_batch, whose TTFTs show no
// wait, leaves max_batch undetermined from the results alone; a waiting gauge saying
// requests waited while the batch was at its peak (written by the test, as an engine
// limited by something the twin does not see would report it) determines it.
func TestFitMaxBatchFromWaitingGauge(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	cfg, _ := sim.Profile("tiny")
	cfg.MaxBatch = 6
	reqs := workload(rng, 40, 0, 100, 400, 60, 120)
	for i := range reqs {
		reqs[i].PrefixID, reqs[i].SharedPrefix = 0, 0
	}
	res, err := sim.Simulate(cfg, reqs, 6)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "w.parquet")
	meta := results.RunMeta{ToolVersion: "test", RunID: "w", Mode: results.ModeClosed, Concurrency: 6, Model: "m", ShardCount: 1, Speedup: 1,
		Flags: map[string]string{}, Scrape: []string{"http://127.0.0.1:1/metrics"}, ScrapeIntervalNS: int64(20 * time.Millisecond), MetricsFile: "w.metrics.parquet"}
	if err := WriteResults(path, meta, reqs, res, nil); err != nil {
		t.Fatal(err)
	}
	writeMetrics(t, path, meta, res, func(at time.Duration) []prom.Sample {
		return []prom.Sample{{Name: "vllm:num_requests_waiting", Type: "gauge", Value: 1}}
	})
	run, err := ReadRun(context.Background(), path, false)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg
	if p := fitMaxBatch([]Run{run}, &c); !p.Determined || p.Value != 6 || c.MaxBatch != 6 {
		t.Fatalf("with the waiting gauge: %+v", p)
	}
	run.Gauges = [scraped.NRoles][]scraped.Point{}
	c = cfg
	if p := fitMaxBatch([]Run{run}, &c); p.Determined || p.Advice == "" {
		t.Fatalf("without the gauge: %+v", p)
	}
}

// TestReadRunRefuses: a shard of a run, and a file without a streamed generation, are
// refused with the file named; a run whose outputs are all one token states no TPOT error
// rather than a made-up one.
func TestReadRunRefuses(t *testing.T) {
	cfg, _ := sim.Profile("tiny")
	dir := t.TempDir()
	meta := results.RunMeta{ToolVersion: "test", RunID: "s", Model: "m", ShardCount: 2, ShardIndex: 1, Flags: map[string]string{}}
	reqs := []sim.SimRequest{{Prompt: 100, Output: 1}, {Arrival: time.Second, Prompt: 100, Output: 1}}
	shard := filepath.Join(dir, "shard.parquet")
	if err := SimulateRun(shard, cfg, reqs, 0, meta); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRun(context.Background(), shard, false); err == nil || !strings.Contains(err.Error(), "shard.parquet is shard 1 of 2") {
		t.Fatalf("shard: %v", err)
	}
	meta.ShardCount, meta.ShardIndex = 1, 0
	one := filepath.Join(dir, "one.parquet")
	if err := SimulateRun(one, cfg, reqs, 0, meta); err != nil {
		t.Fatal(err)
	}
	run, err := ReadRun(context.Background(), one, false)
	if err != nil {
		t.Fatal(err)
	}
	errs, err := Errors(context.Background(), cfg, []Run{run})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range errs {
		if strings.HasPrefix(e.Figure, "tpot") || math.IsNaN(e.RelErr) {
			t.Errorf("an error stated for a figure the run has not: %+v", e)
		}
	}
	if len(errs) == 0 {
		t.Error("no TTFT error stated")
	}
	empty := filepath.Join(dir, "empty.parquet")
	if err := WriteResults(empty, meta, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRun(context.Background(), empty, false); err == nil || !strings.Contains(err.Error(), "empty.parquet: no ok generation") {
		t.Fatalf("empty: %v", err)
	}
}
