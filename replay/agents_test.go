package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// agentTrace is two agent sessions and a plain row. Session 7: root 10; after a 2 s tool
// batch, two branches forked from it, 11 (an append of 10's context) and 12 (a subagent
// that shares only 10's prompt, prefix_tokens 100); 30 s after both (a user's turn), the
// join 13. Session 8: root 20 at 0.5 s and 21 after a 1 s tool gap. Row 30: no session.
func agentTrace() []trace.Request {
	call := func(parents []int64, gap time.Duration, kind string, prefix int32) *trace.Call {
		c := trace.NewCall()
		c.Parents, c.Gap, c.GapKind, c.PrefixTokens = parents, gap, kind, prefix
		c.Duration, c.CachedTokens = 2*time.Second, 64
		return c
	}
	root := trace.NewCall()
	root.Duration = time.Second
	return []trace.Request{
		{ID: 10, Arrival: 0, PromptTokens: 100, OutputTokens: 5, SessionID: 7, HasSession: true, Call: root},
		{ID: 20, Arrival: 500 * time.Millisecond, PromptTokens: 50, OutputTokens: 4, SessionID: 8, HasSession: true},
		{ID: 30, Arrival: time.Second, PromptTokens: 10, OutputTokens: 2},
		{ID: 21, Arrival: 2 * time.Second, PromptTokens: 80, OutputTokens: 3, SessionID: 8, HasSession: true, Call: call([]int64{20}, time.Second, trace.GapTool, trace.Unknown)},
		{ID: 11, Arrival: 3 * time.Second, PromptTokens: 300, OutputTokens: 5, SessionID: 7, HasSession: true, Call: call([]int64{10}, 2*time.Second, trace.GapTool, trace.Unknown)},
		{ID: 12, Arrival: 3 * time.Second, PromptTokens: 150, OutputTokens: 6, SessionID: 7, HasSession: true, Call: call([]int64{10}, 2*time.Second, trace.GapTool, 100)},
		{ID: 13, Arrival: 40 * time.Second, PromptTokens: 1000, OutputTokens: 7, SessionID: 7, HasSession: true, Call: call([]int64{11, 12}, 30*time.Second, trace.GapUser, trace.Unknown)},
	}
}

// agentServer answers each call after its own time, with "a<id>" as its text and the
// request's output tokens, and keeps every body as the server read it (its parts joined).
type agentServer struct {
	took map[int64]time.Duration
	fail map[int64]bool
	mu   sync.Mutex
	body map[int64]string
}

func (s *agentServer) do(ctx context.Context, clk transport.Clock, req *transport.Request, res *results.Result) {
	p := req.BodyParts()
	s.mu.Lock()
	s.body[req.ID] = string(p[0]) + string(p[1]) + string(p[2])
	s.mu.Unlock()
	res.SentNS = clk.Now()
	select {
	case <-time.After(s.took[req.ID]):
	case <-ctx.Done():
		res.Status = results.StatusCanceled
		return
	}
	if s.fail[req.ID] {
		res.Status, res.HTTPStatus, res.Error = results.StatusHTTPError, 500, "HTTP 500: no"
		return
	}
	res.Status, res.HTTPStatus = results.StatusOK, 200
	res.FirstTokenNS, res.EndNS = clk.Now(), clk.Now()
	res.ChunkNS = []int64{res.EndNS - res.SentNS}
	res.OutputTokens, res.OutputTokensSource = req.OutputTokens, results.SourceUsage
	if req.Capture {
		req.Answer = fmt.Appendf(req.Answer, "a%d", req.ID)
	}
}

// idPrompter writes "<id:tokens>" for each prompt it builds: the bodies say which call's
// new text is where.
var idPrompter = PrompterFunc(func(dst []byte, r *trace.Request) ([]byte, error) {
	return fmt.Appendf(dst, "<%d:%d>", r.ID, r.PromptTokens), nil
})

func runAgents(t *testing.T, reqs []trace.Request, srv *agentServer, mod func(o *Options)) (map[int64]results.Result, *Summary) {
	t.Helper()
	return runAgentsTogether(t, reqs, srv, 0, mod)
}

