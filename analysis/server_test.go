package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis/scraped"

	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/internal/prom"
	"github.com/llmreplay/llmreplay/replay/results"
)

// scrape is one scrape attempt of a source for writeMetrics: its samples (prom.Parse's
// shape), or a failure (err != "") that writes llmreplay_scrape_up 0 with the error label.
type scrape struct {
	t       time.Duration
	source  string
	samples []prom.Sample
	err     string
}

// writeMetrics writes a metrics/v1 file at path with the run metadata meta: per scrape, its
// samples and the scraper's own llmreplay_scrape_* rows, as the contract says. The
// replayer's writer is another package's; this helper writes the contract's schema
// directly with pqarrow.
func writeMetrics(tb testing.TB, path string, meta results.RunMeta, scrapes []scrape) {
	tb.Helper()
	sc, err := results.MetricsSchemaWithRun(&meta)
	if err != nil {
		tb.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	ts := b.Field(0).(*array.Int64Builder)
	src := b.Field(1).(*array.StringBuilder)
	name := b.Field(2).(*array.StringBuilder)
	typ := b.Field(3).(*array.StringBuilder)
	lab := b.Field(4).(*array.MapBuilder)
	val := b.Field(5).(*array.Float64Builder)
	add := func(t int64, source, n, ty string, labels []prom.Label, v float64) {
		ts.Append(t)
		src.Append(source)
		name.Append(n)
		typ.Append(ty)
		lab.Append(true)
		for _, l := range labels {
			lab.KeyBuilder().(*array.StringBuilder).Append(l.Name)
			lab.ItemBuilder().(*array.StringBuilder).Append(l.Value)
		}
		val.Append(v)
	}
	for _, s := range scrapes {
		t := int64(s.t)
		for _, x := range s.samples {
			add(t, s.source, x.Name, x.Type, x.Labels, x.Value)
		}
		if s.err != "" {
			add(t, s.source, results.MetricScrapeUp, results.MetricTypeScrape, []prom.Label{{Name: "error", Value: s.err}}, 0)
		} else {
			add(t, s.source, results.MetricScrapeUp, results.MetricTypeScrape, nil, 1)
		}
		add(t, s.source, results.MetricScrapeDuration, results.MetricTypeScrape, nil, 0.002)
		add(t, s.source, results.MetricScrapeSamples, results.MetricTypeScrape, nil, float64(len(s.samples)))
	}
	rec := b.NewRecord()
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w, err := pqarrow.NewFileWriter(sc, f, parquet.NewWriterProperties(), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		tb.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

// gauge and counter build one sample.
func gauge(name string, v float64, labels ...string) prom.Sample {
	return prom.Sample{Name: name, Type: "gauge", Labels: pairs(labels), Value: v}
}

func counter(name string, v float64, labels ...string) prom.Sample {
	return prom.Sample{Name: name, Type: "counter", Labels: pairs(labels), Value: v}
}

func pairs(kv []string) []prom.Label {
	var out []prom.Label
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, prom.Label{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

// steadyRows: one ok request every 100 ms for 20 s, each answered in 50 ms, so that with
// --warmup 2s the window is [2 s, 19.9 s).
func steadyRows() []row {
	const ms = int64(time.Millisecond)
	var rows []row
	for i := int64(0); i < 200; i++ {
		rows = append(rows, okRow(i+1, i*100*ms, 20*ms, 30*ms, 50*ms))
	}
	return rows
}

// scrapedRun writes a results file (one shard per entry of metas, sharing the run) and a
// metrics file beside each whose scrapes are given, and returns the results paths.
func scrapedRun(t *testing.T, metas []results.RunMeta, scrapes [][]scrape) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	rows := steadyRows()
	for i, m := range metas {
		p := filepath.Join(dir, "results-"+string(rune('a'+i))+".parquet")
		if scrapes[i] != nil {
			m.MetricsFile = filepath.Base(results.MetricsPath(p))
			m.ScrapeIntervalNS = int64(time.Second)
			writeMetrics(t, results.MetricsPath(p), m, scrapes[i])
		}
		var mine []row
		for k, r := range rows {
			if k%len(metas) == i {
				r.shard = int32(i)
				mine = append(mine, r)
			}
		}
		writeResults(t, p, m, mine)
		paths = append(paths, p)
	}
	return paths
}

func analyzeServer(t *testing.T, paths ...string) *Report {
	t.Helper()
	d, err := Load(context.Background(), decode.LoadOptions{}, paths...)
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.Warmup = 2 * time.Second
	r, err := Analyze(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func closeTo(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// vllmScrapes: a vLLM engine scraped every second from 0 to 20 s. At scrape k: running k,
// waiting 2k, KV usage k/40; the preemption counter counts k but resets to 0 at k = 10 (an
// engine restart) and then counts k-10; prefix queries 100k, hits 25k.
func vllmScrapes(source string) []scrape {
	var out []scrape
	for k := 0; k <= 20; k++ {
		pre := float64(k)
		if k >= 10 {
			pre = float64(k - 10)
		}
		l := []string{"engine", "0", "model_name", "m"}
		out = append(out, scrape{t: time.Duration(k) * time.Second, source: source, samples: []prom.Sample{
			gauge("vllm:num_requests_running", float64(k), l...),
			gauge("vllm:num_requests_waiting", float64(2*k), l...),
			gauge("vllm:kv_cache_usage_perc", float64(k)/40, l...),
			gauge("vllm:gpu_cache_usage_perc", 0.99, l...), // deprecated twin: must be ignored
			counter("vllm:num_preemptions_total", pre, l...),
			counter("vllm:prefix_cache_queries_total", float64(100*k), l...),
			counter("vllm:prefix_cache_hits_total", float64(25*k), l...),
		}})
	}
	return out
}

// TestServerFigures: the steady-state window is [2 s, 19.9 s), so the scrapes at 2..19 s
// count: running mean (2+...+19)/18 = 10.5, max 19; waiting twice that; KV usage mean
// 10.5/40, max 19/40, p99 type-7 of 2/40..19/40; preemptions: the deltas stamped at 2..19 s
// are 1 each, except at 10 s where the counter reset to 0 (increase 0): 17; prefix hit rate
// 25/100 from the counters.
func TestServerFigures(t *testing.T) {
	src := "http://127.0.0.1:8000/metrics"
	r := analyzeServer(t, scrapedRun(t, []results.RunMeta{testRun()}, [][]scrape{vllmScrapes(src)})...)
	s := r.Server
	if s == nil {
		t.Fatal("no server section")
	}
	if !s.Steady || s.WindowStartS != 2 || s.WindowEndS != 19.9 {
		t.Fatalf("window %v [%v, %v)", s.Steady, s.WindowStartS, s.WindowEndS)
	}
	if s.Running.N != 18 || !closeTo(s.Running.Mean, 10.5) || s.Running.Max != 19 {
		t.Errorf("running %+v", s.Running)
	}
	if !closeTo(s.Waiting.Mean, 21) || s.Waiting.Max != 38 {
		t.Errorf("waiting %+v", s.Waiting)
	}
	p99 := (2 + 0.99*17) / 40 // type 7 over 2/40 .. 19/40
	if !closeTo(s.KVUsage.Mean, 10.5/40) || !closeTo(s.KVUsage.Max, 19.0/40) || !closeTo(s.KVUsage.P99, p99) {
		t.Errorf("kv usage %+v, want p99 %v", s.KVUsage, p99)
	}
	if s.Preemptions != 17 {
		t.Errorf("preemptions %v, want 17", s.Preemptions)
	}
	if s.PrefixFrom != "counters" || !closeTo(s.PrefixHitRate, 0.25) || s.PrefixQuery != 1800 {
		t.Errorf("prefix cache %v %v from %q", s.PrefixHitRate, s.PrefixQuery, s.PrefixFrom)
	}
	if len(s.Sources) != 1 || s.Sources[0].Scrapes != 21 || s.Sources[0].Failures != 0 {
		t.Errorf("sources %+v", s.Sources)
	}
	if len(s.Engines) != 1 || s.Engines[0] != "vllm" {
		t.Errorf("engines %v", s.Engines)
	}
	if !math.IsNaN(s.GPUUtil.Mean) || s.GPUUtil.N != 0 {
		t.Errorf("gpu util without DCGM: %+v", s.GPUUtil)
	}
	// The series: interval [5 s, 6 s) holds the scrape at 5 s.
	p := r.Series[5]
	if p.ServerRunning != 5 || p.ServerWaiting != 10 || p.KVUsage != 5.0/40 || p.Preemptions != 1 {
		t.Errorf("series[5] %+v", p)
	}
	if p := r.Series[10]; p.Preemptions != 0 {
		t.Errorf("series[10]: the reset counts its new value, 0: %v", p.Preemptions)
	}
}

// TestServerShardsDeduplicated: two shards both scrape the same engine (their samples
// differ, as two scrapes a few ms apart would); the report takes shard 0's series only.
// Shard 1 also scrapes a DCGM exporter, which only it saw: that source is kept.
func TestServerShardsDeduplicated(t *testing.T) {
	src := "http://127.0.0.1:8000/metrics"
	m0, m1 := testRun(), testRun()
	m0.ShardCount, m1.ShardCount, m1.ShardIndex = 2, 2, 1
	other := vllmScrapes(src)
	for k := range other {
		for j := range other[k].samples {
			other[k].samples[j].Value *= 3
		}
		other[k].t += 7 * time.Millisecond
	}
	for k := 0; k <= 20; k++ {
		other = append(other, scrape{t: time.Duration(k) * time.Second, source: "http://127.0.0.1:9400/metrics", samples: []prom.Sample{
			gauge("DCGM_FI_DEV_GPU_UTIL", 90, "gpu", "0"), gauge("DCGM_FI_DEV_GPU_UTIL", 70, "gpu", "1"),
			gauge("DCGM_FI_DEV_POWER_USAGE", 300, "gpu", "0"), gauge("DCGM_FI_DEV_POWER_USAGE", 200, "gpu", "1"),
		}})
	}
	paths := scrapedRun(t, []results.RunMeta{m1, m0}, [][]scrape{other, vllmScrapes(src)})
	r := analyzeServer(t, paths...)
	s := r.Server
	if s == nil || !closeTo(s.Running.Mean, 10.5) || s.Preemptions != 17 {
		t.Fatalf("shard 1's copy was counted: %+v", s)
	}
	if len(s.Sources) != 2 || s.Sources[0].Shard != 0 || s.Sources[1].Shard != 1 {
		t.Fatalf("sources %+v", s.Sources)
	}
	if !closeTo(s.GPUUtil.Mean, 80) || !closeTo(s.GPUPowerW.Mean, 500) {
		t.Errorf("gpu util %+v (mean over GPUs 80), power %+v (sum 500 W)", s.GPUUtil, s.GPUPowerW)
	}
}

// TestServerMissingFileWarns: a run whose metadata names a metrics file that is not there
// is analysed, with a warning and no server figures.
func TestServerMissingFileWarns(t *testing.T) {
	paths := scrapedRun(t, []results.RunMeta{testRun()}, [][]scrape{vllmScrapes("http://x/metrics")})
	if err := os.Remove(results.MetricsPath(paths[0])); err != nil {
		t.Fatal(err)
	}
	r := analyzeServer(t, paths...)
	if r.Server != nil {
		t.Fatalf("server section from a missing file: %+v", r.Server)
	}
	if !strings.Contains(strings.Join(r.Warnings, "\n"), "is missing") {
		t.Fatalf("no warning: %q", r.Warnings)
	}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), `"server"`) {
		t.Fatal("JSON has a server key without server figures")
	}
}

// TestServerScrapeFailures: failed scrapes are counted per source from llmreplay_scrape_up
// and reported once, with the last error.
func TestServerScrapeFailures(t *testing.T) {
	sc := vllmScrapes("http://a/metrics")
	for k := 0; k <= 20; k += 5 {
		sc = append(sc, scrape{t: time.Duration(k)*time.Second + 500*time.Millisecond, source: "http://b/metrics", err: "HTTP 500"})
	}
	r := analyzeServer(t, scrapedRun(t, []results.RunMeta{testRun()}, [][]scrape{sc})...)
	var b *ServerSource
	for i := range r.Server.Sources {
		if r.Server.Sources[i].Source == "http://b/metrics" {
			b = &r.Server.Sources[i]
		}
	}
	if b == nil || b.Scrapes != 5 || b.Failures != 5 || b.LastError != "HTTP 500" {
		t.Fatalf("source b %+v", b)
	}
	n := 0
	for _, w := range r.Warnings {
		if strings.Contains(w, "http://b/metrics") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d warnings about b, want 1: %q", n, r.Warnings)
	}
}

// TestServerFixtures: the exposition text of each engine, parsed with prom.Parse and
// scraped at 0..20 s (counters advanced by one per scrape), lands in the report's rows.
func TestServerFixtures(t *testing.T) {
	nan := math.NaN()
	cases := []struct {
		file                                   string
		running, waiting, kv, util, power, hit float64
		preempt                                float64
	}{
		{"vllm.prom", 12, 3, 0.42, nan, nan, 18.0 / 18, 18},
		{"sglang.prom", 162, 2826, 0.28, nan, nan, 0.007507552643049313, nan},
		{"tgi.prom", 24, 5, nan, nan, nan, nan, nan},
		{"llamacpp.prom", 4, 2, 0.37, nan, nan, nan, nan},
		{"dcgm.prom", nan, nan, nan, 96, 600, nan, nan},
	}
	same := func(a, b float64) bool { return math.IsNaN(a) && math.IsNaN(b) || closeTo(a, b) }
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", "exposition", c.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			samples, err := prom.Parse(f, nil)
			if err != nil {
				t.Fatal(err)
			}
			var sc []scrape
			for k := 0; k <= 20; k++ {
				s := scrape{t: time.Duration(k) * time.Second, source: "http://engine/metrics"}
				for _, x := range samples {
					if x.Type == "counter" {
						x.Value += float64(k)
					}
					s.samples = append(s.samples, x)
				}
				sc = append(sc, s)
			}
			r := analyzeServer(t, scrapedRun(t, []results.RunMeta{testRun()}, [][]scrape{sc})...)
			s := r.Server
			got := []float64{s.Running.Mean, s.Waiting.Mean, s.KVUsage.Mean, s.GPUUtil.Mean, s.GPUPowerW.Mean, s.PrefixHitRate, s.Preemptions}
			want := []float64{c.running, c.waiting, c.kv, c.util, c.power, c.hit, c.preempt}
			names := []string{"running", "waiting", "kv usage", "gpu util", "gpu power", "prefix hit rate", "preemptions"}
			for i := range got {
				if !same(got[i], want[i]) {
					t.Errorf("%s = %v, want %v", names[i], got[i], want[i])
				}
			}
			var buf bytes.Buffer
			if err := r.WriteText(&buf); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), "\nServer (") {
				t.Errorf("text report has no server section:\n%s", buf.String())
			}
			buf.Reset()
			if err := r.WriteJSON(&buf); err != nil {
				t.Fatal(err)
			}
			var j map[string]json.RawMessage
			if err := json.Unmarshal(buf.Bytes(), &j); err != nil {
				t.Fatal(err)
			}
			if _, ok := j["server"]; !ok {
				t.Error("JSON has no server key")
			}
		})
	}
}

