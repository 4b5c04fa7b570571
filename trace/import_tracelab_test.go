package trace

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The sample is written by hand from TraceLab's published schema (uw-syfi/TraceLab:
// README.md "Data format", artifacts/utils/DB_SCHEMA.md, artifacts/utils/timing.py,
// scripts/extract_claude_rounds.py), not taken from real data: testdata/tracelab/SOURCES.md.
const tracelabSample = "testdata/tracelab/sample.jsonl"

// importTraceLabRows imports src as TraceLab and checks the rows as every pass that
// reads a whole trace does (DAGCheck).
func importTraceLabRows(t *testing.T, src string) ([]Request, Meta, ImportReport, error) {
	t.Helper()
	return importAgentRows(t, src, FormatTraceLab)
}

func TestTraceLabSample(t *testing.T) {
	src, err := os.ReadFile(tracelabSample)
	if err != nil {
		t.Fatal(err)
	}
	rows, meta, rep, err := importTraceLabRows(t, string(src))
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	call := func(parents []int64, gap time.Duration, kind string, dur time.Duration, prefix, cached, reasoning int32) *Call {
		return &Call{Parents: parents, Gap: gap, GapKind: kind, Duration: dur, PrefixTokens: prefix, CachedTokens: cached, ReasoningTokens: reasoning}
	}
	// Sorted by the time each round's input was ready; the two sessions overlap.
	want := []Request{
		// Claude round 0: a user's message at 10:00:00, last output (a tool_call) at 03.200.
		{ID: 0, Arrival: 0, PromptTokens: 20000, OutputTokens: 300, SessionID: 0, HasSession: true, Model: "claude-opus-4-8",
			Call: call(nil, Unknown, "", 3200*ms, Unknown, 0, Unknown)},
		// Codex round 0: user at 01.000, last output 02.000 (usage_report is not output).
		{ID: 3, Arrival: 1000 * ms, PromptTokens: 9000, OutputTokens: 500, SessionID: 1, HasSession: true, Model: "gpt-5.4",
			Call: call(nil, Unknown, "", 1000*ms, Unknown, 6912, 200)},
		// Codex round 1: its tool returned at 04.000, 2 s after its parent's end; 4000
		// tokens is less than the parent's 9000 + 500, so the shared prefix is the cache hit.
		{ID: 4, Arrival: 4000 * ms, PromptTokens: 4000, OutputTokens: 100, SessionID: 1, HasSession: true, Model: "gpt-5.4",
			Call: call([]int64{3}, 2000*ms, GapTool, 1500*ms, 3456, 3456, 30)},
		// Claude round 1: ready at the later tool result (05.000), 1.8 s after 03.200.
		{ID: 1, Arrival: 5000 * ms, PromptTokens: 20500, OutputTokens: 400, SessionID: 0, HasSession: true, Model: "claude-opus-4-8",
			Call: call([]int64{0}, 1800*ms, GapTool, 2000*ms, Unknown, 18000, Unknown)},
		// Claude round 2: the human wrote 60 s after the answer ended at 07.000.
		{ID: 2, Arrival: 67000 * ms, PromptTokens: 21000, OutputTokens: 50, SessionID: 0, HasSession: true, Model: "claude-opus-4-8",
			Call: call([]int64{1}, 60000*ms, GapUser, 2000*ms, Unknown, 20500, Unknown)},
	}
	if !reflect.DeepEqual(rows, want) {
		for i := range max(len(rows), len(want)) {
			var g, w any
			if i < len(rows) {
				g, _ = json.Marshal(rows[i])
				g = string(g.([]byte))
			}
			if i < len(want) {
				w, _ = json.Marshal(want[i])
				w = string(w.([]byte))
			}
			if g != w {
				t.Errorf("row %d:\n got %v\nwant %v", i, g, w)
			}
		}
	}
	if meta.Source != "tracelab" || meta.StartUnixNS != time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC).UnixNano() {
		t.Errorf("meta %+v", meta)
	}
	if rep.RowsRead != 5 || rep.RowsWritten != 5 || rep.Adjusted != nil || rep.Dropped != nil {
		t.Errorf("report %+v", rep)
	}

	// The release ships gzip-compressed: the same rows come out of the .gz.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(src)
	zw.Close()
	zrows, _, _, err := importTraceLabRows(t, gz.String())
	if err != nil || !reflect.DeepEqual(zrows, rows) {
		t.Errorf("gzip input: %v, rows equal %v", err, reflect.DeepEqual(zrows, rows))
	}
}

// tlRound is a TraceLab row for the tests below; events are "type@seconds" after 10:00:00.
type tlRound struct {
	session, project string
	user             string
	round            int
	total, prefix    int
	output           int
	reasoning        any
	events           []string
	tools            int
	drop             string // a key to leave out
}

