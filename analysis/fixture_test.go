package analysis

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/llmreplay/llmreplay/replay/results"
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
	// Revision 1.1.
	sessionID, sessionWait *int64
	turn, cached           *int32
	// Revision 1.2.
	gap, recArrival, recDuration *int64
	recCached                    *int32
	// Revision 1.3.
	firstAnswer     *int64
	reasoning       *int32
	reasoningSource string // "" = null
	// Revision 1.4.
	images, imageTokens, inputs *int32
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

// embeddingsRow builds an ok request that was not streamed (embeddings, rerank): n inputs of
// prompt tokens in all, sent at sentNS and answered latencyNS later; no chunks, no first
// token, no output.
func embeddingsRow(id, sentNS, latencyNS int64, n, prompt int32) row {
	return row{id: id, scheduled: sentNS, sent: p64(sentNS), end: p64(sentNS + latencyNS), prompt: prompt, promptServer: p32(prompt),
		status: "ok", inputs: p32(n)}
}

func testRun() results.RunMeta {
	return results.RunMeta{ToolVersion: "dev", RunID: "run1", Mode: "open", Endpoint: "http://127.0.0.1:8000/v1", API: "completions",
		Backend: "vllm", Model: "m", TraceFile: "t.parquet", Speedup: 1, ShardCount: 1, RunStartUnixNS: 1_700_000_000_000_000_000,
		MaxLatenessMS: 10, Host: "h", Flags: map[string]string{}}
}

// fixtureRowGroup is the row-group length of the files writeResults writes.
var fixtureRowGroup int64 = 1 << 16

// resultsSchema returns the contract's schema carrying meta: the schema of the fixture's
// files, as replay writes it.
func resultsSchema(tb testing.TB, meta results.RunMeta) *arrow.Schema {
	tb.Helper()
	sc, err := results.SchemaWithRun(&meta)
	if err != nil {
		tb.Fatal(err)
	}
	return sc
}

// writeResults writes rows as a results/v1 file, with the contract's schema.
func writeResults(tb testing.TB, path string, meta results.RunMeta, rows []row) {
	tb.Helper()
	writeResultsSchema(tb, path, resultsSchema(tb, meta), rows)
}