// TestServerParquetColumns: summary.parquet and timeseries.parquet carry the server figures.
func TestServerParquetColumns(t *testing.T) {
	r := analyzeServer(t, scrapedRun(t, []results.RunMeta{testRun()}, [][]scrape{vllmScrapes("http://x/metrics")})...)
	dir := t.TempDir()
	if err := WriteParquetDir(dir, r); err != nil {
		t.Fatal(err)
	}
	sum := readSummary(t, filepath.Join(dir, "summary.parquet"), 0)
	if sum["server_running_mean"] != 10.5 || sum["server_kv_cache_usage_max"] != 19.0/40 || sum["server_prefix_cache_hit_rate"] != 0.25 {
		t.Errorf("summary server columns: %v %v %v", sum["server_running_mean"], sum["server_kv_cache_usage_max"], sum["server_prefix_cache_hit_rate"])
	}
	ts := readSummary(t, filepath.Join(dir, "timeseries.parquet"), 5)
	if ts["server_running"] != 5.0 || ts["server_waiting"] != 10.0 || ts["server_preemptions"] != 1.0 || ts["server_gpu_power_w"] != nil {
		t.Errorf("timeseries row 5: %v", ts)
	}
}

// TestServerKeysDocumented: every key of the JSON server section and every server column
// of the summary is named in docs/metrics.md (a sweep point's server keys: package sweep's test).
func TestServerKeysDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	r := analyzeServer(t, scrapedRun(t, []results.RunMeta{testRun()}, [][]scrape{vllmScrapes("http://x/metrics")})...)
	var b bytes.Buffer
	r.WriteJSON(&b)
	var m map[string]any
	json.Unmarshal(b.Bytes(), &m)
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, y := range x {
				if !bytes.Contains(doc, []byte("`"+k+"`")) {
					t.Errorf("JSON key %s is not in docs/metrics.md", k)
				}
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	if m["server"] == nil {
		t.Fatal("no server key")
	}
	walk(m["server"])
	for _, c := range r.Server.summaryCols() {
		if !bytes.Contains(doc, []byte("`"+c.name+"`")) {
			t.Errorf("summary column %s is not in docs/metrics.md", c.name)
		}
	}
	for _, name := range []string{"server_running", "server_waiting", "server_kv_cache_usage", "server_preemptions", "server_gpu_utilization_pct", "server_gpu_power_w"} {
		if !bytes.Contains(doc, []byte("`"+name+"`")) {
			t.Errorf("timeseries column %s is not in docs/metrics.md", name)
		}
	}
	for _, sm := range scraped.Metrics {
		if !bytes.Contains(doc, []byte("`"+sm.Name+"`")) {
			t.Errorf("known metric %s is not in the table of docs/metrics.md", sm.Name)
		}
	}
}