// runAgentsTogether is runAgents with --agent-sessions together.
func runAgentsTogether(t *testing.T, reqs []trace.Request, srv *agentServer, together int, mod func(o *Options)) (map[int64]results.Result, *Summary) {
	t.Helper()
	base, _ := wire.BaseURL("http://127.0.0.1:9/v1")
	c, err := transport.NewClient(transport.ClientOptions{BaseURL: base, API: wire.APIChat, Backend: wire.BackendVLLM, Model: "m",
		MaxInflight: 64, HTTPClient: "net/http"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pl := planner{speedup: 1, hasOrigin: true}
	o := Options{Source: trace.NewSliceSource(reqs), Client: c, Prompter: idPrompter, Speedup: 1, HasOrigin: true,
		Output: filepath.Join(t.TempDir(), "r.parquet"), Grace: time.Second, Start: time.Now(),
		Sessions: SessionsDAG, seams: seams{do: srv.do, noSpin: true}}
	if mod != nil {
		mod(&o)
		pl.speedup = o.Speedup
	}
	plan, err := PlanAgents(trace.NewSliceSource(reqs), "t.parquet", pl, together)
	if err != nil {
		t.Fatal(err)
	}
	o.AgentPlan = plan
	sum, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	rs, _, err := results.ReadFile(o.Output)
	if err != nil {
		t.Fatal(err)
	}
	m := map[int64]results.Result{}
	for _, r := range rs {
		m[r.RequestID] = r
	}
	return m, sum
}

// messages decodes a chat body's messages.
func messages(t *testing.T, body string) []map[string]string {
	t.Helper()
	var b struct{ Messages []map[string]string }
	if err := json.Unmarshal([]byte(body), &b); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	return b.Messages
}

// TestSynctestAgentsWaitForTheirParents: every call is due when all its parents have ended
// plus its gap, sent then (no lateness), the two branches overlap, and each prompt is its
// first parent's context (the parent's prompt, then its actual answer) and new text up to
// the recorded length; a subagent shares only what prefix_tokens says.
func TestSynctestAgentsWaitForTheirParents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &agentServer{took: map[int64]time.Duration{10: time.Second, 11: 3 * time.Second, 12: 500 * time.Millisecond, 13: time.Second,
			20: 200 * time.Millisecond, 21: 100 * time.Millisecond, 30: 100 * time.Millisecond}, body: map[int64]string{}}
		rs, sum := runAgents(t, agentTrace(), srv, nil)
		s := time.Second.Nanoseconds()
		// 10 ends at 1 s; 11 and 12 are due at 1 + 2 = 3 s; 11 ends at 6 s, 12 at 3.5 s;
		// 13 is due at 6 + 30 = 36 s. 20 ends at 0.7 s, 21 is due at 1.7 s.
		want := map[int64]struct{ due, wait, gap int64 }{
			10: {0, results.Null, results.Null}, 11: {3 * s, 0, 2 * s}, 12: {3 * s, 0, 2 * s}, 13: {36 * s, 0, 30 * s},
			20: {s / 2, results.Null, results.Null}, 21: {17 * s / 10, 0, s}, 30: {s, results.Null, results.Null},
		}
		if len(rs) != len(want) {
			t.Fatalf("%d records, want %d", len(rs), len(want))
		}
		for id, w := range want {
			r := rs[id]
			if r.Status != results.StatusOK || r.ScheduledNS != w.due || r.SentNS != w.due || r.SessionWaitNS != w.wait || r.GapNS != w.gap {
				t.Errorf("call %d: %s scheduled %d sent %d wait %d gap %d, want due %d wait %d gap %d", id, r.Status, r.ScheduledNS, r.SentNS, r.SessionWaitNS, r.GapNS, w.due, w.wait, w.gap)
			}
		}
		if r := rs[12]; !(r.SentNS < rs[11].EndNS && rs[11].SentNS < r.EndNS) {
			t.Errorf("branches 11 and 12 did not overlap: %+v %+v", rs[11], r)
		}
		if r := rs[13]; r.RecordedArrivalNS != 40*s || r.RecordedDurationNS != 2*s || r.RecordedCachedTokens != 64 || r.SessionID != 7 || r.Turn != 3 {
			t.Errorf("call 13 recorded %+v", r)
		}
		if r := rs[10]; r.RecordedArrivalNS != 0 || r.RecordedDurationNS != s || r.RecordedCachedTokens != results.Null {
			t.Errorf("call 10 recorded %+v", r)
		}
		if r := rs[30]; r.RecordedArrivalNS != results.Null || r.SessionID != results.Null {
			t.Errorf("plain row 30 has agent columns: %+v", r)
		}
		if sum.Sessions != SessionsDAG || sum.Lateness.Max != 0 {
			t.Errorf("summary sessions %q lateness %+v", sum.Sessions, sum.Lateness)
		}

		// The prompts: 11 = 10's prompt, 10's answer, new text up to 300 tokens.
		m10, m11, m12, m13 := messages(t, srv.body[10]), messages(t, srv.body[11]), messages(t, srv.body[12]), messages(t, srv.body[13])
		if len(m10) != 1 || m10[0]["content"] != "<10:100>" {
			t.Errorf("10 sent %v", m10)
		}
		if len(m11) != 3 || m11[0]["content"] != "<10:100>" || m11[1]["role"] != "assistant" || m11[1]["content"] != "a10" || m11[2]["content"] != "<11:195>" {
			t.Errorf("11 sent %v, want 10's prompt, its answer a10, then <11:195>", m11)
		}
		if rs[11].PromptTokens != 300 {
			t.Errorf("11: prompt_tokens %d, want 300", rs[11].PromptTokens)
		}
		// 12 shares 100 tokens of 10's context: its prompt, not its answer; an empty
		// answer keeps the roles alternating before its new text.
		if len(m12) != 3 || m12[0]["content"] != "<10:100>" || m12[1]["role"] != "assistant" || m12[1]["content"] != "" ||
			m12[2]["content"] != "<12:50>" || rs[12].PromptTokens != 150 {
			t.Errorf("12 sent %v (%d tokens), want 10's prompt, an empty answer, then <12:50>", m12, rs[12].PromptTokens)
		}
		// 13 joins: it continues its first parent's (11's) context, with 11's answer.
		if len(m13) != 5 || m13[2]["content"] != "<11:195>" || m13[3]["content"] != "a11" || m13[4]["content"] != "<13:695>" {
			t.Errorf("13 sent %v, want 11's context, a11, then <13:695>", m13)
		}
		if !strings.HasPrefix(srv.body[13][strings.Index(srv.body[13], "[")+1:], srv.body[11][strings.Index(srv.body[11], "[")+1:strings.LastIndex(srv.body[11], "]")]) {
			t.Error("13's messages do not start with 11's, byte for byte: a prefix cache would miss")
		}
	})
}

