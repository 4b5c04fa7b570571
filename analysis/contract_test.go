package analysis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// contractServer streams like vLLM's /v1/completions, deterministically from the request:
// a prompt of 4 words gets HTTP 503; any other prompt gets max_tokens one-token chunks with
// continuous usage (prompt_tokens = the prompt's words), a usage chunk and [DONE]. The usage
// chunk of an even prompt carries prompt_tokens_details.cached_tokens = words/2 (vLLM with
// --enable-prompt-tokens-details); an odd prompt's has none.
func contractServer(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Prompt        string `json:"prompt"`
		MaxTokens     int    `json:"max_tokens"`
		StreamOptions struct {
			ContinuousUsageStats bool `json:"continuous_usage_stats"`
		} `json:"stream_options"`
	}
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &b); err != nil {
		http.Error(w, "bad json", 400)
		return
	}
	prompt := len(strings.Fields(b.Prompt))
	if prompt == 4 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(503)
		fmt.Fprint(w, `{"error":{"message":"busy","type":"ServiceUnavailable"}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	for i := 1; i <= b.MaxTokens; i++ {
		usage := ""
		if b.StreamOptions.ContinuousUsageStats {
			usage = fmt.Sprintf(`,"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, prompt, i, prompt+i)
		}
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" tok\",\"finish_reason\":null}]%s}\n\n", usage)
		f.Flush()
		time.Sleep(time.Millisecond) // distinct chunk times; the test asserts no timing
	}
	details := ""
	if prompt%2 == 0 {
		details = fmt.Sprintf(`,"prompt_tokens_details":{"cached_tokens":%d}`, prompt/2)
	}
	fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d%s}}\n\n", prompt, b.MaxTokens, details)
	fmt.Fprint(w, "data: [DONE]\n\n")
	f.Flush()
}

// contractTrace: request i has 3 + i%5 prompt tokens (4 means HTTP 503) and 1 + i%4
// output tokens (1 gives a null tpot_ms), arriving every 5 ms.
func contractTrace() []trace.Request {
	reqs := make([]trace.Request, 12)
	for i := range reqs {
		reqs[i] = trace.Request{ID: int64(1000 + i), Arrival: time.Duration(i) * 5 * time.Millisecond,
			PromptTokens: int32(3 + i%5), OutputTokens: int32(1 + i%4)}
	}
	return reqs
}

// contractColumns reads every column of a results file by name through the contract, row
// by row in file order: the columns analysis does not keep (request_id, shard, http_status,
// error, the derived *_ms) and chunk_ns/chunk_tokens, whose lists analysis does not keep.
type contractRow struct {
	id                int64
	shard, httpStatus int32
	errMsg            *string
	chunkNS           []int64
	chunkTokens       []int32 // nil = null
	ttft, tpot, e2e   *float64
	// Revision 1.1; results.Null when null.
	sessionID, sessionWait int64
	turn, cached           int32
	// Revision 1.2; results.Null when null.
	gap, recArrival, recDuration int64
	recCached                    int32
	// Revision 1.3; results.Null (or "") when null.
	firstAnswer     int64
	reasoning       int32
	reasoningSource string
	// Revision 1.4; results.Null when null.
	images, imageTokens, inputs int32
}

