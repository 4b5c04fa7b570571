package trace

import (
	"context"
	"math"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// agentCall builds a Call: parents, gap, kind, duration, prefix, cached, reasoning
// (Unknown for none).
func agentCall(parents []int64, gap time.Duration, kind string, dur time.Duration, prefix, cached, reasoning int32) *Call {
	return &Call{Parents: parents, Gap: gap, GapKind: kind, Duration: dur, PrefixTokens: prefix, CachedTokens: cached, ReasoningTokens: reasoning}
}

// handAgentTrace is a small agent trace whose shape is worked out by hand in
// TestAgentShapeByHand. Session 1: call 0 forks into 1, 2 and 3; 3 also waits for 1 (a
// join whose first parent is the deeper one), after a user gap. Session 2: a chain
// 10 → 11 → 12 over 128k tokens, 12's prompt shorter than 11's context after a gap of
// unknown kind, 11 without a duration. Session 3: one call without agent columns.
// Row 30 has no session: it is no call.
func handAgentTrace() []Request {
	const U = Unknown
	s := time.Second
	return []Request{
		{ID: 0, Arrival: 0, PromptTokens: 1000, OutputTokens: 100, SessionID: 1, HasSession: true, Call: agentCall(nil, U, "", 2*s, U, 0, 20)},
		{ID: 10, Arrival: 1 * s, PromptTokens: 140000, OutputTokens: 1000, SessionID: 2, HasSession: true, Call: agentCall(nil, U, "", 3*s, U, U, U)},
		{ID: 20, Arrival: 2 * s, PromptTokens: 3000, OutputTokens: 300, SessionID: 3, HasSession: true},
		{ID: 1, Arrival: 3 * s, PromptTokens: 1500, OutputTokens: 50, SessionID: 1, HasSession: true, Call: agentCall([]int64{0}, 1*s, GapTool, 1*s, U, 1000, U)},
		{ID: 2, Arrival: 3500 * time.Millisecond, PromptTokens: 40000, OutputTokens: 200, SessionID: 1, HasSession: true, Call: agentCall([]int64{0}, 1500*time.Millisecond, GapTool, 4*s, 1100, 500, 50)},
		{ID: 11, Arrival: 5 * s, PromptTokens: 141500, OutputTokens: 30, SessionID: 2, HasSession: true, Call: agentCall([]int64{10}, 1*s, GapTool, U, U, U, U)},
		{ID: 12, Arrival: 6 * s, PromptTokens: 200, OutputTokens: 5, SessionID: 2, HasSession: true, Call: agentCall([]int64{11}, 500*time.Millisecond, "", U, U, U, U)},
		{ID: 30, Arrival: 7 * s, PromptTokens: 100, OutputTokens: 10},
		{ID: 3, Arrival: 10 * s, PromptTokens: 70000, OutputTokens: 10, SessionID: 1, HasSession: true, Call: agentCall([]int64{1, 0}, 2500*time.Millisecond, GapUser, 5*s, U, U, U)},
	}
}

func checkSpread(t *testing.T, what string, got, want Spread) {
	t.Helper()
	for _, f := range []struct {
		n    string
		g, w float64
	}{{"n", float64(got.N), float64(want.N)}, {"mean", got.Mean, want.Mean}, {"p50", got.P50, want.P50}, {"p90", got.P90, want.P90}, {"p99", got.P99, want.P99}, {"max", got.Max, want.Max}} {
		if math.Abs(f.g-f.w) > 1e-9*math.Max(1, math.Abs(f.w)) {
			t.Errorf("%s %s = %v, by hand %v", what, f.n, f.g, f.w)
		}
	}
}

// TestAgentShapeByHand checks every figure of the agent shape against values worked out
// by hand. Percentiles are type 7: for n sorted values, h = (n−1)q and
// x_⌊h⌋ + (h−⌊h⌋)(x_⌊h⌋₊₁ − x_⌊h⌋).
func TestAgentShapeByHand(t *testing.T) {
	info, err := ComputeInfo(context.Background(), NewSliceSource(handAgentTrace()), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	sh := info.Agent
	if sh == nil {
		t.Fatal("no agent shape for a trace with agent columns")
	}
	// Calls are the 8 rows with a session (not row 30), in 3 sessions.
	if sh.Calls != 8 || sh.Sessions != 3 || info.Count != 9 {
		t.Errorf("calls %d sessions %d count %d, want 8, 3, 9", sh.Calls, sh.Sessions, info.Count)
	}
	// Calls per session 4, 3, 1 → sorted 1, 3, 4: p90 h = 1.8 → 3 + 0.8·1.
	checkSpread(t, "calls per session", sh.CallsPerSession, Spread{N: 3, Mean: 8.0 / 3, P50: 3, P90: 3.8, P99: 3.98, Max: 4})
	// Depth: session 1's chain 0 → 1 → 3 is 3 calls, session 2's 10 → 11 → 12 is 3, session 3's 1.
	checkSpread(t, "depth", sh.Depth, Spread{N: 3, Mean: 7.0 / 3, P50: 3, P90: 3, P99: 3, Max: 3})
	// Call 0 is the only call with more than one child (three); call 3 the only one with
	// two parents.
	if sh.Forks != 1 || sh.Joins != 1 {
		t.Errorf("forks %d joins %d, want 1 and 1", sh.Forks, sh.Joins)
	}
	checkSpread(t, "children per fork", sh.ChildrenPerFork, Spread{N: 1, Mean: 3, P50: 3, P90: 3, P99: 3, Max: 3})
	// Tool gaps 1, 1, 1.5 s: p90 h = 1.8 → 1 + 0.8·0.5 = 1.4 s; user 2.5 s; unknown 0.5 s.
	if len(sh.Gaps) != 3 || sh.Gaps[0].Kind != GapTool || sh.Gaps[1].Kind != GapUser || sh.Gaps[2].Kind != "unknown" {
		t.Fatalf("gap kinds %+v, want tool, user, unknown", sh.Gaps)
	}
	sec := float64(time.Second)
	checkSpread(t, "tool gaps", sh.Gaps[0].Spread, Spread{N: 3, Mean: 3.5 / 3 * sec, P50: sec, P90: 1.4 * sec, P99: 1.49 * sec, Max: 1.5 * sec})
	checkSpread(t, "user gaps", sh.Gaps[1].Spread, Spread{N: 1, Mean: 2.5 * sec, P50: 2.5 * sec, P90: 2.5 * sec, P99: 2.5 * sec, Max: 2.5 * sec})
	checkSpread(t, "unknown gaps", sh.Gaps[2].Spread, Spread{N: 1, Mean: 0.5 * sec, P50: 0.5 * sec, P90: 0.5 * sec, P99: 0.5 * sec, Max: 0.5 * sec})
	// Prompts sorted: 200 1000 1500 3000 40000 70000 140000 141500 (sum 397200).
	// p50 h = 3.5 → 3000 + 0.5·37000; p90 h = 6.3 → 140000 + 0.3·1500; p99 h = 6.93.
	checkSpread(t, "context", sh.Context, Spread{N: 8, Mean: 397200.0 / 8, P50: 21500, P90: 140450, P99: 141395, Max: 141500})
	// Over 32,768: 4 of 8; over 65,536: 3; over 131,072: 2.
	if sh.ContextOver32 != 0.5 || sh.ContextOver64 != 0.375 || sh.ContextOver128 != 0.25 {
		t.Errorf("context shares %v %v %v, want 0.5 0.375 0.25", sh.ContextOver32, sh.ContextOver64, sh.ContextOver128)
	}
	// Cached on calls 0, 1, 2: (0 + 1000 + 500) / (1000 + 1500 + 40000).
	if sh.CachedCalls != 3 || math.Abs(sh.CacheShare-1500.0/42500) > 1e-12 {
		t.Errorf("cache %d calls, share %v, want 3 and %v", sh.CachedCalls, sh.CacheShare, 1500.0/42500)
	}
	// Reasoning on calls 0 and 2: (20 + 50) / (100 + 200).
	if sh.ReasoningCalls != 2 || math.Abs(sh.ReasoningShare-70.0/300) > 1e-12 {
		t.Errorf("reasoning %d calls, share %v, want 2 and %v", sh.ReasoningCalls, sh.ReasoningShare, 70.0/300)
	}
	// Only session 1 has every duration: ends 2, 4, 7.5, 15 s from its first arrival 0.
	checkSpread(t, "makespan", sh.Makespan, Spread{N: 1, Mean: 15 * sec, P50: 15 * sec, P90: 15 * sec, P99: 15 * sec, Max: 15 * sec})
	// Shared: call 1 min(1000+100, 1500) = 1100; call 2 prefix 1100; call 3 call 1's
	// 1500+50; call 11 min(140000+1000, 141500) = 141000; call 12 min(141500+30, 200).
	if want := (1100.0 + 1100 + 1550 + 141000 + 200) / 397200; math.Abs(sh.SharedShare-want) > 1e-12 {
		t.Errorf("shared prefix share %v, by hand %v", sh.SharedShare, want)
	}
	var b strings.Builder
	if err := info.WriteText(&b, "hand"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"agent      8 calls in 3 sessions; 1 forks (calls with more than one child), 1 joins (calls with more than one parent)",
		"gap tool (s)                3        1.2        1.0        1.4        1.5        1.5",
		"makespan (s)                1       15.0       15.0       15.0       15.0       15.0",
		"context    50.0 % of calls over 32k tokens, 37.5 % over 64k, 25.0 % over 128k",
		"cache      recorded hit 3.5 % of prompt tokens (3 calls record cached_tokens)",
		"reasoning  23.3 % of output tokens (2 calls record reasoning_tokens)",
		"shared     36.5 % of prompt tokens",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

// TestAgentShapeAbsent: a trace whose rows have no agent columns reports no shape, even
// with sessions.
func TestAgentShapeAbsent(t *testing.T) {
	reqs := handAgentTrace()
	for i := range reqs {
		reqs[i].Call = nil
	}
	info, err := ComputeInfo(context.Background(), NewSliceSource(reqs), Meta{})
	if err != nil || info.Agent != nil {
		t.Fatalf("agent shape %+v, %v; want none", info.Agent, err)
	}
}

// TestInfoRejectsBadDAG: a call naming a later row is an error naming the file, the row
// and the column, from the file's reader.
func TestInfoRejectsBadDAG(t *testing.T) {
	reqs := handAgentTrace()
	reqs[3].Call.Parents = []int64{0, 3} // request_id 3 is the last row
	path := filepath.Join(t.TempDir(), "bad.parquet")
	w, err := Create(path, Meta{})
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
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = ComputeInfo(context.Background(), r, r.Meta())
	if err == nil {
		t.Fatal("a call naming a later row as its parent passed")
	}
	for _, want := range []string{path, "row 3 (request_id 1)", "parents: request_id 3 is not an earlier row"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// chainSource streams n agent calls, sessions of 50 calls in a chain, with every agent
// column set; at its last row it records the live heap, so a benchmark can say what
// trace info holds per row.
type chainSource struct {
	n, i  int
	agent bool
	cur   Request
	live  uint64
}

func (s *chainSource) Next() bool {
	if s.i == s.n {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		s.live = m.HeapAlloc
		return false
	}
	r := Request{ID: int64(s.i), Arrival: time.Duration(s.i) * time.Millisecond, PromptTokens: 20000, OutputTokens: 200}
	if s.agent {
		r.SessionID, r.HasSession = int64(s.i/50), true
		r.Call = agentCall(nil, Unknown, "", time.Second, Unknown, 100, 10)
		if s.i%50 != 0 {
			r.Call.Parents, r.Call.Gap, r.Call.GapKind = []int64{int64(s.i - 1)}, time.Second, GapTool
		}
	}
	s.cur = r
	s.i++
	return true
}
func (s *chainSource) Request() Request { return s.cur }
func (s *chainSource) Err() error       { return nil }

// BenchmarkInfoMemory reports the live heap trace info holds per row at the end of a
// trace (run with -benchtime=1x): plain rows, then agent calls.
//
//	go test ./trace -run '^$' -bench BenchmarkInfoMemory -benchtime=1x
func BenchmarkInfoMemory(b *testing.B) {
	const n = 1_000_000
	for _, agent := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "agent"}[agent], func(b *testing.B) {
			for range b.N {
				var m runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&m)
				src := &chainSource{n: n, agent: agent}
				if _, err := ComputeInfo(context.Background(), src, Meta{}); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(src.live-m.HeapAlloc)/n, "live-B/row")
			}
		})
	}
}
