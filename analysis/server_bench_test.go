package analysis

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/compress"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay/results"
)

// writeBenchMetrics writes a metrics file of scrapes one second apart of one source exposing
// series series, of which 5 are known to analysis (vLLM's running, waiting, KV usage,
// preemptions and one more gauge) and the rest unknown histogram buckets with 3 labels:
// the shape of a real vLLM /metrics (hundreds of bucket series). One row group per minute.
func writeBenchMetrics(tb testing.TB, path string, meta results.RunMeta, scrapes, series int) {
	tb.Helper()
	sc, err := results.MetricsSchemaWithRun(&meta)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w, err := pqarrow.NewFileWriter(sc, f, parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd)),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		tb.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	known := []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total", "vllm:prefix_cache_hits_total"}
	les := make([]string, series)
	for i := range les {
		les[i] = fmt.Sprint(i)
	}
	for k := 0; k < scrapes; k++ {
		for i := 0; i < series; i++ {
			b.Field(0).(*array.Int64Builder).Append(int64(k) * int64(time.Second))
			b.Field(1).(*array.StringBuilder).Append("http://127.0.0.1:8000/metrics")
			lab := b.Field(4).(*array.MapBuilder)
			lab.Append(true)
			kb, ib := lab.KeyBuilder().(*array.StringBuilder), lab.ItemBuilder().(*array.StringBuilder)
			kb.Append("engine")
			ib.Append("0")
			if i < len(known) {
				b.Field(2).(*array.StringBuilder).Append(known[i])
				b.Field(3).(*array.StringBuilder).Append("gauge")
			} else {
				b.Field(2).(*array.StringBuilder).Append("vllm:e2e_request_latency_seconds_bucket")
				b.Field(3).(*array.StringBuilder).Append("histogram")
				kb.Append("le")
				ib.Append(les[i])
				kb.Append("model_name")
				ib.Append("meta-llama/Llama-3.1-8B-Instruct")
			}
			b.Field(5).(*array.Float64Builder).Append(float64(k + i))
		}
		if (k+1)%60 == 0 || k == scrapes-1 {
			rec := b.NewRecord()
			if err := w.Write(rec); err != nil {
				tb.Fatal(err)
			}
			rec.Release()
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkLoadServerMetrics: Load of a 30-minute run scraped every second, 1000 series a
// scrape (1.8M metric rows, 5 of every 1000 known). retained-MB is the heap still held by
// the loaded Data (the known samples), which grows with the known series only; heap-sys-MB
// the heap the process obtained, a bound on its peak (the unknown rows are decoded batch by
// batch and dropped).
func BenchmarkLoadServerMetrics(b *testing.B) {
	dir := b.TempDir()
	p := filepath.Join(dir, "results.parquet")
	meta := testRun()
	meta.MetricsFile, meta.ScrapeIntervalNS = filepath.Base(results.MetricsPath(p)), int64(time.Second)
	writeResults(b, p, meta, steadyRows())
	writeBenchMetrics(b, results.MetricsPath(p), meta, 1800, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	var d *decode.Data
	for range b.N {
		var err error
		if d, err = Load(context.Background(), decode.LoadOptions{}, p); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc)/1e6, "retained-MB")
	b.ReportMetric(float64(ms.HeapSys)/1e6, "heap-sys-MB") // the most the heap grew to, about
	b.ReportMetric(float64(len(d.Server.Samples)), "kept-samples")
	runtime.KeepAlive(d)
}

// BenchmarkServerSection: the server section and its series columns for a 24-hour run
// scraped every second (5 known series: 432,000 samples), at a 1 s interval.
func BenchmarkServerSection(b *testing.B) {
	const n = 24 * 3600
	sd := &decode.ServerData{Files: 1, Sources: []string{"s"}, ShardOf: []int{0}, OwnerFile: []int{0}, RunOf: []string{"r"},
		Attempts: []int64{n}, Failures: []int64{0}, LastError: []string{""}, IntervalNS: int64(time.Second)}
	for m := 0; m < 5; m++ {
		sd.Series = append(sd.Series, decode.ServerSeries{Source: 0, Metric: m})
	}
	for k := 0; k < n; k++ {
		for m := range 5 {
			sd.Samples = append(sd.Samples, decode.ServerSample{Series: int32(m), T: int64(k) * int64(time.Second), V: float64(k % 100)})
		}
	}
	nan := math.NaN()
	b.ReportAllocs()
	for range b.N {
		r := &Report{Options: Options{Interval: time.Second}, Throughput: Throughput{WindowStartS: 60, WindowEndS: n - 60}}
		r.Series = make([]Interval, n)
		for k := range r.Series {
			r.Series[k].StartS, r.Series[k].TTFTP50 = float64(k), nan
		}
		r.server(&decode.Data{Server: sd})
	}
}
