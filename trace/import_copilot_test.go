package trace

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

// copilotSample is a GitHub Copilot coding-agent trace written by hand from the published
// schema (Azure/AzurePublicDataset, analysis/GitHubCopilotCodingAgents/schema.json): not
// real data. testdata/traces/SOURCES.md describes it.
const copilotSample = "copilot-agent.sample.jsonl"

func readCopilotSample(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tracesDir(t), copilotSample))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dagCheck runs trace.DAGCheck over every row, as replay's plan and trace info do.
func dagCheck(t *testing.T, rows []Request) {
	t.Helper()
	d := NewDAGCheck("imported")
	for i := range rows {
		if err := d.Add(&rows[i]); err != nil {
			t.Fatal(err)
		}
	}
}

// wantCall is one expected row of the sample: the call's fields as the mapping gives them.
type wantCall struct {
	id           int64
	arrival      time.Duration
	prompt, out  int32
	session      string
	model        string
	parent       int64 // -1: none
	gap          time.Duration
	kind         string
	dur          time.Duration
	cached       int32
	sessionKnown bool
}

func (w wantCall) request() Request {
	h := fnv.New64a() // FNV-1a 64, masked non-negative: BurstGPT's session ids
	h.Write([]byte(w.session))
	c := NewCall()
	c.Duration, c.CachedTokens = w.dur, w.cached
	if w.parent >= 0 {
		c.Parents, c.Gap, c.GapKind = []int64{w.parent}, w.gap, w.kind
	}
	return Request{ID: w.id, Arrival: w.arrival, PromptTokens: w.prompt, OutputTokens: w.out,
		SessionID: int64(h.Sum64() & math.MaxInt64), HasSession: true, Model: w.model, Call: c}
}