func (r tlRound) line() string {
	m := map[string]any{
		"provider": "claude", "session_id": r.session, "round_index": r.round, "model": "m",
		"input_tokens_total": r.total, "prefix_tokens": r.prefix, "newly_append_tokens": r.total - r.prefix,
		"output_tokens": r.output, "reasoning_output_tokens": r.reasoning,
	}
	if r.project != "" {
		m["project"] = r.project
	}
	if r.user != "" {
		m["user"] = r.user
	}
	var evs []map[string]any
	for _, e := range r.events {
		typ, sec, _ := strings.Cut(e, "@")
		ts := sec
		if d, err := time.ParseDuration(sec + "s"); err == nil {
			ts = time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC).Add(d).Format(time.RFC3339Nano)
		}
		evs = append(evs, map[string]any{"event_type": typ, "timestamp": ts, "source": "x"})
	}
	m["timing_events"] = evs
	tools := []map[string]any{}
	for i := range r.tools {
		tools = append(tools, map[string]any{"tool_index": i, "tool_name": "Bash"})
	}
	m["tools"] = tools
	delete(m, r.drop)
	b, _ := json.Marshal(m)
	return string(b)
}

func tlLines(rs ...tlRound) string {
	var sb strings.Builder
	for _, r := range rs {
		sb.WriteString(r.line() + "\n")
	}
	return sb.String()
}

func TestTraceLabBadInput(t *testing.T) {
	r0 := tlRound{session: "s", round: 0, total: 100, prefix: 0, output: 10, events: []string{"user_message@0", "text@1"}, tools: 1}
	r1 := tlRound{session: "s", round: 1, total: 200, prefix: 100, output: 10, events: []string{"tool_result@3", "text@4"}}
	r2 := tlRound{session: "s", round: 2, total: 300, prefix: 200, output: 10, events: []string{"user_message@9", "text@10"}}
	with := func(r tlRound, f func(*tlRound)) tlRound { f(&r); return r }
	cases := []struct {
		name, src, want string
	}{
		{"a round naming no parent: the session starts at round 1", tlLines(r1, r2),
			"in.txt line 1: round_index: 1 is the session's first round in the file: rounds 0 to 0, its parents, are missing"},
		{"a round whose parent is missing", tlLines(r0, r2),
			"in.txt line 2: round_index: 2 follows round 0 (line 1): round 1, its parent, is missing"},
		{"a round repeated: its parent would be itself (a cycle)", tlLines(r0, r1, r1),
			"in.txt line 3: round_index: 1 after round 1 of the same session (line 2): rounds must come in round_index order, each once"},
		{"rows out of order", tlLines(r0, r2, r1),
			"in.txt line 2: round_index: 2 follows round 0 (line 1): round 1, its parent, is missing"},
		{"rows out of time order", tlLines(r0, with(r1, func(r *tlRound) { r.events = []string{"tool_result@-1", "text@4"} })),
			"in.txt line 2: timing_events: the round's input was ready 1s before its parent round's (line 1)"},
		{"missing session_id", tlLines(with(r0, func(r *tlRound) { r.drop = "session_id" })),
			"in.txt line 1: session_id: missing"},
		{"missing round_index", tlLines(with(r0, func(r *tlRound) { r.drop = "round_index" })),
			"in.txt line 1: round_index: missing"},
		{"missing input_tokens_total", tlLines(with(r0, func(r *tlRound) { r.drop = "input_tokens_total" })),
			"in.txt line 1: input_tokens_total: missing"},
		{"missing prefix_tokens", tlLines(with(r0, func(r *tlRound) { r.drop = "prefix_tokens" })),
			"in.txt line 1: prefix_tokens: missing"},
		{"missing newly_append_tokens", tlLines(with(r0, func(r *tlRound) { r.drop = "newly_append_tokens" })),
			"in.txt line 1: newly_append_tokens: missing"},
		{"missing output_tokens", tlLines(with(r0, func(r *tlRound) { r.drop = "output_tokens" })),
			"in.txt line 1: output_tokens: missing"},
		{"missing timing_events", tlLines(r0, with(r1, func(r *tlRound) { r.drop = "timing_events" })),
			"in.txt line 2: timing_events: no event with a timestamp"},
		{"total is not prefix + append", strings.Replace(tlLines(r0), `"newly_append_tokens":100`, `"newly_append_tokens":99`, 1),
			"in.txt line 1: input_tokens_total: 100 is not prefix_tokens 0 + newly_append_tokens 99"},
		{"negative tokens", strings.Replace(tlLines(r0), `"output_tokens":10`, `"output_tokens":-10`, 1),
			"in.txt line 1: output_tokens:"},
		{"reasoning more than output", tlLines(with(r0, func(r *tlRound) { r.reasoning = 11 })),
			"in.txt line 1: reasoning_output_tokens: 11 is more than output_tokens 10"},
		{"bad timestamp", tlLines(with(r0, func(r *tlRound) { r.events = []string{"user_message@0", "text@yesterday"} })),
			`in.txt line 1: timing_events[1].timestamp: "yesterday" is not a timestamp`},
		{"not JSON", tlLines(r0) + "{\n", "in.txt line 2: not a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, _, err := importTraceLabRows(t, c.src)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant an error with %q", err, c.want)
			}
		})
	}
	// The same rounds, well formed, import: each case above fails for its own reason.
	if _, _, _, err := importTraceLabRows(t, tlLines(r0, r1, r2)); err != nil {
		t.Fatal(err)
	}
}

