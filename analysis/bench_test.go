package analysis

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/compress"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay/results"
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
	sc := resultsSchema(tb, meta)
	w, err := pqarrow.NewFileWriter(sc, f, parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd), parquet.WithMaxRowGroupLength(32*1024)),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		tb.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	col := bindFixture(tb, b)
	t := int64(0)
	var chunks []int64
	for i := 0; i < n; i++ {
		t += int64(rng.ExpFloat64() * 5e6)
		sent := t + int64(rng.ExpFloat64()*0.2e6)
		prompt := int32(math.Exp(math.Log(16) + rng.Float64()*math.Log(512)))
		out := int32(min(2048, math.Exp(math.Log(100)+0.8*rng.NormFloat64()))) + 1
		ok := rng.IntN(100) != 0
		col.id.Append(int64(i))
		col.shard.Append(0)
		col.scheduled.Append(t)
		col.sent.Append(sent)
		lb := col.chunks
		vb := lb.ValueBuilder().(*array.Int64Builder)
		lb.Append(true)
		if ok {
			at := int64(40e6 + float64(prompt)*0.02e6 + rng.ExpFloat64()*20e6)
			first := at
			chunks = chunks[:0]
			for k := int32(0); k < out; k++ {
				chunks = append(chunks, at)
				at += int64(20e6 + rng.ExpFloat64()*5e6)
			}
			vb.AppendValues(chunks, nil)
			col.first.Append(sent + first)
			end := vb.Value(vb.Len() - 1)
			col.end.Append(sent + end)
			col.out.Append(out)
			col.source.Append(results.SourceUsage)
			col.status.Append(string(results.StatusOK))
			col.httpStatus.Append(200)
			col.err.AppendNull()
			col.ttft.Append(float64(first) / 1e6)
			col.tpot.Append(float64(end-first) / 1e6 / float64(max(out-1, 1)))
			col.e2e.Append(float64(end) / 1e6)
		} else {
			col.first.AppendNull()
			col.end.AppendNull()
			col.out.AppendNull()
			col.source.Append("")
			col.status.Append(string(results.StatusHTTPError))
			col.httpStatus.Append(503)
			col.err.Append("503 Service Unavailable")
			col.ttft.AppendNull()
			col.tpot.AppendNull()
			col.e2e.AppendNull()
		}
		col.chunkTokens.AppendNull()
		col.prompt.Append(prompt)
		col.promptServer.Append(prompt)
		col.outTarget.Append(out)
		// No sessions: the revision-1.1 columns are null, as replay writes them for a
		// trace without session_id.
		col.sessionID.AppendNull()
		col.turn.AppendNull()
		col.sessionWait.AppendNull()
		col.cached.AppendNull()
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
		d, err := Load(context.Background(), decode.LoadOptions{}, path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Analyze(d, DefaultOptions()); err != nil {
			b.Fatal(err)
		}
	}
}
