package analysis

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/compress"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

// writeBenchResults writes a synthetic n-request results file shaped like a busy chat
// replay: Poisson arrivals at 200 req/s, prompts log-uniform in [16, 8192], outputs
// lognormal (median 100, mean about 138 tokens, at most 2048), one token per chunk, ITL
// around 25 ms, 1% http errors; written as replay writes results (Zstd, 32Ki-row row groups,
// default encodings). It streams 16Ki-row batches so the writer's memory stays flat.
func writeBenchResults(tb testing.TB, path string, n int) {
	tb.Helper()
	meta := testRun()
	rng := rand.New(rand.NewPCG(42, 1))
	f, err := os.Create(path + ".tmp")
	if err != nil {
		tb.Fatal(err)
	}
	mj, _ := json.Marshal(meta)
	md := arrow.NewMetadata([]string{MetaFormat, MetaRun}, []string{ResultsFormat, string(mj)})
	sc := arrow.NewSchema(resultsSchemaFields, &md)
	w, err := pqarrow.NewFileWriter(sc, f, parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd), parquet.WithMaxRowGroupLength(32*1024)),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		tb.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	t := int64(0)
	var chunks []int64
	for i := 0; i < n; i++ {
		t += int64(rng.ExpFloat64() * 5e6)
		sent := t + int64(rng.ExpFloat64()*0.2e6)
		prompt := int32(math.Exp(math.Log(16) + rng.Float64()*math.Log(512)))
		out := int32(min(2048, math.Exp(math.Log(100)+0.8*rng.NormFloat64()))) + 1
		ok := rng.IntN(100) != 0
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		b.Field(1).(*array.Int32Builder).Append(0)
		b.Field(2).(*array.Int64Builder).Append(t)
		b.Field(3).(*array.Int64Builder).Append(sent)
		lb := b.Field(6).(*array.ListBuilder)
		vb := lb.ValueBuilder().(*array.Int64Builder)
		lb.Append(true)
		if ok {
			c := int64(40e6 + float64(prompt)*0.02e6 + rng.ExpFloat64()*20e6)
			first := c
			chunks = chunks[:0]
			for k := int32(0); k < out; k++ {
				chunks = append(chunks, c)
				c += int64(20e6 + rng.ExpFloat64()*5e6)
			}
			vb.AppendValues(chunks, nil)
			b.Field(4).(*array.Int64Builder).Append(sent + first)
			end := vb.Value(vb.Len() - 1)
			b.Field(5).(*array.Int64Builder).Append(sent + end)
			b.Field(11).(*array.Int32Builder).Append(out)
			b.Field(12).(*array.StringBuilder).Append("usage")
			b.Field(13).(*array.StringBuilder).Append("ok")
			b.Field(14).(*array.Int32Builder).Append(200)
			b.Field(15).AppendNull()
			b.Field(16).(*array.Float64Builder).Append(float64(first) / 1e6)
			b.Field(17).(*array.Float64Builder).Append(float64(end-first) / 1e6 / float64(max(out-1, 1)))
			b.Field(18).(*array.Float64Builder).Append(float64(end) / 1e6)
		} else {
			b.Field(4).AppendNull()
			b.Field(5).AppendNull()
			b.Field(11).AppendNull()
			b.Field(12).(*array.StringBuilder).Append("")
			b.Field(13).(*array.StringBuilder).Append("http_error")
			b.Field(14).(*array.Int32Builder).Append(503)
			b.Field(15).(*array.StringBuilder).Append("503 Service Unavailable")
			for k := 16; k <= 18; k++ {
				b.Field(k).AppendNull()
			}
		}
		b.Field(7).AppendNull()
		b.Field(8).(*array.Int32Builder).Append(prompt)
		b.Field(9).(*array.Int32Builder).Append(prompt)
		b.Field(10).(*array.Int32Builder).Append(out)
		if (i+1)%(1<<14) == 0 || i == n-1 {
			rec := b.NewRecord()
			if err := w.WriteBuffered(rec); err != nil {
				tb.Fatal(err)
			}
			rec.Release()
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		tb.Fatal(err)
	}
}

// TestWriteBenchResults writes the benchmark's input when LLMREPLAY_BENCH_RESULTS names a
// file (bench/analyze.sh uses it); LLMREPLAY_BENCH_N overrides the 1,000,000 requests.
func TestWriteBenchResults(t *testing.T) {
	path := os.Getenv("LLMREPLAY_BENCH_RESULTS")
	if path == "" {
		t.Skip("set LLMREPLAY_BENCH_RESULTS=file.parquet to write the benchmark input")
	}
	n := 1_000_000
	if s := os.Getenv("LLMREPLAY_BENCH_N"); s != "" {
		if _, err := fmt.Sscan(s, &n); err != nil {
			t.Fatal(err)
		}
	}
	writeBenchResults(t, path, n)
}

// BenchmarkAnalyze1M loads and analyses a 1-million-request file (written once into the
// temp dir and reused). Peak memory of the binary is measured by bench/analyze.sh.
func BenchmarkAnalyze1M(b *testing.B) {
	path := filepath.Join(os.TempDir(), "llmreplay-bench-1m.parquet")
	if _, err := os.Stat(path); err != nil {
		writeBenchResults(b, path, 1_000_000)
	}
	b.ReportAllocs()
	for b.Loop() {
		d, err := Load(context.Background(), LoadOptions{}, path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Analyze(d, DefaultOptions()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUSHist: counting 10^7 chunk gaps.
func BenchmarkUSHist(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	xs := make([]float64, 10_000_000)
	for i := range xs {
		xs[i] = 20e6 + rng.ExpFloat64()*5e6
	}
	b.ReportAllocs()
	for b.Loop() {
		var h usHist
		for _, x := range xs {
			h.add(x, 1)
		}
		h.summary()
	}
}
