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

// The sample is written by hand from the Weka trace format's published schema
// (callanjfox/kv-cache-tester docs/trace_replay_tester.md "Trace Format"; ai-dynamo/aiperf
// docs/tutorials/weka-trace.md and its Weka adapter's models), not taken from real data:
// testdata/weka/SOURCES.md.
const wekaSample = "testdata/weka/sample.jsonl"

func importWekaRows(t *testing.T, src string) ([]Request, Meta, ImportReport, error) {
	t.Helper()
	return importAgentRows(t, src, FormatWeka)
}

func seq(a, b int64) []int64 {
	var s []int64
	for i := a; i <= b; i++ {
		s = append(s, i)
	}
	return s
}

func TestWekaSample(t *testing.T) {
	src, err := os.ReadFile(wekaSample)
	if err != nil {
		t.Fatal(err)
	}
	rows, meta, rep, err := importWekaRows(t, string(src))
	if err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	const opus, haiku = "claude-opus-4-5", "claude-haiku-4-5"
	o := int64(1) << 40 // trace 1's local hash ids, kept apart from trace 0's
	req := func(id int64, arr time.Duration, in, out int32, sess int64, model string, blocks []int64, c *Call) Request {
		return Request{ID: id, Arrival: arr, PromptTokens: in, OutputTokens: out, SessionID: sess, HasSession: true, Model: model, PrefixBlocks: blocks, Call: c}
	}
	call := func(parents []int64, gap time.Duration, kind string, dur time.Duration, prefix int32) *Call {
		return &Call{Parents: parents, Gap: gap, GapKind: kind, Duration: dur, PrefixTokens: prefix, CachedTokens: Unknown, ReasoningTokens: Unknown}
	}
	U := time.Duration(Unknown)
	want := []Request{
		req(0, 0, 1000, 50, 0, opus, seq(1, 16), call(nil, U, "", 2000*ms, Unknown)),
		req(8, 0, 128, 10, 1, opus, []int64{o + 1, o + 2}, call(nil, U, "", 1000*ms, Unknown)),
		// conv-b's subagent (absolute times) forks from its call 0, which ended at 1.0 s;
		// it shares 1 block of 64 tokens.
		req(9, 2500*ms, 64, 5, 1, haiku, []int64{o + 1}, call([]int64{8}, 1500*ms, GapTool, 500*ms, 64)),
		// think_time is the gap; its blocks extend all of its parent's: an append.
		req(1, 3000*ms, 1200, 40, 0, opus, seq(1, 19), call([]int64{0}, 1000*ms, GapTool, 1500*ms, Unknown)),
		// agent_001 (times relative to its marker at 5 s) forks from call 1 (ended 4.5 s)
		// with a context of its own: it shares no block.
		req(2, 5500*ms, 640, 30, 0, haiku, seq(100, 109), call([]int64{1}, 1000*ms, GapTool, 1000*ms, 0)),
		// agent_002 shares call 1's first 16 blocks.
		req(4, 6000*ms, 1100, 25, 0, haiku, append(seq(1, 16), 200, 201), call([]int64{1}, 1500*ms, GapTool, 2000*ms, 1024)),
		req(3, 7500*ms, 700, 20, 0, haiku, seq(100, 110), call([]int64{2}, 1000*ms, GapTool, 1000*ms, Unknown)),
		// The join: the parent's next call waits for its previous call and both
		// subagents; the last of them ended at 8.5 s.
		req(5, 9000*ms, 1400, 60, 0, opus, seq(1, 22), call([]int64{1, 3, 4}, 500*ms, GapTool, 2000*ms, Unknown)),
		// conv-b's join, and a compaction: 1 of its parent's 2 full blocks kept.
		req(10, 10000*ms, 100, 8, 1, opus, []int64{o + 1, o + 5}, call([]int64{8, 9}, 7000*ms, GapTool, 800*ms, 64)),
		// agent_003 is async_launched: nothing waits for it.
		req(6, 12000*ms, 300, 10, 0, haiku, seq(300, 304), call([]int64{5}, 1000*ms, GapTool, 500*ms, 0)),
		// The human's next message, 60 s of think_time after call 5.
		req(7, 71000*ms, 1500, 20, 0, opus, seq(1, 24), call([]int64{5}, 60000*ms, GapUser, 1000*ms, Unknown)),
	}
	if !reflect.DeepEqual(rows, want) {
		for i := range max(len(rows), len(want)) {
			var g, w []byte
			if i < len(rows) {
				g, _ = json.Marshal(rows[i])
			}
			if i < len(want) {
				w, _ = json.Marshal(want[i])
			}
			if !bytes.Equal(g, w) {
				t.Errorf("row %d:\n got %s\nwant %s", i, g, w)
			}
		}
	}
	if meta.Source != "weka" || meta.BlockTokens != 64 || meta.StartUnixNS != 0 {
		t.Errorf("meta %+v", meta)
	}
	if rep.RowsRead != 11 || rep.RowsWritten != 11 || rep.Adjusted != nil {
		t.Errorf("report %+v", rep)
	}

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(src)
	zw.Close()
	if zrows, _, _, err := importWekaRows(t, gz.String()); err != nil || !reflect.DeepEqual(zrows, rows) {
		t.Errorf("gzip input: %v", err)
	}
}

// wekaBase is a small trace for the bad-input cases: a call, a subagent, a join.
const wekaBase = `{"id": "x", "models": ["m"], "block_size": 64, "hash_id_scope": "local", "requests": [
 {"t": 0.0, "type": "n", "model": "m", "in": 100, "out": 10, "hash_ids": [1, 2], "stop": "tool_use", "api_time": 1.0},
 {"t": 2.0, "type": "subagent", "agent_id": "a1", "subagent_type": "Explore", "status": "completed", "models": ["m"], "requests": [
   {"t": 0.5, "type": "n", "model": "m", "in": 50, "out": 5, "api_time": 0.5}]},
 {"t": 4.0, "type": "n", "model": "m", "in": 200, "out": 10, "hash_ids": [1, 2, 3, 4], "input_types": ["tool_result"], "api_time": 1.0}]}
`