// TestCopilotSample checks every field of every row of the hand-written sample against
// the mapping of docs/trace-format.md, worked out by hand from the sample's timestamps:
// request ids in file order, rows in arrival order across interleaved sessions, parents
// by tool batch, by turn and by user turn, gaps from the parent's end.
func TestCopilotSample(t *testing.T) {
	ms := time.Millisecond
	const a, b, c = "9f2c1e7ab04d4d55", "b7e4d2", "c0ffee-01"
	want := []wantCall{
		// Session a, turn 0: user call, then agent calls after tool batches.
		{id: 0, arrival: 0, prompt: 12000, out: 150, session: a, model: "Model A", parent: -1, dur: 2000 * ms, cached: 0},
		// Session b starts 1 s later; its calls are listed out of time order in the file.
		{id: 7, arrival: 1000 * ms, prompt: 8000, out: 120, session: b, model: "Model B", parent: -1, dur: 1000 * ms, cached: 0},
		// Named by b's first batch, but began 0.2 s before b1 ended: gap 0, counted.
		{id: 6, arrival: 1800 * ms, prompt: 9000, out: 40, session: b, model: "Model B", parent: 7, gap: 0, kind: GapTool, dur: 500 * ms, cached: Unknown},
		// ServerError with 0/0 tokens: kept, lengths raised to 1; waits for b2, whose batch led to it.
		{id: 8, arrival: 4000 * ms, prompt: 1, out: 1, session: b, model: "Model B", parent: 6, gap: 1700 * ms, kind: GapTool, dur: 250 * ms, cached: 0},
		// a2: after a1's batch of three function calls: 5.3 s - (0 + 2 s).
		{id: 1, arrival: 5300 * ms, prompt: 15000, out: 80, session: a, model: "Model A", parent: 0, gap: 3300 * ms, kind: GapTool, dur: 1500500 * time.Microsecond, cached: 11800},
		// The edit tool's model call, during a2's batch: waits for a2, 6.95 s - 6.8005 s.
		{id: 2, arrival: 6950 * ms, prompt: 2000, out: 1900, session: a, model: "tool-model", parent: 1, gap: 149500 * time.Microsecond, kind: GapTool, dur: 300 * ms, cached: 0},
		// a3 waits for a2 (named by a batch), not for the tool-model call (named by none).
		{id: 3, arrival: 7500 * ms, prompt: 15500, out: 60, session: a, model: "Model A", parent: 1, gap: 699500 * time.Microsecond, kind: GapTool, dur: 900 * ms, cached: 15000},
		// Session c: an agent call opens the session (no parents).
		{id: 9, arrival: 60 * time.Second, prompt: 30000, out: 500, session: c, model: "Model A", parent: -1, dur: 4000 * ms, cached: 29000},
		// An agent call that opens its turn: the human's gap after the last call of the previous turn.
		{id: 10, arrival: 90250 * ms, prompt: 31000, out: 20, session: c, model: "Model A", parent: 9, gap: 26250 * ms, kind: GapUser, dur: 1200 * ms, cached: 30500},
		// No batch names any call of the turn: the previous call of the turn.
		{id: 11, arrival: 100 * time.Second, prompt: 31200, out: 300, session: c, model: "Model A", parent: 10, gap: 8550 * ms, kind: GapTool, dur: 800 * ms, cached: 31000},
		// a4, the user's second turn: after a3's end (8.4 s), 111.6 s of the human.
		{id: 4, arrival: 120 * time.Second, prompt: 16000, out: 200, session: a, model: "Model A", parent: 3, gap: 111600 * ms, kind: GapUser, dur: 2500 * ms, cached: 15400},
		// UserCancel with 0 completion tokens: kept, raised to 1.
		{id: 5, arrival: 130 * time.Second, prompt: 16500, out: 1, session: a, model: "Model A", parent: 4, gap: 7500 * ms, kind: GapTool, dur: 700 * ms, cached: 16000},
	}
	src := readCopilotSample(t)
	rows, meta, rep, err := importString(t, string(src), ImportOptions{Format: FormatCopilotAgent})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		if got, exp := rows[i], w.request(); !reflect.DeepEqual(got, exp) {
			t.Errorf("row %d:\n got %+v call %+v\nwant %+v call %+v", i, got, *got.Call, exp, *exp.Call)
		}
	}
	dagCheck(t, rows)
	if start := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC).UnixNano(); meta.Source != "copilot-agent" || meta.StartUnixNS != start {
		t.Errorf("meta %+v, want source copilot-agent, start %d", meta, start)
	}
	wantAdj := map[string]int64{
		copilotNegativeGap:                1,
		copilotZeroCompletion:             2,
		copilotZeroPrompt:                 1,
		copilotKeptPrefix + "UserCancel":  1,
		copilotKeptPrefix + "ServerError": 1,
	}
	if rep.RowsRead != 12 || rep.RowsWritten != 12 || rep.Dropped != nil || !reflect.DeepEqual(rep.Adjusted, wantAdj) || rep.Span != 130*time.Second {
		t.Errorf("report %+v, want 12 read and written, span 130 s, adjusted %v", rep, wantAdj)
	}

	// The same file gzipped, as the release ships its shards, imports to the same rows.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(src)
	zw.Close()
	zrows, _, _, err := importString(t, gz.String(), ImportOptions{Format: FormatCopilotAgent})
	if err != nil || !reflect.DeepEqual(zrows, rows) {
		t.Errorf("gzipped sample: %v, rows differ: %v", err, !reflect.DeepEqual(zrows, rows))
	}

	// --limit keeps the earliest rows by arrival, so every kept call's parents are kept.
	lrows, _, _, err := importString(t, string(src), ImportOptions{Format: FormatCopilotAgent, Limit: 5})
	if err != nil || len(lrows) != 5 || !reflect.DeepEqual(lrows, rows[:5]) {
		t.Errorf("limit 5: %d rows, %v", len(lrows), err)
	}
	dagCheck(t, lrows)
}

// copilotLine is a session line with the given turns (JSON arrays of calls and batches).
func copilotLine(session string, turns ...string) string {
	return fmt.Sprintf(`{"session_id": %q, "date": "2026-06-01", "turns": [%s]}`, session, strings.Join(turns, ", "))
}

func copilotTurn(calls, batches string) string {
	return fmt.Sprintf(`{"turn_id": "t", "llm_calls": [%s], "tool_batches": [%s]}`, calls, batches)
}

func copilotCallJSON(id, ts string, dur float64, init string, prompt, completion int) string {
	return fmt.Sprintf(`{"message_id": %q, "timestamp": %q, "duration_ms": %v, "initiator_type": %q, "model": "Model A", "result": "Success", "status_code": "OK", "tokens": {"total": %d, "prompt": %d, "completion": %d, "cached": 0, "cached_pct": 0.0}, "message_metadata": []}`,
		id, ts, dur, init, prompt+completion, prompt, completion)
}