func readContractRows(t *testing.T, path string) []contractRow {
	t.Helper()
	pr, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 1024}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := fr.Schema()
	if err != nil {
		t.Fatal(err)
	}
	l, err := results.Check(sc)
	if err != nil {
		t.Fatal(err)
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	var out []contractRow
	f64 := func(a *array.Float64, i int) *float64 {
		if a.IsNull(i) {
			return nil
		}
		v := a.Value(i)
		return &v
	}
	for rr.Next() {
		rec := rr.Record()
		x := results.NewArrays(rec, l)
		id := results.Array[*array.Int64](x, results.ColRequestID)
		shard := results.Array[*array.Int32](x, results.ColShard)
		hs := results.Array[*array.Int32](x, results.ColHTTPStatus)
		em := results.Array[*array.String](x, results.ColError)
		cns := results.Array[*array.List](x, results.ColChunkNS)
		ctk := results.Array[*array.List](x, results.ColChunkTokens)
		ttft := results.Array[*array.Float64](x, results.ColTTFTMS)
		tpot := results.Array[*array.Float64](x, results.ColTPOTMS)
		e2e := results.Array[*array.Float64](x, results.ColE2EMS)
		sid := results.Array[*array.Int64](x, results.ColSessionID)
		turn := results.Array[*array.Int32](x, results.ColTurn)
		wait := results.Array[*array.Int64](x, results.ColSessionWaitNS)
		cached := results.Array[*array.Int32](x, results.ColPromptTokensCached)
		gap := results.Array[*array.Int64](x, results.ColGapNS)
		recA := results.Array[*array.Int64](x, results.ColRecordedArrivalNS)
		recD := results.Array[*array.Int64](x, results.ColRecordedDurationNS)
		recC := results.Array[*array.Int32](x, results.ColRecordedCachedTokens)
		fa := results.Array[*array.Int64](x, results.ColFirstAnswerNS)
		rt := results.Array[*array.Int32](x, results.ColReasoningTokens)
		rs := results.Array[*array.String](x, results.ColReasoningTokensSource)
		ims := results.Array[*array.Int32](x, results.ColImages)
		imt := results.Array[*array.Int32](x, results.ColImageTokens)
		inp := results.Array[*array.Int32](x, results.ColInputs)
		if err := x.Err(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			r := contractRow{id: id.Value(i), shard: shard.Value(i), httpStatus: results.Int32At(hs, i),
				ttft: f64(ttft, i), tpot: f64(tpot, i), e2e: f64(e2e, i),
				sessionID: results.Int64At(sid, i), turn: results.Int32At(turn, i), sessionWait: results.Int64At(wait, i), cached: results.Int32At(cached, i),
				gap: results.Int64At(gap, i), recArrival: results.Int64At(recA, i), recDuration: results.Int64At(recD, i), recCached: results.Int32At(recC, i),
				firstAnswer: results.Int64At(fa, i), reasoning: results.Int32At(rt, i), reasoningSource: results.StringAt(rs, i),
				images: results.Int32At(ims, i), imageTokens: results.Int32At(imt, i), inputs: results.Int32At(inp, i)}
			if em.IsValid(i) {
				s := em.Value(i)
				r.errMsg = &s
			}
			lo, hi := cns.ValueOffsets(i)
			r.chunkNS = slices.Clone(cns.ListValues().(*array.Int64).Int64Values()[lo:hi])
			if ctk.IsValid(i) {
				lo, hi := ctk.ValueOffsets(i)
				r.chunkTokens = append([]int32{}, ctk.ListValues().(*array.Int32).Int32Values()[lo:hi]...)
			}
			out = append(out, r)
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return out
}

// TestReplayedFileReadsEveryColumnByName writes a results file through the replayer
// (replay.Run against a deterministic loopback server) and reads every column of the
// contract back by name: the columns analysis keeps through Load, the others through the
// contract's reader, asserting each row's value from what the server and the trace decided.
func TestReplayedFileReadsEveryColumnByName(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(contractServer))
	defer ts.Close()
	base, err := wire.BaseURL(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := transport.NewClient(transport.ClientOptions{BaseURL: base, API: wire.APICompletions, Backend: wire.BackendVLLM,
		Model: "m", Timeout: 5 * time.Second, MaxInflight: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reqs := contractTrace()
	byID := map[int64]trace.Request{}
	for _, r := range reqs {
		byID[r.ID] = r
	}
	out := filepath.Join(t.TempDir(), "results.parquet")
	words := replay.PrompterFunc(func(dst []byte, r *trace.Request) ([]byte, error) {
		for range r.PromptTokens {
			dst = append(dst, "w "...)
		}
		return dst, nil
	})
	const speedup = 2
	if _, err := replay.Run(context.Background(), replay.Options{Source: trace.NewSliceSource(reqs), Client: c, Prompter: words,
		Speedup: speedup, Output: out, Grace: time.Second}); err != nil {
		t.Fatalf("Run: %v", err)
	}

	d, err := Load(context.Background(), decode.LoadOptions{}, out)
	if err != nil {
		t.Fatal(err)
	}
	rows := readContractRows(t, out)
	if d.N() != len(reqs) || len(rows) != len(reqs) {
		t.Fatalf("analysis read %d rows, the contract reader %d, want %d", d.N(), len(rows), len(reqs))
	}
	checked := map[string]bool{}
	seen := map[int64]bool{}
	for i, cr := range rows {
		checked[results.ColRequestID] = true
		req, ok := byID[cr.id]
		if !ok || seen[cr.id] {
			t.Fatalf("row %d: request_id %d not in the trace or seen twice", i, cr.id)
		}
		seen[cr.id] = true
		fail := req.PromptTokens == 4
		bad := func(col, format string, a ...any) {
			t.Helper()
			t.Errorf("row %d (request %d): %s: %s", i, cr.id, col, fmt.Sprintf(format, a...))
		}
		check := func(col string, ok bool, format string, a ...any) {
			t.Helper()
			checked[col] = true
			if !ok {
				bad(col, format, a...)
			}
		}
		// The trace has no sessions: the conversation columns are null (read by name,
		// through analysis and through the contract's reader alike).
		check(results.ColSessionID, d.SessionID == nil && cr.sessionID == results.Null, "%d, want null", cr.sessionID)
		check(results.ColTurn, d.Turn == nil && cr.turn == results.Null, "%d, want null", cr.turn)
		check(results.ColSessionWaitNS, d.SessionWait == nil && cr.sessionWait == results.Null, "%d, want null", cr.sessionWait)
		// Nor agent calls: the agent columns are null too.
		check(results.ColGapNS, d.Gap == nil && cr.gap == results.Null, "%d, want null", cr.gap)
		check(results.ColRecordedArrivalNS, d.RecArrival == nil && cr.recArrival == results.Null, "%d, want null", cr.recArrival)
		check(results.ColRecordedDurationNS, d.RecDuration == nil && cr.recDuration == results.Null, "%d, want null", cr.recDuration)
		check(results.ColRecordedCachedTokens, d.RecCached == nil && cr.recCached == results.Null, "%d, want null", cr.recCached)
		// Nor reasoning: no reasoning count, and (below) the first answer is the first token.
		check(results.ColReasoningTokens, d.Reasoning == nil && cr.reasoning == results.Null, "%d, want null", cr.reasoning)
		check(results.ColReasoningTokensSource, cr.reasoningSource == "", "%q, want null", cr.reasoningSource)
		// Nor images, and every request was a generation: no inputs.
		check(results.ColImages, d.Images == nil && cr.images == results.Null, "%d, want null", cr.images)
		check(results.ColImageTokens, d.ImageTokens == nil && cr.imageTokens == results.Null, "%d, want null", cr.imageTokens)
		check(results.ColInputs, d.Inputs == nil && cr.inputs == results.Null, "%d, want null", cr.inputs)
		wantCached := int32(results.Null)
		if !fail && req.PromptTokens%2 == 0 {
			wantCached = req.PromptTokens / 2
		}
		gotCached := d.Cached[i]
		if gotCached == decode.Null32 {
			gotCached = results.Null
		}
		check(results.ColPromptTokensCached, gotCached == wantCached && cr.cached == wantCached, "%d (contract reader %d), want %d", gotCached, cr.cached, wantCached)
		wantStatus := results.StatusOK
		if fail {
			wantStatus = results.StatusHTTPError
		}
		check(results.ColStatus, decode.Statuses[d.Status[i]] == wantStatus, "%s, want %s", decode.Statuses[d.Status[i]], wantStatus)
		check(results.ColShard, cr.shard == 0, "%d, want 0", cr.shard)
		due := int64(req.Arrival) / speedup
		check(results.ColScheduledNS, d.Scheduled[i] == due, "%d, want %d", d.Scheduled[i], due)
		check(results.ColSentNS, d.Sent[i] != decode.Null64 && d.Sent[i] >= due, "%d, want >= %d", d.Sent[i], due)
		check(results.ColPromptTokens, d.Prompt[i] == req.PromptTokens, "%d, want %d", d.Prompt[i], req.PromptTokens)
		check(results.ColOutputTokensTarget, d.OutTarget[i] == req.OutputTokens, "%d, want %d", d.OutTarget[i], req.OutputTokens)
		n := int(req.OutputTokens)
		if fail {
			n = 0
		}
		check(results.ColChunkNS, len(cr.chunkNS) == n && int(d.NChunks[i]) == n && slices.IsSorted(cr.chunkNS),
			"%v (analysis: %d chunks), want %d non-decreasing offsets", cr.chunkNS, d.NChunks[i], n)
		if fail {
			check(results.ColHTTPStatus, cr.httpStatus == 503, "%d, want 503", cr.httpStatus)
			check(results.ColError, cr.errMsg != nil && *cr.errMsg == "HTTP 503: busy", "%s, want HTTP 503: busy", str(cr.errMsg))
			check(results.ColFirstTokenNS, d.First[i] == decode.Null64, "%d, want null", d.First[i])
			check(results.ColFirstAnswerNS, d.FirstAnswer[i] == decode.Null64 && cr.firstAnswer == results.Null, "%d, want null", d.FirstAnswer[i])
			check(results.ColEndNS, d.End[i] == decode.Null64, "%d, want null", d.End[i])
			check(results.ColChunkTokens, cr.chunkTokens == nil && d.ChunkTokSum[i] == -1, "%v, want null", cr.chunkTokens)
			check(results.ColPromptTokensServer, d.PromptServer[i] == decode.Null32, "%d, want null", d.PromptServer[i])
			check(results.ColOutputTokens, d.OutTokens[i] == decode.Null32, "%d, want null", d.OutTokens[i])
			check(results.ColOutputTokensSource, d.OutSource[i] == 0, "%d, want empty", d.OutSource[i])
			check(results.ColTTFTMS, cr.ttft == nil, "%v, want null", cr.ttft)
			check(results.ColTPOTMS, cr.tpot == nil, "%v, want null", cr.tpot)
			check(results.ColE2EMS, cr.e2e == nil, "%v, want null", cr.e2e)
			continue
		}
		check(results.ColHTTPStatus, cr.httpStatus == 200, "%d, want 200", cr.httpStatus)
		check(results.ColError, cr.errMsg == nil, "%s, want null", str(cr.errMsg))
		if len(cr.chunkNS) != n {
			continue
		}
		s, f, e := d.Sent[i], d.First[i], d.End[i]
		check(results.ColFirstTokenNS, f == s+cr.chunkNS[0], "%d, want sent_ns + chunk_ns[0] = %d", f, s+cr.chunkNS[0])
		check(results.ColFirstAnswerNS, d.FirstAnswer[i] == f, "%d, want first_token_ns %d (no reasoning)", d.FirstAnswer[i], f)
		check(results.ColEndNS, e == s+cr.chunkNS[n-1], "%d, want sent_ns + chunk_ns[last] = %d", e, s+cr.chunkNS[n-1])
		ones := slices.Repeat([]int32{1}, n)
		check(results.ColChunkTokens, slices.Equal(cr.chunkTokens, ones) && d.ChunkTokSum[i] == int64(n), "%v (analysis: sum %d), want %v", cr.chunkTokens, d.ChunkTokSum[i], ones)
		check(results.ColPromptTokensServer, d.PromptServer[i] == req.PromptTokens, "%d, want %d", d.PromptServer[i], req.PromptTokens)
		check(results.ColOutputTokens, d.OutTokens[i] == req.OutputTokens, "%d, want %d", d.OutTokens[i], req.OutputTokens)
		check(results.ColOutputTokensSource, sourceName(d.OutSource[i]) == results.SourceUsage, "%q, want usage", sourceName(d.OutSource[i]))
		ttft, e2e := float64(f-s)/1e6, float64(e-s)/1e6
		check(results.ColTTFTMS, cr.ttft != nil && *cr.ttft == ttft, "%v, want %v", cr.ttft, ttft)
		check(results.ColE2EMS, cr.e2e != nil && *cr.e2e == e2e, "%v, want %v", cr.e2e, e2e)
		if n == 1 {
			check(results.ColTPOTMS, cr.tpot == nil, "%v, want null for one output token", cr.tpot)
		} else {
			tpot := (e2e - ttft) / float64(n-1)
			check(results.ColTPOTMS, cr.tpot != nil && *cr.tpot == tpot, "%v, want %v", cr.tpot, tpot)
		}
	}
	// A column added to the contract fails here until this test asserts its values.
	for _, col := range results.Columns() {
		if !checked[col.Name] {
			t.Errorf("column %s of the contract is not read back and checked", col.Name)
		}
	}
}

// sourceName names an output_tokens_source code of Data.
func sourceName(c uint8) string {
	return [...]string{"", results.SourceUsage, results.SourceTokenizer}[c]
}

// str formats a nullable string.
func str(p *string) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *p)
}

// TestStatusIndexes: Data stores a status as its index in the contract's order, named by
// the st* constants.
func TestStatusIndexes(t *testing.T) {
	for k, want := range map[uint8]results.Status{decode.StOK: results.StatusOK, decode.StHTTPError: results.StatusHTTPError,
		decode.StTimeout: results.StatusTimeout, decode.StTransportError: results.StatusTransportError, decode.StStreamError: results.StatusStreamError,
		decode.StDropped: results.StatusDropped, decode.StCanceled: results.StatusCanceled} {
		if decode.Statuses[k] != want {
			t.Errorf("statuses[%d] = %s, want %s", k, decode.Statuses[k], want)
		}
	}
	if len(decode.Statuses) != 7 {
		t.Errorf("%d statuses, want 7", len(decode.Statuses))
	}
}

// TestLoadFindsColumnsByName: a file whose columns come in another order (a notebook's
// rewrite) analyses exactly as the writer's order does; a file without a required column
// is refused, naming the column and the file.
func TestLoadFindsColumnsByName(t *testing.T) {
	const ms = int64(time.Millisecond)
	rows := []row{okRow(1, 0, 100*ms, 120*ms, 150*ms), okRow(2, 50*ms, 90*ms, 95*ms),
		{id: 3, scheduled: 60 * ms, prompt: 10, outTarget: 4, status: string(results.StatusDropped), err: new(string)}}
	*rows[2].err = "max-inflight"
	report := func(sc *arrow.Schema) (string, error) {
		p := filepath.Join(t.TempDir(), "r.parquet")
		writeResultsSchema(t, p, sc, rows)
		d, err := Load(context.Background(), decode.LoadOptions{}, p)
		if err != nil {
			return "", err
		}
		r, err := Analyze(d, DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		var js strings.Builder
		if err := r.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		return js.String(), nil
	}
	sc := resultsSchema(t, testRun())
	md := sc.Metadata()
	fs := sc.Fields()
	slices.Reverse(fs)
	want, err := report(sc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := report(arrow.NewSchema(fs, &md))
	if err != nil {
		t.Fatalf("reversed columns: %v", err)
	}
	if got != want {
		t.Errorf("reversed columns analyse differently:\n got %s\nwant %s", got, want)
	}

	// Drop end_ns from a good file, keeping the metadata.
	good := filepath.Join(t.TempDir(), "good.parquet")
	writeResults(t, good, testRun(), rows)
	f, err := os.Open(good)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tbl, err := pqarrow.ReadTable(context.Background(), f, nil, pqarrow.ArrowReadProperties{BatchSize: 64}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	var keep []arrow.Field
	var cols []arrow.Column
	for i, fd := range tbl.Schema().Fields() {
		if fd.Name != results.ColEndNS {
			keep, cols = append(keep, fd), append(cols, *tbl.Column(i))
		}
	}
	nt := array.NewTable(arrow.NewSchema(keep, &md), cols, tbl.NumRows())
	defer nt.Release()
	bad := filepath.Join(t.TempDir(), "no-end.parquet")
	out, err := os.Create(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := pqarrow.WriteTable(nt, out, 64, nil, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())); err != nil {
		t.Fatal(err)
	}
	_, err = Load(context.Background(), decode.LoadOptions{}, bad)
	var ce *results.Error
	if !errors.As(err, &ce) || ce.Column != results.ColEndNS || !strings.Contains(err.Error(), bad) {
		t.Errorf("without end_ns: %v; want an error naming the column and the file", err)
	}
}

// TestRevision14ColumnsRead: analysis reads images, image_tokens and inputs by name, a
// null as Null32, and a file without values in a column as a nil column; an ok request
// with inputs (not streamed) has no first token and its end follows its send, which a
// request without inputs may not do.
func TestRevision14ColumnsRead(t *testing.T) {
	const ms = int64(time.Millisecond)
	img := okRow(1, 0, 100*ms, 120*ms)
	img.images, img.imageTokens = p32(2), p32(600)
	text := okRow(2, 10*ms, 90*ms)
	emb := embeddingsRow(3, 20*ms, 30*ms, 8, 512)
	load := func(rows ...row) (*decode.Data, error) {
		return Load(context.Background(), decode.LoadOptions{}, tempResults(t, testRun(), rows))
	}
	d, err := load(img, text)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Images, []int32{2, decode.Null32}) || !slices.Equal(d.ImageTokens, []int32{600, decode.Null32}) || d.Inputs != nil {
		t.Errorf("images %v, image_tokens %v, inputs %v; want [2 null], [600 null], nil", d.Images, d.ImageTokens, d.Inputs)
	}
	d, err = load(emb, embeddingsRow(4, 40*ms, 10*ms, 1, 64))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.Inputs, []int32{8, 1}) || d.Images != nil || d.First[0] != decode.Null64 || d.E2EMS(0) != 30 {
		t.Errorf("inputs %v, images %v, first %d, e2e %v ms; want [8 1], nil, null, 30", d.Inputs, d.Images, d.First[0], d.E2EMS(0))
	}
	noFirst := text
	noFirst.first, noFirst.chunks = nil, nil
	backwards := emb
	backwards.end = p64(10 * ms)
	for _, c := range []struct {
		name  string
		rows  []row
		field string
	}{
		{"ok generation without a first token", []row{emb, noFirst}, results.ColFirstTokenNS},
		{"end before sent", []row{backwards}, results.ColEndNS},
	} {
		_, err := load(c.rows...)
		var fe *decode.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.field)
		}
	}
}