func TestWekaBadInput(t *testing.T) {
	rep := func(old, new string) string {
		if !strings.Contains(wekaBase, old) {
			t.Fatalf("%q not in the base trace", old)
		}
		return strings.Replace(wekaBase, old, new, 1)
	}
	cases := []struct{ name, src, want string }{
		{"a call before the call it follows (rows out of order)", rep(`"t": 4.0`, `"t": -0.0001`),
			"in.txt trace 0: requests[2].t: missing or not a time in seconds >= 0"},
		{"a call earlier than the call it follows", strings.Replace(rep(`"t": 4.0`, `"t": 1.0`), `"t": 0.0`, `"t": 1.5`, 1),
			"in.txt trace 0: requests[2].t: 1.000 s is before the call it follows (request_id 0 at 1.500 s)"},
		{"missing in", rep(`"in": 200, `, ``), "in.txt trace 0: requests[2].in: missing"},
		{"missing out", rep(`"out": 5, `, ``), "in.txt trace 0: requests[1].requests[0].out: missing"},
		{"missing t", rep(`"t": 0.5, `, ``), "in.txt trace 0: requests[1].requests[0].t: missing"},
		{"missing block_size", rep(`"block_size": 64, `, ``), "in.txt trace 0: block_size: missing"},
		{"unknown hash scope", rep(`"local"`, `"pooled"`), `in.txt trace 0: hash_id_scope: "pooled", want local or global`},
		{"unknown type", rep(`"type": "n", "model": "m", "in": 200`, `"type": "x", "model": "m", "in": 200`),
			`in.txt trace 0: requests[2].type: "x", want n, s or subagent`},
		{"a subagent naming no call", rep(`"requests": [
   {"t": 0.5, "type": "n", "model": "m", "in": 50, "out": 5, "api_time": 0.5}]`, `"requests": []`),
			"in.txt trace 0: requests[1].requests: a subagent without requests"},
		{"negative api_time", rep(`"api_time": 0.5`, `"api_time": -1`), "in.txt trace 0: requests[1].requests[0].api_time: -1 is not a duration"},
		{"negative hash id", rep(`[1, 2, 3, 4]`, `[1, -2]`), "in.txt trace 0: requests[2].hash_ids[1]: -2 not in [0, 2^40)"},
		{"two block sizes", wekaBase + rep(`"block_size": 64`, `"block_size": 16`),
			"in.txt trace 1: block_size: 16, but an earlier trace has 64"},
		{"not JSON", wekaBase + "{", "in.txt trace 1: not a Weka trace object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, _, err := importWekaRows(t, c.src)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant an error with %q", err, c.want)
			}
		})
	}
	// The base itself imports, with a fork and a join: each case fails for its own reason.
	rows, _, _, err := importWekaRows(t, wekaBase)
	if err != nil || len(rows) != 3 || !reflect.DeepEqual(rows[2].Call.Parents, []int64{0, 1}) {
		t.Fatalf("base: %v %+v", err, rows)
	}
}

// TestWekaEdges: a subagent still running at the parent's next call is not joined (the
// parent did not wait), and zero lengths are raised to 1, each counted as adjusted.
func TestWekaEdges(t *testing.T) {
	// The subagent's call at 4.5 s (absolute: not earlier than its marker at 2 s) is
	// after the parent's next call at 4 s.
	src := strings.Replace(strings.Replace(wekaBase, `"t": 0.5`, `"t": 4.5`, 1), `"out": 10, "hash_ids": [1, 2, 3, 4]`, `"out": 0, "hash_ids": [1, 2, 3, 4]`, 1)
	rows, _, rep, err := importWekaRows(t, src)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[int64]Request{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	if p := byID[2].Call.Parents; !reflect.DeepEqual(p, []int64{0}) || byID[2].OutputTokens != 1 {
		t.Errorf("call 2: parents %v, output %d", p, byID[2].OutputTokens)
	}
	want := map[string]int64{"out 0 raised to 1": 1, "subagent still running at the agent's next call: not joined": 1}
	if !reflect.DeepEqual(rep.Adjusted, want) {
		t.Errorf("adjusted %v", rep.Adjusted)
	}
}

// TestWekaConcatenated: trace files concatenated (cat traces/*.json), pretty-printed,
// import as one session each, their local hash ids kept apart.
func TestWekaConcatenated(t *testing.T) {
	rows, _, _, err := importWekaRows(t, wekaBase+"\n"+wekaBase)
	if err != nil || len(rows) != 6 {
		t.Fatalf("%v, %d rows", err, len(rows))
	}
	for _, r := range rows {
		if want := r.ID / 3; r.SessionID != want {
			t.Errorf("request %d in session %d, want %d", r.ID, r.SessionID, want)
		}
		if r.ID == 3 && !reflect.DeepEqual(r.PrefixBlocks, []int64{1<<40 + 1, 1<<40 + 2}) {
			t.Errorf("trace 1's hash ids %v", r.PrefixBlocks)
		}
	}
}

// FuzzImportWeka checks that the importer never panics, that what it accepts reads back
// row for row, and that its rows form a valid DAG whatever the input.
func FuzzImportWeka(f *testing.F) {
	src, err := os.ReadFile(wekaSample)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(src))
	f.Add(wekaBase)
	f.Fuzz(func(t *testing.T, data string) {
		fuzzAgentImport(t, FormatWeka, data)
	})
}