// TestSynctestAgentGaps: --gaps none sends a call when its parents end; scaled divides
// the gap by the speedup (and roots come at their trace time / speedup).
func TestSynctestAgentGaps(t *testing.T) {
	s := time.Second.Nanoseconds()
	for _, tc := range []struct {
		gaps    string
		speedup float64
		due11   int64
	}{
		{GapsNone, 1, 1 * s},     // 10 ends at 1 s
		{GapsScaled, 2, 2 * s},   // 10 ends at 1 s; 2 s / 2
		{GapsRecorded, 2, 3 * s}, // the tool takes its 2 s whatever the speedup
	} {
		t.Run(tc.gaps, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &agentServer{took: map[int64]time.Duration{10: time.Second}, body: map[int64]string{}}
				reqs := []trace.Request{agentTrace()[0], agentTrace()[4]}
				rs, _ := runAgents(t, reqs, srv, func(o *Options) { o.Gaps, o.Speedup = tc.gaps, tc.speedup })
				if r := rs[11]; r.ScheduledNS != tc.due11 || r.SentNS != tc.due11 {
					t.Errorf("11 due %d sent %d, want %d", r.ScheduledNS, r.SentNS, tc.due11)
				}
			})
		})
	}
}

// TestSynctestAgentEndSession: with --on-turn-error end-session, a failed call's session
// sends nothing more: the join that waited for it is recorded dropped, never sent; the
// other session goes on.
func TestSynctestAgentEndSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &agentServer{took: map[int64]time.Duration{10: time.Second, 11: 3 * time.Second, 12: 500 * time.Millisecond},
			fail: map[int64]bool{12: true}, body: map[int64]string{}}
		rs, _ := runAgents(t, agentTrace(), srv, func(o *Options) { o.OnTurnError = TurnErrorEndSession })
		if r := rs[13]; r.Status != results.StatusDropped || r.SentNS != results.Null || !strings.Contains(r.Error, "call 2 of the session failed") {
			t.Errorf("13: %s sent %d %q, want dropped, never sent, naming call 2", r.Status, r.SentNS, r.Error)
		}
		if _, sent := srv.body[13]; sent {
			t.Error("13 was sent")
		}
		if rs[11].Status != results.StatusOK || rs[21].Status != results.StatusOK {
			t.Errorf("11 %s, 21 %s: want both ok (11 was in flight; 21 is another session)", rs[11].Status, rs[21].Status)
		}
	})
}