// TestCopilotUserCalls checks where user-initiated calls hang: on the latest call of
// another turn even when a call of their own turn came first, and on the previous call
// when there is no other turn.
func TestCopilotUserCalls(t *testing.T) {
	src := copilotLine("s",
		copilotTurn(copilotCallJSON("u1", "2026-06-01T10:00:00Z", 1000, "user", 10, 5), ""),
		copilotTurn(copilotCallJSON("x", "2026-06-01T10:00:10Z", 100, "agent", 10, 5)+", "+
			copilotCallJSON("u2", "2026-06-01T10:00:10.5Z", 500, "user", 10, 5), "")) + "\n" +
		copilotLine("s2", copilotTurn(copilotCallJSON("a", "2026-06-01T10:00:20Z", 1000, "agent", 10, 5)+", "+
			copilotCallJSON("b", "2026-06-01T10:00:22Z", 500, "user", 10, 5), ""))
	rows, _, _, err := importString(t, src, ImportOptions{Format: FormatCopilotAgent})
	if err != nil {
		t.Fatal(err)
	}
	type link struct {
		id, parent int64
		gap        time.Duration
		kind       string
	}
	var got []link
	for _, r := range rows {
		if r.HasParents() {
			got = append(got, link{r.ID, r.Call.Parents[0], r.Call.Gap, r.Call.GapKind})
		}
	}
	want := []link{
		{1, 0, 9 * time.Second, GapUser},         // x opens turn 1: after u1's end
		{2, 0, 9500 * time.Millisecond, GapUser}, // u2: u1 too, not x of its own turn
		{4, 3, 1000 * time.Millisecond, GapUser}, // b: the first turn's previous call
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("links %+v, want %+v", got, want)
	}
	dagCheck(t, rows)
}

// TestCopilotCachedClamped checks that a cache hit above the prompt (the file's, or after a
// zero prompt was raised to 1) is clamped to the prompt and counted.
func TestCopilotCachedClamped(t *testing.T) {
	over := strings.Replace(copilotCallJSON("a", "2026-06-01T10:00:00Z", 10, "user", 10, 5), `"cached": 0`, `"cached": 12`, 1)
	zero := strings.Replace(copilotCallJSON("b", "2026-06-01T10:00:01Z", 10, "agent", 0, 5), `"cached": 0`, `"cached": 3`, 1)
	rows, _, rep, err := importString(t, copilotLine("s", copilotTurn(over+", "+zero, "")), ImportOptions{Format: FormatCopilotAgent})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Call.CachedTokens != 10 || rows[1].PromptTokens != 1 || rows[1].Call.CachedTokens != 1 ||
		rep.Adjusted[copilotCachedClamped] != 2 || rep.Adjusted[copilotZeroPrompt] != 1 {
		t.Errorf("rows %+v %+v, report %v", rows[0].Call, rows[1].Call, rep.Adjusted)
	}
}

// TestCopilotNulls checks the values a call may hold as null (not recorded): a count read
// as 0 as the publisher's scripts read it, then raised to 1; a duration unknown, and with
// it the gap of the call that waits for it; each counted apart.
func TestCopilotNulls(t *testing.T) {
	first := strings.NewReplacer(`"prompt": 10`, `"prompt": null`, `"completion": 5`, `"completion": null`, `"duration_ms": 10`, `"duration_ms": null`).
		Replace(copilotCallJSON("a", "2026-06-01T10:00:00Z", 10, "user", 10, 5))
	next := copilotCallJSON("b", "2026-06-01T10:00:01Z", 10, "agent", 10, 5)
	rows, _, rep, err := importString(t, copilotLine("s", copilotTurn(first+", "+next, "")), ImportOptions{Format: FormatCopilotAgent})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].PromptTokens != 1 || rows[0].OutputTokens != 1 || rows[0].Call.Duration != Unknown ||
		!reflect.DeepEqual(rows[1].Call.Parents, []int64{0}) || rows[1].Call.Gap != Unknown || rows[1].Call.GapKind != GapTool {
		t.Fatalf("rows %+v %+v / %+v %+v", rows[0], *rows[0].Call, rows[1], *rows[1].Call)
	}
	want := map[string]int64{
		"null prompt tokens (not recorded) read as 0, raised to 1":     1,
		"null completion tokens (not recorded) read as 0, raised to 1": 1,
		copilotNullDuration: 1,
	}
	if !reflect.DeepEqual(rep.Adjusted, want) {
		t.Errorf("adjusted %v, want %v", rep.Adjusted, want)
	}
	dagCheck(t, rows)
}