// TestServerGolden: the text and JSON reports of a scraped run (vllmScrapes, and a DCGM
// exporter with two GPUs at 90% and 70%, 300 W and 200 W) against testdata/server.txt and
// server.json: the example docs/metrics.md quotes.
func TestServerGolden(t *testing.T) {
	sc := vllmScrapes("http://127.0.0.1:8000/metrics")
	for k := 0; k <= 20; k++ {
		sc = append(sc, scrape{t: time.Duration(k) * time.Second, source: "http://127.0.0.1:9400/metrics", samples: []prom.Sample{
			gauge("DCGM_FI_DEV_GPU_UTIL", 90, "gpu", "0"), gauge("DCGM_FI_DEV_GPU_UTIL", 70, "gpu", "1"),
			gauge("DCGM_FI_DEV_POWER_USAGE", 300, "gpu", "0"), gauge("DCGM_FI_DEV_POWER_USAGE", 200, "gpu", "1"),
		}})
	}
	paths := scrapedRun(t, []results.RunMeta{testRun()}, [][]scrape{sc})
	r := analyzeServer(t, paths...)
	r.Files = []string{"results.parquet"} // the temporary directory's name would differ each run
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "server.txt", b.Bytes())
	b.Reset()
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "server.json", b.Bytes())
}

