package sweep

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/internal/browsertest"
	"github.com/llmreplay/llmreplay/internal/goldenfile"
	"github.com/llmreplay/llmreplay/internal/prom"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// The report's tests build their points' files with the replayer's own writers (the
// results and metrics journals, converted to Parquet), as a sweep's points are written.

var (
	golden   = goldenfile.Check
	chromium = browsertest.Chromium
)

// mixedReport analyses analysis's mixed run (resultsFile) with its golden SLO.
func mixedReport(t *testing.T) (*analysis.Report, string) {
	t.Helper()
	d, err := analysis.Load(context.Background(), decode.LoadOptions{}, resultsFile)
	if err != nil {
		t.Fatal(err)
	}
	opts := analysis.DefaultOptions()
	opts.SLO = analysis.SLO{TTFT: 200 * time.Millisecond, TPOT: 25 * time.Millisecond}
	r, err := analysis.Analyze(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, resultsFile
}

// pointMeta is a point's run metadata: an open loop at speedup 1 unless changed.
func pointMeta() results.RunMeta {
	return results.RunMeta{ToolVersion: "dev", RunID: "run1", Mode: "open", Endpoint: "http://127.0.0.1:8000/v1", API: "completions",
		Backend: "vllm", Model: "m", TraceFile: "t.parquet", Speedup: 1, ShardCount: 1,
		RunStartUnixNS: 1_700_000_000_000_000_000, MaxLatenessMS: 10, Host: "h", Flags: map[string]string{}}
}

// writePoint writes rs as the results file path, through a journal as replay does.
func writePoint(t *testing.T, path string, meta results.RunMeta, rs []*results.Result) {
	t.Helper()
	journal := path + ".journal"
	j, err := results.CreateJournal(journal, &meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if err := j.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := results.ConvertJournal(journal, path); err != nil {
		t.Fatal(err)
	}
}

// okResult is an ok request due at sched, sent late, whose output chunks arrive at the
// given offsets from its send, one token each unless out says otherwise.
func okResult(id, sched, sent int64, prompt, out int32, chunks []int64) *results.Result {
	r := results.NewResult(id, 0, sched, prompt, out)
	r.SentNS, r.ChunkNS, r.Status = sent, chunks, results.StatusOK
	r.FirstTokenNS, r.EndNS = sent+chunks[0], sent+chunks[len(chunks)-1]
	r.PromptTokensServer, r.OutputTokens, r.OutputTokensSource = prompt, out, results.SourceUsage
	return r
}

// closedSweepRun is a deterministic closed loop of c workers for 30 s against a model engine
// that decodes at most 8 sequences at once, in steps of 10 ms + 1 ms per sequence: above 8
// users a request waits in the queue for (c/8 − 1) mean service times before its prefill.
// Throughput grows with c up to 8 and stays flat after: the saturation is 8. Each worker
// sends its next request when its last one ends (scheduled = that end), late by a fraction
// of a millisecond, or by 30 ms when slowClient. One request in 50 fails at c = 16.
func closedSweepRun(c int, slowClient bool) []*results.Result {
	rng := rand.New(rand.NewPCG(uint64(c), 3))
	b := min(c, 8)
	step := int64(10e6 + float64(b)*1e6)
	const meanOut = 40
	service := 15e6 + (meanOut-1)*float64(step)
	wait := int64(math.Max(0, float64(c)/8-1) * service)
	var rs []*results.Result
	id := int64(0)
	free := make([]int64, c)
	for {
		w := 0 // the worker free first takes the next request
		for i := range free {
			if free[i] < free[w] {
				w = i
			}
		}
		sched := free[w]
		if sched >= 30e9 {
			break
		}
		late := int64(rng.ExpFloat64() * 0.2e6)
		if slowClient {
			late += 30e6
		}
		sent := sched + late
		prompt := int32(50 + rng.IntN(400))
		out := int32(20 + rng.IntN(41))
		ttft := wait + int64(15e6+float64(prompt)*20e3)
		chunks := []int64{ttft}
		for k := int32(1); k < out; k++ {
			chunks = append(chunks, chunks[k-1]+step+int64(rng.NormFloat64()*0.5e6))
		}
		r := okResult(id, sched, sent, prompt, out, chunks)
		if c == 16 && id%50 == 7 {
			r = results.NewResult(id, 0, sched, prompt, out)
			r.SentNS, r.Status, r.HTTPStatus = sent, results.StatusHTTPError, 503
			free[w] = sent + 2e6
		} else {
			free[w] = r.EndNS
		}
		rs = append(rs, r)
		id++
	}
	return rs
}

// closedSweep analyses closed loops at 1 … 32 users; 32 is client-limited.
func closedSweep(t *testing.T, slo analysis.SLO) *Report {
	t.Helper()
	dir := t.TempDir()
	opts := analysis.DefaultOptions()
	opts.SLO = slo
	var rows []Row
	for _, c := range []int{1, 2, 4, 8, 16, 32} {
		meta := pointMeta()
		meta.Mode, meta.Concurrency, meta.Speedup = results.ModeClosed, c, 0
		file := fmt.Sprintf("point-concurrency-%d.parquet", c)
		writePoint(t, filepath.Join(dir, file), meta, closedSweepRun(c, c == 32))
		d, err := analysis.Load(context.Background(), decode.LoadOptions{}, filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		row, err := NewRow("concurrency", float64(c), file, d, opts)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	return NewReport("concurrency", rows, stats.KneeOptions{}, nil)
}

// vllmExposition is a vLLM engine's /metrics at scrape k of a run scraped every second:
// running k, waiting 2k, KV usage k/40; the preemption counter counts k but restarts from
// 0 at k = 10 (an engine restart).
func vllmExposition(k int) string {
	pre := k
	if k >= 10 {
		pre = k - 10
	}
	return fmt.Sprintf(`# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} %d
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} %d
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} %g
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} %d
`, k, 2*k, float64(k)/40, pre)
}

// scrapedPoint writes a point of one ok request every 100 ms for 20 s, each answered in
// 50 ms, and, when scraped, its metrics file of 21 scrapes (vllmExposition, 0 to 20 s).
func scrapedPoint(t *testing.T, path string, scraped bool) {
	t.Helper()
	meta := pointMeta()
	if scraped {
		metrics := results.MetricsPath(path)
		meta.MetricsFile, meta.ScrapeIntervalNS = filepath.Base(metrics), int64(time.Second)
		mj, err := results.CreateMetricsJournal(metrics+".journal", &meta)
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k <= 20; k++ {
			samples, err := prom.Parse(strings.NewReader(vllmExposition(k)), nil)
			if err != nil {
				t.Fatal(err)
			}
			own := results.ScrapeRows("", 2*time.Millisecond, len(samples))
			if err := mj.AddSamples(int64(k)*int64(time.Second), "http://127.0.0.1:8000/metrics", samples, own[:]); err != nil {
				t.Fatal(err)
			}
		}
		if err := mj.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := results.ConvertMetricsJournal(metrics+".journal", metrics); err != nil {
			t.Fatal(err)
		}
	}
	const ms = int64(time.Millisecond)
	var rs []*results.Result
	for i := int64(0); i < 200; i++ {
		rs = append(rs, okResult(i+1, i*100*ms, i*100*ms, 100, 3, []int64{20 * ms, 30 * ms, 50 * ms}))
	}
	writePoint(t, path, meta, rs)
}

// serverSweep: two rate points, the first scraped, the second not.
func serverSweep(t *testing.T) *Report {
	t.Helper()
	opts := analysis.DefaultOptions()
	opts.Warmup = 2 * time.Second
	var rows []Row
	for i, scraped := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "results-a.parquet")
		scrapedPoint(t, path, scraped)
		d, err := analysis.Load(context.Background(), decode.LoadOptions{}, path)
		if err != nil {
			t.Fatal(err)
		}
		row, err := NewRow("rate", float64(10*(i+1)), path, d, opts)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	return NewReport("rate", rows, stats.KneeOptions{}, nil)
}