// TestCopilotCancel checks that a cancelled import stops while it reads the lines (the
// sort buffer never returns to the pipeline's own check).
func TestCopilotCancel(t *testing.T) {
	var lines []string
	for i := range 1100 {
		lines = append(lines, copilotLine(fmt.Sprint(i), copilotTurn(copilotCallJSON("m", "2026-06-01T10:00:00Z", 10, "user", 10, 5), "")))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := Import(ctx, strings.NewReader(strings.Join(lines, "\n")), ImportOptions{Format: FormatCopilotAgent}, NewWriter(io.Discard, Meta{}))
	if !errors.Is(err, context.Canceled) || rep.RowsRead >= 1100 {
		t.Errorf("cancelled import: %v after %d calls", err, rep.RowsRead)
	}
}

// TestCopilotErrors checks that bad input stops the import with the file, the session's
// line and the field's path.
func TestCopilotErrors(t *testing.T) {
	good := copilotLine("ok", copilotTurn(copilotCallJSON("m1", "2026-06-01T10:00:00Z", 10, "user", 10, 5), ""))
	call := func(f func(string) string) string {
		return copilotLine("s", copilotTurn(f(copilotCallJSON("m1", "2026-06-01T10:00:01Z", 10, "user", 10, 5)), ""))
	}
	sub := func(old, new string) func(string) string {
		return func(s string) string { return strings.Replace(s, old, new, 1) }
	}
	batch := func(rid string) string {
		return copilotLine("s", copilotTurn(copilotCallJSON("m1", "2026-06-01T10:00:01Z", 10, "user", 10, 5),
			`{"timestamp": "2026-06-01T10:00:02Z", "duration_ms": 5, "auto_continue": true, "result": "Success", `+rid+`"function_calls": [{"name": "read_file", "status": 1, "duration_ms": 5}]}`))
	}
	cases := []struct{ name, line, want string }{
		{"batch names no call", batch(`"request_id": "m9", `), `turns[0].tool_batches[0].request_id: "m9" names no call of this session`},
		{"batch without request_id", batch(""), `turns[0].tool_batches[0].request_id: missing`},
		{"missing prompt", call(sub(`"prompt": 10, `, "")), "turns[0].llm_calls[0].tokens.prompt: missing"},
		{"missing tokens", call(sub(`"tokens"`, `"tokens_"`)), "turns[0].llm_calls[0].tokens.prompt: missing"},
		{"missing completion", call(sub(`, "completion": 5`, "")), "turns[0].llm_calls[0].tokens.completion: missing"},
		{"fractional prompt", call(sub(`"prompt": 10`, `"prompt": 10.5`)), `tokens.prompt: "10.5" is not a non-negative integer`},
		{"prompt out of range", call(sub(`"prompt": 10`, `"prompt": 3000000000`)), "tokens.prompt: 3000000000 is out of range"},
		{"negative cached", call(sub(`"cached": 0`, `"cached": -3`)), "tokens.cached:"},
		{"bad timestamp", call(sub("10:00:01Z", "25:00:01Z")), "turns[0].llm_calls[0].timestamp:"},
		{"numeric timestamp", call(sub(`"2026-06-01T10:00:01Z"`, "1780308001")), "turns[0].llm_calls[0].timestamp: 1780308001 is not a string"},
		{"missing timestamp", call(sub(`"timestamp"`, `"time"`)), "turns[0].llm_calls[0].timestamp: missing"},
		{"negative duration", call(sub(`"duration_ms": 10`, `"duration_ms": -10`)), "duration_ms: -10 ms is not a duration"},
		{"missing duration", call(sub(`"duration_ms": 10, `, "")), "duration_ms: missing"},
		{"initiator", call(sub(`"user"`, `"system"`)), `initiator_type: "system", want user`},
		{"missing initiator", call(sub(`"initiator_type": "user", `, "")), `initiator_type: "", want user`},
		{"model not a string", call(sub(`"Model A"`, "7")), "turns[0].llm_calls[0].model: 7 is not a string"},
		{"duplicate message_id", copilotLine("s", copilotTurn(copilotCallJSON("m1", "2026-06-01T10:00:01Z", 10, "user", 10, 5)+", "+
			copilotCallJSON("m1", "2026-06-01T10:00:02Z", 10, "agent", 10, 5), "")), `turns[0].llm_calls[1].message_id: "m1" is also the message_id of the call with request_id 1`},
		{"missing session_id", strings.Replace(call(func(s string) string { return s }), `"session_id": "s"`, `"session_id": null`, 1), "session_id: missing"},
		{"not an object", `[1, 2]`, "not a session object"},
		{"not json", `{"session_id": "s", "turns": [`, "not a session object"},
		{"turns not a list", `{"session_id": "s", "turns": {}}`, "not a session object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, _, err := importString(t, good+"\n"+c.line+"\n", ImportOptions{Format: FormatCopilotAgent})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			var se *SyntaxError
			if !errors.As(err, &se) || se.File != "in.txt" || se.Line != 2 || !strings.Contains(err.Error(), "in.txt line 2: ") {
				t.Errorf("error %q is not a *SyntaxError naming in.txt line 2", err)
			}
		})
	}
	// A CSV given as this format is refused before any parsing.
	if _, _, _, err := importString(t, "TIMESTAMP,ContextTokens\n1,2\n", ImportOptions{Format: FormatCopilotAgent}); err == nil || !strings.Contains(err.Error(), "not copilot-agent JSON") {
		t.Errorf("CSV input: %v", err)
	}
}