// TestServerSourcesCombine: two vLLM replicas behind a gateway, each its own source, scraped
// 5 ms apart: at each scrape tick their running and waiting requests add up and their KV
// usage is averaged; preemptions add up over both counters. A data-parallel engine's two
// series (engine="0", "1") in one source combine the same way.
func TestServerSourcesCombine(t *testing.T) {
	a := vllmScrapes("http://10.0.0.1:8000/metrics")
	b := vllmScrapes("http://10.0.0.2:8000/metrics")
	for k := range b {
		b[k].t += 5 * time.Millisecond
		for j := range b[k].samples {
			if b[k].samples[j].Name == "vllm:kv_cache_usage_perc" {
				b[k].samples[j].Value = 0.5
			}
		}
	}
	r := analyzeServer(t, scrapedRun(t, []results.RunMeta{testRun()}, [][]scrape{append(a, b...)})...)
	s := r.Server
	if s.Running.N != 18 || !closeTo(s.Running.Mean, 21) || s.Running.Max != 38 {
		t.Errorf("running %+v, want the two replicas summed: mean 21, max 38 over 18 ticks", s.Running)
	}
	if !closeTo(s.KVUsage.Mean, (10.5/40+0.5)/2) {
		t.Errorf("kv usage %+v, want the mean of the replicas %v", s.KVUsage, (10.5/40+0.5)/2)
	}
	if s.Preemptions != 34 {
		t.Errorf("preemptions %v, want 17 + 17", s.Preemptions)
	}
	// Data parallel: one source, two engines.
	var dp []scrape
	for k := 0; k <= 20; k++ {
		dp = append(dp, scrape{t: time.Duration(k) * time.Second, source: "http://x/metrics", samples: []prom.Sample{
			gauge("vllm:num_requests_running", 3, "engine", "0"), gauge("vllm:num_requests_running", 4, "engine", "1"),
			gauge("vllm:kv_cache_usage_perc", 0.2, "engine", "0"), gauge("vllm:kv_cache_usage_perc", 0.6, "engine", "1"),
		}})
	}
	s = analyzeServer(t, scrapedRun(t, []results.RunMeta{testRun()}, [][]scrape{dp})...).Server
	if s.Running.Mean != 7 || !closeTo(s.KVUsage.Mean, 0.4) {
		t.Errorf("data parallel: running %v (want 7), kv %v (want 0.4)", s.Running.Mean, s.KVUsage.Mean)
	}
}

// TestServerBadMetricsFile: a named metrics file that is not metrics/v1 (here, a results
// file) is an error naming it, before any figure is computed.
func TestServerBadMetricsFile(t *testing.T) {
	paths := scrapedRun(t, []results.RunMeta{testRun()}, [][]scrape{vllmScrapes("http://x/metrics")})
	writeResults(t, results.MetricsPath(paths[0]), testRun(), steadyRows()[:3])
	_, err := Load(context.Background(), decode.LoadOptions{}, paths...)
	if err == nil || !strings.Contains(err.Error(), results.MetricsPath(paths[0])) || !strings.Contains(err.Error(), results.MetricsFormat) {
		t.Fatalf("err = %v, want one naming the metrics file and its format", err)
	}
}
