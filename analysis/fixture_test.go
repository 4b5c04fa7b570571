package analysis

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

// row is one hand-built results row; nil pointers are nulls.
type row struct {
	id               int64
	shard            int32
	scheduled        int64
	sent, first, end *int64
	chunks           []int64 // offsets from sent
	chunkTokens      []int32 // nil = null
	prompt           int32
	promptServer     *int32
	outTarget        int32
	out              *int32
	source           string
	status           string
	httpStatus       *int32
	err              *string
	ttft, tpot, e2e  *float64
}

func p64(v int64) *int64    { return &v }
func p32(v int32) *int32    { return &v }
func pf(v float64) *float64 { return &v }

// okRow builds an ok request sent at sentNS whose chunks arrive at the given offsets from
// sentNS, one token each, with matching first/end and output_tokens = len(chunks).
func okRow(id, sentNS int64, chunks ...int64) row {
	r := row{id: id, scheduled: sentNS, sent: p64(sentNS), chunks: chunks, prompt: 100, outTarget: int32(len(chunks)), status: "ok", source: "usage"}
	r.first = p64(sentNS + chunks[0])
	r.end = p64(sentNS + chunks[len(chunks)-1])
	r.out = p32(int32(len(chunks)))
	return r
}

var resultsSchemaFields = []arrow.Field{
	{Name: "request_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "shard", Type: arrow.PrimitiveTypes.Int32},
	{Name: "scheduled_ns", Type: arrow.PrimitiveTypes.Int64},
	{Name: "sent_ns", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "first_token_ns", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "end_ns", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "chunk_ns", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
	{Name: "chunk_tokens", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: "prompt_tokens", Type: arrow.PrimitiveTypes.Int32},
	{Name: "prompt_tokens_server", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "output_tokens_target", Type: arrow.PrimitiveTypes.Int32},
	{Name: "output_tokens", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "output_tokens_source", Type: arrow.BinaryTypes.String},
	{Name: "status", Type: arrow.BinaryTypes.String},
	{Name: "http_status", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "error", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "ttft_ms", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "tpot_ms", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "e2e_ms", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
}

func testRun() RunMeta {
	return RunMeta{ToolVersion: "dev", RunID: "run1", Mode: "open", Endpoint: "http://127.0.0.1:8000/v1", API: "completions",
		Backend: "vllm", Model: "m", TraceFile: "t.parquet", Speedup: 1, ShardCount: 1, RunStartUnixNS: 1_700_000_000_000_000_000,
		MaxLatenessMS: 10, Host: "h", Flags: map[string]string{}}
}

// writeResults writes rows as a results/v1 file following RESULTS-CONTRACT.md.
func writeResults(tb testing.TB, path string, meta RunMeta, rows []row) {
	tb.Helper()
	mj, err := json.Marshal(meta)
	if err != nil {
		tb.Fatal(err)
	}
	md := arrow.NewMetadata([]string{MetaFormat, MetaRun}, []string{ResultsFormat, string(mj)})
	sc := arrow.NewSchema(resultsSchemaFields, &md)
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w, err := pqarrow.NewFileWriter(sc, f, parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(1<<16)), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		tb.Fatal(err)
	}
	const batch = 1 << 14
	for lo := 0; lo < len(rows) || lo == 0; lo += batch {
		rec := buildRecord(sc, rows[lo:min(lo+batch, len(rows))])
		if err := w.WriteBuffered(rec); err != nil {
			tb.Fatal(err)
		}
		rec.Release()
		if len(rows) == 0 {
			break
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

func buildRecord(sc *arrow.Schema, rows []row) arrow.Record {
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	i64 := func(k int, v *int64) {
		if v == nil {
			b.Field(k).AppendNull()
		} else {
			b.Field(k).(*array.Int64Builder).Append(*v)
		}
	}
	i32 := func(k int, v *int32) {
		if v == nil {
			b.Field(k).AppendNull()
		} else {
			b.Field(k).(*array.Int32Builder).Append(*v)
		}
	}
	f64 := func(k int, v *float64) {
		if v == nil {
			b.Field(k).AppendNull()
		} else {
			b.Field(k).(*array.Float64Builder).Append(*v)
		}
	}
	for _, r := range rows {
		b.Field(0).(*array.Int64Builder).Append(r.id)
		b.Field(1).(*array.Int32Builder).Append(r.shard)
		b.Field(2).(*array.Int64Builder).Append(r.scheduled)
		i64(3, r.sent)
		i64(4, r.first)
		i64(5, r.end)
		lb := b.Field(6).(*array.ListBuilder)
		lb.Append(true)
		for _, c := range r.chunks {
			lb.ValueBuilder().(*array.Int64Builder).Append(c)
		}
		tb := b.Field(7).(*array.ListBuilder)
		if r.chunkTokens == nil {
			tb.AppendNull()
		} else {
			tb.Append(true)
			for _, c := range r.chunkTokens {
				tb.ValueBuilder().(*array.Int32Builder).Append(c)
			}
		}
		b.Field(8).(*array.Int32Builder).Append(r.prompt)
		i32(9, r.promptServer)
		b.Field(10).(*array.Int32Builder).Append(r.outTarget)
		i32(11, r.out)
		b.Field(12).(*array.StringBuilder).Append(r.source)
		b.Field(13).(*array.StringBuilder).Append(r.status)
		i32(14, r.httpStatus)
		if r.err == nil {
			b.Field(15).AppendNull()
		} else {
			b.Field(15).(*array.StringBuilder).Append(*r.err)
		}
		// Derived columns as the contract defines them.
		ttft, tpot, e2e := r.ttft, r.tpot, r.e2e
		if r.status == "ok" && ttft == nil {
			ttft = pf(float64(*r.first-*r.sent) / 1e6)
			e2e = pf(float64(*r.end-*r.sent) / 1e6)
			if r.out != nil && *r.out > 1 {
				tpot = pf(float64(*r.end-*r.first) / 1e6 / float64(*r.out-1))
			}
		}
		f64(16, ttft)
		f64(17, tpot)
		f64(18, e2e)
	}
	return b.NewRecord()
}

func tempResults(tb testing.TB, meta RunMeta, rows []row) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "results.parquet")
	writeResults(tb, p, meta, rows)
	return p
}