// TestCopilotResultKeysBounded checks that a file with many distinct results names at
// most copilotMaxResultKeys of them in the report.
func TestCopilotResultKeysBounded(t *testing.T) {
	var lines []string
	for i := range 40 {
		c := strings.Replace(copilotCallJSON("m", fmt.Sprintf("2026-06-01T10:00:%02dZ", i), 10, "user", 10, 5), `"Success"`, fmt.Sprintf(`"R%d\u0007"`, i), 1)
		lines = append(lines, copilotLine(fmt.Sprint(i), copilotTurn(c, "")))
	}
	_, _, rep, err := importString(t, strings.Join(lines, "\n"), ImportOptions{Format: FormatCopilotAgent})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Adjusted) != copilotMaxResultKeys+1 || rep.Adjusted[copilotKeptPrefix+"other"] != 40-copilotMaxResultKeys {
		t.Errorf("adjusted %v", rep.Adjusted)
	}
	for k := range rep.Adjusted {
		if strings.ContainsRune(k, '\a') {
			t.Errorf("report key %q carries a control byte", k)
		}
	}
}

// FuzzImportCopilotAgent checks that the importer never panics, and that whatever it
// accepts reads back row for row and passes the cross-row checks (parents earlier, same
// session, ids unique). The seed is the hand-written sample.
func FuzzImportCopilotAgent(f *testing.F) {
	f.Add(string(readCopilotSample(f)))
	f.Add(copilotLine("s", copilotTurn(copilotCallJSON("a", "2026-06-01T10:00:00Z", 1e3, "user", 10, 0), "")))
	f.Fuzz(func(t *testing.T, data string) {
		fuzzAgentImport(t, FormatCopilotAgent, data)
	})
}

// BenchmarkImportCopilotMemory measures the heap the import holds per row when every row
// is buffered for the sort, the figure docs/trace-format.md gives:
//
//	go test ./trace -run '^$' -bench ImportCopilotMemory -benchtime 1x
func BenchmarkImportCopilotMemory(b *testing.B) {
	const sessions, turns, calls = 2000, 4, 25 // 200,000 rows, in sessions shaped like the release's
	var src strings.Builder
	t0 := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	for s := range sessions {
		var ts []string
		for u := range turns {
			var cs, bs []string
			for k := range calls {
				at := t0.Add(time.Duration(s)*time.Second + time.Duration(u*calls+k)*7*time.Second)
				init := "agent"
				if k == 0 {
					init = "user"
				}
				id := fmt.Sprintf("m%d-%d", u, k)
				cs = append(cs, copilotCallJSON(id, at.Format(time.RFC3339Nano), 2000, init, 40000, 100))
				bs = append(bs, fmt.Sprintf(`{"request_id": %q, "function_calls": []}`, id))
			}
			ts = append(ts, copilotTurn(strings.Join(cs, ", "), strings.Join(bs, ", ")))
		}
		src.WriteString(copilotLine(fmt.Sprintf("%016x", s*7919), ts...) + "\n")
	}
	in := src.String()
	rowsN := float64(sessions * turns * calls)
	for b.Loop() {
		opts := ImportOptions{Format: FormatCopilotAgent, Name: "bench"}
		rep := ImportReport{}
		p := &pipeline{ctx: context.Background(), name: "bench", opts: &opts, w: NewWriter(io.Discard, Meta{}), rep: &rep, what: "line"}
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		if err := importCopilot(strings.NewReader(in), p); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/rowsN, "heap-B/row")
		if err := p.finish(); err != nil {
			b.Fatal(err)
		}
		if rep.RowsWritten != int64(rowsN) {
			b.Fatalf("%d rows written", rep.RowsWritten)
		}
	}
}