// writeResultsSchema writes rows as a file of schema sc, whose columns are bound by name.
func writeResultsSchema(tb testing.TB, path string, sc *arrow.Schema, rows []row) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w, err := pqarrow.NewFileWriter(sc, f, parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(fixtureRowGroup)), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		tb.Fatal(err)
	}
	const batch = 1 << 14
	for lo := 0; lo < len(rows) || lo == 0; lo += batch {
		rec := buildRecord(tb, sc, rows[lo:min(lo+batch, len(rows))])
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

// fixtureBuilders are the column builders of a results record, bound by name.
type fixtureBuilders struct {
	id, scheduled, sent, first, end *array.Int64Builder
	shard, prompt, promptServer     *array.Int32Builder
	outTarget, out, httpStatus      *array.Int32Builder
	chunks, chunkTokens             *array.ListBuilder
	source, status, err             *array.StringBuilder
	ttft, tpot, e2e                 *array.Float64Builder
	sessionID, sessionWait          *array.Int64Builder // nil when the schema is older than revision 1.1
	turn, cached                    *array.Int32Builder
	gap, recArrival, recDuration    *array.Int64Builder // nil when the schema is older than revision 1.2
	recCached                       *array.Int32Builder
	firstAnswer                     *array.Int64Builder // nil when the schema is older than revision 1.3
	reasoning                       *array.Int32Builder
	reasoningSource                 *array.StringBuilder
	images, imageTokens, inputs     *array.Int32Builder // nil when the schema is older than revision 1.4
}

func bindFixture(tb testing.TB, b *array.RecordBuilder) *fixtureBuilders {
	tb.Helper()
	bs, err := results.NewBuilders(b)
	if err != nil {
		tb.Fatal(err)
	}
	c := &fixtureBuilders{
		id:           results.Builder[*array.Int64Builder](bs, results.ColRequestID),
		shard:        results.Builder[*array.Int32Builder](bs, results.ColShard),
		scheduled:    results.Builder[*array.Int64Builder](bs, results.ColScheduledNS),
		sent:         results.Builder[*array.Int64Builder](bs, results.ColSentNS),
		first:        results.Builder[*array.Int64Builder](bs, results.ColFirstTokenNS),
		end:          results.Builder[*array.Int64Builder](bs, results.ColEndNS),
		chunks:       results.Builder[*array.ListBuilder](bs, results.ColChunkNS),
		chunkTokens:  results.Builder[*array.ListBuilder](bs, results.ColChunkTokens),
		prompt:       results.Builder[*array.Int32Builder](bs, results.ColPromptTokens),
		promptServer: results.Builder[*array.Int32Builder](bs, results.ColPromptTokensServer),
		outTarget:    results.Builder[*array.Int32Builder](bs, results.ColOutputTokensTarget),
		out:          results.Builder[*array.Int32Builder](bs, results.ColOutputTokens),
		source:       results.Builder[*array.StringBuilder](bs, results.ColOutputTokensSource),
		status:       results.Builder[*array.StringBuilder](bs, results.ColStatus),
		httpStatus:   results.Builder[*array.Int32Builder](bs, results.ColHTTPStatus),
		err:          results.Builder[*array.StringBuilder](bs, results.ColError),
		ttft:         results.Builder[*array.Float64Builder](bs, results.ColTTFTMS),
		tpot:         results.Builder[*array.Float64Builder](bs, results.ColTPOTMS),
		e2e:          results.Builder[*array.Float64Builder](bs, results.ColE2EMS),
	}
	// A schema of revision 1.0 (an older file) lacks the revision-1.1 columns.
	has := func(name string) bool { return len(b.Schema().FieldIndices(name)) > 0 }
	if has(results.ColSessionID) {
		c.sessionID = results.Builder[*array.Int64Builder](bs, results.ColSessionID)
	}
	if has(results.ColTurn) {
		c.turn = results.Builder[*array.Int32Builder](bs, results.ColTurn)
	}
	if has(results.ColSessionWaitNS) {
		c.sessionWait = results.Builder[*array.Int64Builder](bs, results.ColSessionWaitNS)
	}
	if has(results.ColPromptTokensCached) {
		c.cached = results.Builder[*array.Int32Builder](bs, results.ColPromptTokensCached)
	}
	if has(results.ColGapNS) {
		c.gap = results.Builder[*array.Int64Builder](bs, results.ColGapNS)
		c.recArrival = results.Builder[*array.Int64Builder](bs, results.ColRecordedArrivalNS)
		c.recDuration = results.Builder[*array.Int64Builder](bs, results.ColRecordedDurationNS)
		c.recCached = results.Builder[*array.Int32Builder](bs, results.ColRecordedCachedTokens)
	}
	if has(results.ColFirstAnswerNS) {
		c.firstAnswer = results.Builder[*array.Int64Builder](bs, results.ColFirstAnswerNS)
		c.reasoning = results.Builder[*array.Int32Builder](bs, results.ColReasoningTokens)
		c.reasoningSource = results.Builder[*array.StringBuilder](bs, results.ColReasoningTokensSource)
	}
	if has(results.ColInputs) {
		c.images = results.Builder[*array.Int32Builder](bs, results.ColImages)
		c.imageTokens = results.Builder[*array.Int32Builder](bs, results.ColImageTokens)
		c.inputs = results.Builder[*array.Int32Builder](bs, results.ColInputs)
	}
	if err := bs.Done(); err != nil {
		tb.Fatal(err)
	}
	return c
}

func buildRecord(tb testing.TB, sc *arrow.Schema, rows []row) arrow.Record {
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	c := bindFixture(tb, b)
	i64 := func(b *array.Int64Builder, v *int64) {
		if v == nil {
			b.AppendNull()
		} else {
			b.Append(*v)
		}
	}
	i32 := func(b *array.Int32Builder, v *int32) {
		if v == nil {
			b.AppendNull()
		} else {
			b.Append(*v)
		}
	}
	f64 := func(b *array.Float64Builder, v *float64) {
		if v == nil {
			b.AppendNull()
		} else {
			b.Append(*v)
		}
	}
	for _, r := range rows {
		c.id.Append(r.id)
		c.shard.Append(r.shard)
		c.scheduled.Append(r.scheduled)
		i64(c.sent, r.sent)
		i64(c.first, r.first)
		i64(c.end, r.end)
		c.chunks.Append(true)
		c.chunks.ValueBuilder().(*array.Int64Builder).AppendValues(r.chunks, nil)
		if r.chunkTokens == nil {
			c.chunkTokens.AppendNull()
		} else {
			c.chunkTokens.Append(true)
			c.chunkTokens.ValueBuilder().(*array.Int32Builder).AppendValues(r.chunkTokens, nil)
		}
		c.prompt.Append(r.prompt)
		i32(c.promptServer, r.promptServer)
		c.outTarget.Append(r.outTarget)
		i32(c.out, r.out)
		c.source.Append(r.source)
		c.status.Append(r.status)
		i32(c.httpStatus, r.httpStatus)
		if r.err == nil {
			c.err.AppendNull()
		} else {
			c.err.Append(*r.err)
		}
		// Derived columns as the contract defines them.
		ttft, tpot, e2e := r.ttft, r.tpot, r.e2e
		switch {
		case r.status != "ok" || ttft != nil:
		case r.first == nil: // not streamed (embeddings, rerank): latency only
			if e2e == nil && r.end != nil {
				e2e = pf(float64(*r.end-*r.sent) / 1e6)
			}
		default:
			ttft = pf(float64(*r.first-*r.sent) / 1e6)
			e2e = pf(float64(*r.end-*r.sent) / 1e6)
			if r.out != nil && *r.out > 1 {
				tpot = pf(float64(*r.end-*r.first) / 1e6 / float64(*r.out-1))
			}
		}
		f64(c.ttft, ttft)
		f64(c.tpot, tpot)
		f64(c.e2e, e2e)
		if c.sessionID != nil {
			i64(c.sessionID, r.sessionID)
		}
		if c.turn != nil {
			i32(c.turn, r.turn)
		}
		if c.sessionWait != nil {
			i64(c.sessionWait, r.sessionWait)
		}
		if c.cached != nil {
			i32(c.cached, r.cached)
		}
		if c.gap != nil {
			i64(c.gap, r.gap)
			i64(c.recArrival, r.recArrival)
			i64(c.recDuration, r.recDuration)
			i32(c.recCached, r.recCached)
		}
		if c.firstAnswer != nil {
			i64(c.firstAnswer, r.firstAnswer)
			i32(c.reasoning, r.reasoning)
			results.AppendString(c.reasoningSource, r.reasoningSource)
		}
		if c.inputs != nil {
			i32(c.images, r.images)
			i32(c.imageTokens, r.imageTokens)
			i32(c.inputs, r.inputs)
		}
	}
	return b.NewRecord()
}

func tempResults(tb testing.TB, meta results.RunMeta, rows []row) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "results.parquet")
	writeResults(tb, p, meta, rows)
	return p
}