// TestTraceLabEdges covers what the sample does not: a session id under two projects is
// two sessions, zero lengths are raised and counted, a negative gap becomes 0 and is
// counted, a round without input events is placed at its first event with a gap of
// unknown kind, a round without output has no duration, and a human's message after tool
// results makes the gap the human's.
func TestTraceLabEdges(t *testing.T) {
	src := tlLines(
		tlRound{session: "s", project: "p1", round: 0, total: 100, output: 10, events: []string{"user_message@0", "text@2"}},
		tlRound{session: "s", project: "p2", round: 0, total: 0, output: 0, events: []string{"user_message@1", "text@1.5"}},
		// ready (tool_result at 1.8) before its parent's last output (2): gap 0, adjusted.
		tlRound{session: "s", project: "p1", round: 1, total: 150, prefix: 100, output: 10, events: []string{"tool_result@1.8", "text@3"}},
		// no input event: placed at its first event, 4; no output: no duration.
		tlRound{session: "s", project: "p1", round: 2, total: 200, prefix: 150, output: 10, events: []string{"usage_report@4"}},
		// a tool result and then the human's message: the human's turn.
		tlRound{session: "s", project: "p2", round: 1, total: 10, output: 5, events: []string{"tool_result@2", "user_message@2.5", "text@3"}},
	)
	rows, _, rep, err := importTraceLabRows(t, src)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		id, session int64
		arrival     time.Duration
		prompt, out int32
		parents     []int64
		gap         time.Duration
		kind        string
		dur         time.Duration
	}
	var g []got
	for _, r := range rows {
		g = append(g, got{r.ID, r.SessionID, r.Arrival, r.PromptTokens, r.OutputTokens, r.Call.Parents, r.Call.Gap, r.Call.GapKind, r.Call.Duration})
	}
	s := time.Second
	want := []got{
		{0, 0, 0, 100, 10, nil, Unknown, "", 2 * s},
		{1, 1, s, 1, 1, nil, Unknown, "", s / 2},
		{2, 0, 1800 * time.Millisecond, 150, 10, []int64{0}, 0, GapTool, 1200 * time.Millisecond},
		{4, 1, 2500 * time.Millisecond, 10, 5, []int64{1}, s, GapUser, s / 2},
		{3, 0, 4 * s, 200, 10, []int64{2}, s, "", Unknown},
	}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("got  %+v\nwant %+v", g, want)
	}
	wantAdj := map[string]int64{
		"input_tokens_total 0 raised to 1": 1, "output_tokens 0 raised to 1": 1,
		"gap_ns negative (input before the parent's last output) set to 0": 1,
	}
	if !reflect.DeepEqual(rep.Adjusted, wantAdj) {
		t.Errorf("adjusted %v", rep.Adjusted)
	}
}

// TestTraceLabCopies: TraceLab keeps every copy of a session collected twice
// (DB_SCHEMA.md, "Identity model"). A copy under another user is another session; a copy
// later in the file under the same ids restarts at round 0 and becomes another session,
// counted as adjusted; its rounds chain among themselves.
func TestTraceLabCopies(t *testing.T) {
	a0 := tlRound{session: "s", project: "p", user: "u1", round: 0, total: 100, output: 10, events: []string{"user_message@0", "text@1"}}
	a1 := tlRound{session: "s", project: "p", user: "u1", round: 1, total: 200, prefix: 100, output: 10, events: []string{"tool_result@2", "text@3"}}
	b0 := a0
	b0.user = "u2"
	rows, _, rep, err := importTraceLabRows(t, tlLines(a0, a1, a0, a1, b0))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		id, session int64
		parents     []int64
	}
	var g []got
	for _, r := range rows {
		g = append(g, got{r.ID, r.SessionID, r.Call.Parents})
	}
	want := []got{{0, 0, nil}, {2, 1, nil}, {4, 2, nil}, {1, 0, []int64{0}}, {3, 1, []int64{2}}}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("got  %+v\nwant %+v", g, want)
	}
	if n := rep.Adjusted["round_index 0 again: a repeated copy of a session, imported as another session"]; n != 1 || len(rep.Adjusted) != 1 {
		t.Errorf("adjusted %v", rep.Adjusted)
	}
}

// FuzzImportTraceLab checks that the importer never panics, that what it accepts reads
// back row for row, and that the rows it writes form a valid DAG (parents earlier, same
// session), whatever the input.
func FuzzImportTraceLab(f *testing.F) {
	src, err := os.ReadFile(tracelabSample)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(src))
	f.Add(tlLines(
		tlRound{session: "s", project: "p1", round: 0, total: 100, output: 10, events: []string{"user_message@0", "text@2"}},
		tlRound{session: "s", project: "p1", round: 1, total: 150, prefix: 100, output: 10, events: []string{"tool_result@1.8", "text@3"}},
		tlRound{session: "s", project: "p1", round: 2, total: 0, output: 0, events: []string{"usage_report@4"}}))
	f.Fuzz(func(t *testing.T, data string) {
		fuzzAgentImport(t, FormatTraceLab, data)
	})
}
