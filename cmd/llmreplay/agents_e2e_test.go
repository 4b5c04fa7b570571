package main

import (
	"bytes"
	"cmp"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/trace"
)

// writeAgentTrace writes sessions agent sessions of calls calls each, a chain: the first
// call's prompt is first tokens, each later call appends add tokens of tool output to its
// parent's context (its prompt, then its out-token answer) after a gap. Session 0 also
// forks: its call 1 has a sibling (a subagent sharing only the first prompt), and its call
// 2 joins both. Sessions start spread over the first second.
func writeAgentTrace(t *testing.T, path string, sessions, calls int, first, add, out int32, gap time.Duration) []trace.Request {
	t.Helper()
	var reqs []trace.Request
	id := int64(0)
	for s := range sessions {
		at := time.Duration(s) * time.Second / time.Duration(sessions)
		prompt := first
		prev := int64(-1)
		var fork int64 = -1
		for k := range calls {
			c := trace.NewCall()
			c.Duration = 500 * time.Millisecond
			r := trace.Request{ID: id, Arrival: at, PromptTokens: prompt, OutputTokens: out, SessionID: int64(100 + s), HasSession: true, Call: c}
			if prev >= 0 {
				c.Parents, c.Gap, c.GapKind = []int64{prev}, gap, trace.GapTool
				if s == 0 && k == 2 && fork >= 0 {
					c.Parents = []int64{prev, fork}
				}
			}
			reqs = append(reqs, r)
			id++
			if s == 0 && k == 1 { // a subagent forked from call 0 beside call 1
				f := trace.NewCall()
				f.Parents, f.Gap, f.GapKind, f.PrefixTokens = []int64{id - 2}, gap, trace.GapTool, first
				reqs = append(reqs, trace.Request{ID: id, Arrival: at, PromptTokens: first + add, OutputTokens: out, SessionID: 100, HasSession: true, Call: f})
				fork = id
				id++
			}
			prev = r.ID
			prompt += out + add
			at += c.Duration + gap
		}
	}
	slices.SortStableFunc(reqs, func(a, b trace.Request) int { return cmp.Compare(a.Arrival, b.Arrival) }) // a trace is sorted by arrival
	w, err := trace.Create(path, trace.Meta{Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return reqs
}

// TestE2EAgentsAgainstSim replays an agent trace against the in-process simulated engine
// (moe-230b-8gpu, chat) and checks every call from the results: never sent before all its
// parents ended plus its gap (the replayer's end of a response is at or after end_ns, the
// last chunk); the forked branches overlapped as in the trace; and the engine's prefix
// cache found each call's parent context, prompt and answer, as a growing context must
// make it: prompt_tokens_cached covers the parent's server prompt plus its answer but the
// last token (sampled, never fed back: it has no KV), to the engine's 16-token block (a subagent forked with a shorter prefix_tokens is held to
// that prefix, its cut at the message boundary).
func TestE2EAgentsAgainstSim(t *testing.T) {
	if os.Getenv("LLMREPLAY_E2E") == "" {
		t.Skip("real-time end-to-end test: set LLMREPLAY_E2E=1 (scripts/test does)")
	}
	dir := t.TempDir()
	tr := filepath.Join(dir, "agents.parquet")
	reqs := writeAgentTrace(t, tr, 3, 5, 3000, 400, 20, 100*time.Millisecond)
	res := filepath.Join(dir, "r.parquet")
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"replay", "--trace", tr, "--api", "chat", "--sim-profile", "moe-230b-8gpu", "--quiet", "-o", res}, &out, &errb); err != nil {
		t.Fatalf("replay: %v\n%s", err, errb.String())
	}
	rs, _, err := results.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != len(reqs) {
		t.Fatalf("%d records, want %d", len(rs), len(reqs))
	}
	byID := map[int64]results.Result{}
	for _, r := range rs {
		byID[r.RequestID] = r
	}
	for _, q := range reqs {
		r := byID[q.ID]
		if r.Status != results.StatusOK || r.SentNS < r.ScheduledNS || r.RecordedArrivalNS != int64(q.Arrival) {
			t.Errorf("call %d: %s sent %d scheduled %d recorded arrival %d", q.ID, r.Status, r.SentNS, r.ScheduledNS, r.RecordedArrivalNS)
		}
		if !q.HasParents() {
			continue
		}
		var last int64
		for _, p := range q.Call.Parents {
			last = max(last, byID[p].EndNS)
		}
		if r.GapNS != int64(q.Call.Gap) || r.ScheduledNS < last+r.GapNS {
			t.Errorf("call %d: scheduled %d, before its last parent's end %d + gap %d", q.ID, r.ScheduledNS, last, r.GapNS)
		}
		p := byID[q.Call.Parents[0]]
		shared := p.PromptTokensServer + p.OutputTokens - 1 // the last token sampled has no KV yet
		if q.Call.PrefixTokens != trace.Unknown {
			shared = p.PromptTokensServer - 16 // the parent's first message only (its template's last tokens differ)
		}
		if want := shared / 16 * 16; r.PromptTokensCached < want || r.PromptTokensCached > r.PromptTokensServer {
			t.Errorf("call %d: %d of %d prompt tokens cached, want at least %d: its parent's context", q.ID, r.PromptTokensCached, r.PromptTokensServer, want)
		}
	}
	a, b := byID[1], byID[2] // the branches of session 0
	if !(a.SentNS < b.EndNS && b.SentNS < a.EndNS) {
		t.Errorf("branches 1 and 2 did not overlap: [%d, %d] and [%d, %d]", a.SentNS, a.EndNS, b.SentNS, b.EndNS)
	}
}