// TestPlanAgentsRejects: a bad DAG is an error naming the row before anything is sent.
func TestPlanAgentsRejects(t *testing.T) {
	reqs := agentTrace()
	reqs[3].Call.Parents = []int64{99}
	_, err := PlanAgents(trace.NewSliceSource(reqs), "t.parquet", planner{speedup: 1}, 0)
	if err == nil || !strings.Contains(err.Error(), "t.parquet row 3 (request_id 21): parents: request_id 99 is not an earlier row") {
		t.Fatalf("%v", err)
	}
}

// TestSynctestAgentSessionsTogether: --agent-sessions N replays the trace's first N
// sessions only, all started at once; rows of other sessions and without one are not sent.
func TestSynctestAgentSessionsTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &agentServer{took: map[int64]time.Duration{10: time.Second, 11: time.Second, 12: time.Second, 13: time.Second,
			20: 200 * time.Millisecond, 21: 100 * time.Millisecond}, body: map[int64]string{}}
		rs, _ := runAgentsTogether(t, agentTrace(), srv, 2, nil)
		if len(rs) != 6 {
			t.Fatalf("%d records, want the 6 calls of sessions 7 and 8", len(rs))
		}
		s := time.Second.Nanoseconds()
		for id, due := range map[int64]int64{10: 0, 20: 0, 21: 12 * s / 10, 11: 3 * s, 12: 3 * s, 13: 34 * s} {
			if r := rs[id]; r.Status != results.StatusOK || r.ScheduledNS != due || r.SentNS != due {
				t.Errorf("call %d: %s due %d sent %d, want %d", id, r.Status, r.ScheduledNS, r.SentNS, due)
			}
		}
		one, _ := runAgentsTogether(t, agentTrace(), srv, 1, nil)
		if _, ok := one[20]; len(one) != 4 || ok {
			t.Errorf("--agent-sessions 1 sent %d calls (session 8's first: %v), want session 7's 4", len(one), ok)
		}
	})
	if _, err := PlanAgents(trace.NewSliceSource(agentTrace()), "t.parquet", planner{speedup: 1}, 3); err == nil ||
		!strings.Contains(err.Error(), "--agent-sessions 3: trace t.parquet has 2 sessions") {
		t.Errorf("3 of 2 sessions: %v", err)
	}
}

// TestSynctestAgentsResponsesInput: through the Responses API an agent's context is its
// "input" list, the same messages chat sends (a body of the context's messages around a
// new user message, valid JSON, the context in place).
func TestSynctestAgentsResponsesInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base, _ := wire.BaseURL("http://127.0.0.1:9/v1")
		c, err := transport.NewClient(transport.ClientOptions{BaseURL: base, API: wire.APIResponses, Backend: wire.BackendVLLM, Model: "m",
			MaxInflight: 64, HTTPClient: "net/http"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		srv := &agentServer{took: map[int64]time.Duration{}, body: map[int64]string{}}
		rs, _ := runAgents(t, agentTrace(), srv, func(o *Options) { o.Client = c })
		for id, want := range map[int64][]string{10: {"<10:100>"}, 11: {"<10:100>", "a10", "<11:195>"}, 13: {"<10:100>", "a10", "<11:195>", "a11", "<13:695>"}} {
			if rs[id].Status != results.StatusOK {
				t.Fatalf("call %d: %s %s", id, rs[id].Status, rs[id].Error)
			}
			var b struct {
				Input []map[string]string
				Store *bool
			}
			if err := json.Unmarshal([]byte(srv.body[id]), &b); err != nil {
				t.Fatalf("call %d: body %q: %v", id, srv.body[id], err)
			}
			var got []string
			for _, m := range b.Input {
				got = append(got, m["content"])
			}
			if strings.Join(got, "|") != strings.Join(want, "|") || b.Store == nil || *b.Store || b.Input[len(b.Input)-1]["role"] != "user" {
				t.Errorf("call %d sent input %v (store %v), want %v", id, b.Input, b.Store, want)
			}
		}
	})
}
