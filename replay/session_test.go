package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
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

// sessionTrace returns sessions conversations of turns turns each, interleaved: turn k of
// session s arrives at k*turnGap + s*sessGap. Request ids are 1 + s*turns + k.
func sessionTrace(sessions, turns int, sessGap, turnGap time.Duration) []trace.Request {
	var reqs []trace.Request
	for s := range sessions {
		for k := range turns {
			reqs = append(reqs, trace.Request{ID: int64(1 + s*turns + k), Arrival: time.Duration(k)*turnGap + time.Duration(s)*sessGap,
				PromptTokens: 3, OutputTokens: 1, SessionID: int64(1000 + s), HasSession: true})
		}
	}
	slices.SortStableFunc(reqs, func(a, b trace.Request) int { return int(a.Arrival - b.Arrival) })
	return reqs
}

// records collects the records the writer takes (seams.record): the conversation fields
// are in them whether or not the results file has their columns yet.
type records struct {
	mu   sync.Mutex
	byID map[int64]results.Result
}

func (rc *records) add(r *results.Result) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.byID == nil {
		rc.byID = map[int64]results.Result{}
	}
	rc.byID[r.RequestID] = *r
}

// checkSessionRecords checks the conversation fields of every record against the trace:
// session_id and turn always; in sequential mode, that no turn was sent before its
// predecessor ended (+ think), that it was due at max(trace due, predecessor's end + think)
// and waited exactly the difference; in independent mode, no wait. It returns how many
// turns overlapped their predecessor (sent before its end) and how many waited.
func checkSessionRecords(t *testing.T, reqs []trace.Request, rc *records, sequential bool, think time.Duration) (overlaps, waited int) {
	t.Helper()
	turn := map[int64]int32{}
	prev := map[int64]results.Result{}
	if len(rc.byID) != len(reqs) {
		t.Errorf("%d records, want %d", len(rc.byID), len(reqs))
	}
	for _, q := range reqs {
		r, ok := rc.byID[q.ID]
		if !ok {
			t.Errorf("request %d: no record", q.ID)
			continue
		}
		k := turn[q.SessionID]
		turn[q.SessionID]++
		if r.SessionID != q.SessionID || r.Turn != k {
			t.Errorf("request %d: session %d turn %d, want %d turn %d", q.ID, r.SessionID, r.Turn, q.SessionID, k)
		}
		if r.Status != results.StatusOK {
			t.Errorf("request %d: status %s", q.ID, r.Status)
		}
		p, hasPrev := prev[q.SessionID]
		prev[q.SessionID] = r
		if !hasPrev {
			if r.SessionWaitNS != results.Null || r.ScheduledNS != int64(q.Arrival) {
				t.Errorf("first turn %d: scheduled %d wait %d, want %d and null", q.ID, r.ScheduledNS, r.SessionWaitNS, q.Arrival)
			}
			continue
		}
		if r.SentNS < p.EndNS {
			overlaps++
		}
		if !sequential {
			if r.SessionWaitNS != results.Null || r.ScheduledNS != int64(q.Arrival) {
				t.Errorf("independent turn %d: scheduled %d wait %d, want %d and null", q.ID, r.ScheduledNS, r.SessionWaitNS, q.Arrival)
			}
			continue
		}
		ready := p.EndNS + int64(think)
		if r.SentNS < ready {
			t.Errorf("session %d turn %d (request %d) sent at %d, before its predecessor's end %d + think %v", q.SessionID, k, q.ID, r.SentNS, p.EndNS, think)
		}
		if want := max(int64(q.Arrival), ready); r.ScheduledNS != want {
			t.Errorf("request %d: scheduled %d, want max(trace %d, end+think %d)", q.ID, r.ScheduledNS, int64(q.Arrival), ready)
		}
		if want := max(0, ready-int64(q.Arrival)); r.SessionWaitNS != want {
			t.Errorf("request %d: session_wait_ns %d, want %d", q.ID, r.SessionWaitNS, want)
		}
		if r.SessionWaitNS > 0 {
			waited++
		}
	}
	return overlaps, waited
}

// Against a server slower than the conversation (answers take 300 ms, turns come every
// 100 ms): in sequential mode every turn waits for its predecessor's end, is due then and
// sent then (no lateness: the wait is session_wait_ns, not lateness); in independent mode
// the same trace's turns overlap their predecessors, on time.
func TestSynctestSequentialSessionsWaitForTheAnswer(t *testing.T) {
	reqs := sessionTrace(8, 4, 10*time.Millisecond, 100*time.Millisecond)
	for _, mode := range []string{SessionsSequential, SessionsIndependent} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rc records
				sr := runSynctest(t, context.Background(), trace.NewSliceSource(reqs), &fakeEndpoint{d: 300 * time.Millisecond}, func(o *Options) {
					o.Sessions, o.seams.record = mode, rc.add
				})
				if sr.err != nil {
					t.Fatal(sr.err)
				}
				overlaps, waited := checkSessionRecords(t, reqs, &rc, mode == SessionsSequential, 0)
				if l := sr.sum.Lateness; l.N != len(reqs) || l.Max != 0 {
					t.Errorf("lateness %+v, want %d sent, none late", l, len(reqs))
				}
				if mode == SessionsSequential {
					if overlaps != 0 || waited != 8*3 {
						t.Errorf("%d turns overlapped, %d waited; want 0 and 24", overlaps, waited)
					}
					// Each session: 4 answers of 300 ms back to back.
					if want := 70*time.Millisecond + 4*300*time.Millisecond; sr.took != want {
						t.Errorf("run took %v, want %v", sr.took, want)
					}
					if sr.sum.SessionWait.N != 24 || sr.sum.Sessions != SessionsSequential {
						t.Errorf("summary: %+v", sr.sum)
					}
				} else if overlaps != 8*3 {
					t.Errorf("%d turns overlapped their predecessor, want all 24", overlaps)
				}
			})
		})
	}
}

// A think time: the next turn waits for the answer and then the think time; a DIST of
// milliseconds is drawn in trace order, the same for the same seed.
func TestSynctestSequentialThinkTime(t *testing.T) {
	reqs := sessionTrace(3, 3, 0, 50*time.Millisecond)
	synctest.Test(t, func(t *testing.T) {
		var rc records
		sr := runSynctest(t, context.Background(), trace.NewSliceSource(reqs), &fakeEndpoint{d: 100 * time.Millisecond}, func(o *Options) {
			o.Sessions, o.ThinkTime, o.seams.record = SessionsSequential, ThinkTime{Fixed: 250 * time.Millisecond}, rc.add
		})
		if sr.err != nil {
			t.Fatal(sr.err)
		}
		if _, waited := checkSessionRecords(t, reqs, &rc, true, 250*time.Millisecond); waited != 6 {
			t.Errorf("%d turns waited, want 6", waited)
		}
	})
	tt, err := ParseThinkTime("uniform:100,200")
	if err != nil {
		t.Fatal(err)
	}
	draws := func() []int64 {
		th, err := newThinker(tt, 7)
		if err != nil {
			t.Fatal(err)
		}
		var d []int64
		for range 5 {
			d = append(d, th.draw())
		}
		return d
	}
	a, b := draws(), draws()
	if !slices.Equal(a, b) {
		t.Errorf("think times %v then %v from one seed", a, b)
	}
	for _, v := range a {
		if v < int64(100*time.Millisecond) || v > int64(200*time.Millisecond) {
			t.Errorf("think time %v outside uniform:100,200 ms", time.Duration(v))
		}
	}
}

// A failed turn: with continue the session goes on; with end-session its remaining turns
// are recorded dropped, never sent, due at their trace time.
func TestSynctestOnTurnError(t *testing.T) {
	reqs := sessionTrace(2, 3, 0, 10*time.Millisecond) // ids 1-3 session 1000, 4-6 session 1001
	for _, policy := range []string{TurnErrorContinue, TurnErrorEndSession} {
		t.Run(policy, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rc records
				f := &fakeEndpoint{d: 50 * time.Millisecond}
				var mu sync.Mutex
				sent := map[int64]bool{}
				sr := runSynctest(t, context.Background(), trace.NewSliceSource(reqs), f, func(o *Options) {
					o.Sessions, o.OnTurnError, o.seams.record = SessionsSequential, policy, rc.add
					o.seams.do = func(ctx context.Context, clk transport.Clock, req *transport.Request, res *results.Result) {
						mu.Lock()
						sent[req.ID] = true
						mu.Unlock()
						f.do(ctx, clk, req, res)
						if req.ID == 1 {
							res.Status, res.Error = results.StatusHTTPError, "HTTP 500: boom"
						}
					}
				})
				if sr.err != nil {
					t.Fatal(sr.err)
				}
				if len(rc.byID) != 6 {
					t.Fatalf("%d records, want 6", len(rc.byID))
				}
				for id := int64(2); id <= 3; id++ {
					r := rc.byID[id]
					if policy == TurnErrorContinue {
						if !sent[id] || r.Status != results.StatusOK {
							t.Errorf("continue: request %d sent %v status %s", id, sent[id], r.Status)
						}
						continue
					}
					if sent[id] || r.Status != results.StatusDropped || r.SentNS != results.Null ||
						!strings.Contains(r.Error, "end-session") || r.ScheduledNS != int64(id-1)*int64(10*time.Millisecond) || r.Turn != int32(id-1) {
						t.Errorf("end-session: request %d sent %v, record %+v", id, sent[id], r)
					}
				}
				for id := int64(4); id <= 6; id++ {
					if r := rc.byID[id]; !sent[id] || r.Status != results.StatusOK {
						t.Errorf("the other session's request %d: sent %v status %s", id, sent[id], r.Status)
					}
				}
			})
		})
	}
}

// A session whose rows are out of arrival order is an error naming the row and field.
func TestPlanSessionsOrder(t *testing.T) {
	reqs := []trace.Request{
		{ID: 1, Arrival: 0, PromptTokens: 1, OutputTokens: 1, SessionID: 7, HasSession: true},
		{ID: 2, Arrival: 5, PromptTokens: 1, OutputTokens: 1, SessionID: 7, HasSession: true},
		{ID: 3, Arrival: 4, PromptTokens: 1, OutputTokens: 1, SessionID: 7, HasSession: true},
		{ID: 4, Arrival: 4, PromptTokens: 1, OutputTokens: 1},
	}
	_, err := PlanSessions(trace.NewSliceSource(reqs), "t.parquet")
	if err == nil || !strings.Contains(err.Error(), "row 2 (request_id 3)") || !strings.Contains(err.Error(), "arrival_ns 4 of session_id 7") {
		t.Errorf("err %v", err)
	}
	p, err := PlanSessions(trace.NewSliceSource(reqs[:2]), "t.parquet")
	if err != nil || p.Turns[7] != 2 {
		t.Errorf("plan %+v, %v", p, err)
	}
}

func TestParseThinkTime(t *testing.T) {
	for _, tc := range []struct {
		in    string
		fixed time.Duration
		dist  bool
		bad   bool
	}{
		{"0", 0, false, false}, {"", 0, false, false}, {"3s", 3 * time.Second, false, false},
		{"lognormal:3000,2000", 0, true, false}, {"-1s", 0, false, true}, {"lognormal:x", 0, false, true},
		{"empirical:t.parquet", 0, false, true}, {"soon", 0, false, true}, {"bogus:1", 0, false, true},
	} {
		tt, err := ParseThinkTime(tc.in)
		if (err != nil) != tc.bad || tt.Fixed != tc.fixed || (tt.Dist != nil) != tc.dist {
			t.Errorf("ParseThinkTime(%q) = %+v, %v", tc.in, tt, err)
		}
	}
}

// historyServer answers every request with a text of its own, streamed in pieces that
// JSON escapes (quotes, backslash, newline, non-ASCII), and keeps each request's body by
// request id (from X-Request-Id).
type historyServer struct {
	mu     sync.Mutex
	bodies map[int64][]byte
}

func historyAnswer(id int64) []string {
	return []string{"Answer ", strconv.FormatInt(id, 10), ` says "hi" \ `, "é\n€ ", "end."}
}

func (s *historyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		fmt.Fprint(w, `{"data":[{"id":"m"}]}`)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	rid := r.Header.Get(transport.RequestIDHeader)
	id, _ := strconv.ParseInt(rid[strings.LastIndexByte(rid, '-')+1:], 10, 64)
	s.mu.Lock()
	if s.bodies == nil {
		s.bodies = map[int64][]byte{}
	}
	s.bodies[id] = raw
	s.mu.Unlock()
	chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
	w.Header().Set("Content-Type", "text/event-stream")
	if strings.HasSuffix(r.URL.Path, "/messages") { // Anthropic's Messages API
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":0}}}\n\n")
		for _, piece := range historyAnswer(id) {
			q, _ := json.Marshal(piece)
			fmt.Fprintf(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":%s}}\n\n", q)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		return
	}
	for _, piece := range historyAnswer(id) {
		q, _ := json.Marshal(piece)
		if chat {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%s},\"finish_reason\":null}]}\n\n", q)
		} else {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":%s,\"finish_reason\":null}]}\n\n", q)
		}
		w.(http.Flusher).Flush()
	}
	fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5}}\n\ndata: [DONE]\n\n")
}

// Actual history, over both HTTP clients and every API: turn k+1 begins with exactly what
// turn k sent and then exactly the text it received, byte for byte (chat and Anthropic's
// messages: as messages alternating user and assistant; completions: concatenated), then
// new text.
func TestSequentialHistoryActual(t *testing.T) {
	reqs := sessionTrace(3, 3, time.Millisecond, 5*time.Millisecond)
	for i := range reqs {
		// A later turn's trace length counts its whole conversation: room for the history
		// (40 + 5 tokens a turn) and new text; but session 1002's lengths do not add up.
		reqs[i].PromptTokens = 40 + 60*int32((reqs[i].ID-1)%3)
		if reqs[i].SessionID == 1002 {
			reqs[i].PromptTokens = 40
		}
		reqs[i].OutputTokens = 5
	}
	for _, api := range []wire.API{wire.APIChat, wire.APICompletions, wire.APIMessages} {
		for _, hc := range []string{transport.HTTPClientRaw, transport.HTTPClientNetHTTP} {
			if hc == transport.HTTPClientRaw && !transport.RawBuilt {
				continue
			}
			t.Run(string(api)+"/"+hc, func(t *testing.T) {
				srv := &historyServer{}
				c := newTestClient(t, vllmtest.Start(t, srv), func(o *transport.ClientOptions) { o.API, o.HTTPClient = api, hc })
				var rc records
				sum, _, _ := runTrace(t, context.Background(), c, reqs, func(o *Options) {
					o.Sessions, o.History, o.seams.record = SessionsSequential, HistoryActual, rc.add
				})
				if sum.HistoryLonger != 2 {
					t.Errorf("summary: %d turns sent longer than the trace says, want 2 (session 1002's later turns)", sum.HistoryLonger)
				}
				prev := map[int64]int64{} // session -> previous request id
				// Session 1002: history (40 sent + 5 received) + 1 new token, then 46 + 5 + 1.
				for id, want := range map[int64]int32{7: 40, 8: 46, 9: 52} {
					if got := rc.byID[id].PromptTokens; got != want {
						t.Errorf("request %d: prompt_tokens %d, want %d (what was sent)", id, got, want)
					}
				}
				for _, q := range reqs {
					r := rc.byID[q.ID]
					if r.Status != results.StatusOK {
						t.Fatalf("request %d: %s %s", q.ID, r.Status, r.Error)
					}
					if r.PromptTokens != q.PromptTokens && q.SessionID != 1002 {
						t.Errorf("request %d: prompt_tokens %d, want the trace's %d (its history fits)", q.ID, r.PromptTokens, q.PromptTokens)
					}
					p, ok := prev[q.SessionID]
					prev[q.SessionID] = q.ID
					if !ok {
						continue
					}
					answer := strings.Join(historyAnswer(p), "")
					var cur, before vllmtest.ReqBody
					json.Unmarshal(srv.bodies[q.ID], &cur)
					json.Unmarshal(srv.bodies[p], &before)
					if api == wire.APICompletions {
						if want := before.Prompt + answer; !strings.HasPrefix(cur.Prompt, want) || len(cur.Prompt) == len(want) {
							t.Errorf("request %d: prompt %q does not begin with turn %d's prompt and answer %q, then new text", q.ID, cur.Prompt, p, want)
						}
						continue
					}
					n := len(before.Messages)
					if len(cur.Messages) != n+2 {
						t.Fatalf("request %d: %d messages, want %d", q.ID, len(cur.Messages), n+2)
					}
					for i, m := range before.Messages {
						if cur.Messages[i] != m {
							t.Errorf("request %d: message %d %+v, want turn %d's %+v", q.ID, i, cur.Messages[i], p, m)
						}
					}
					if a := cur.Messages[n]; a.Role != "assistant" || a.Content != answer {
						t.Errorf("request %d: message %d %+v, want the assistant's answer %q byte for byte", q.ID, n, a, answer)
					}
					if u := cur.Messages[n+1]; u.Role != "user" || u.Content == "" {
						t.Errorf("request %d: last message %+v, want new user text", q.ID, u)
					}
				}
			})
		}
	}
}

// Bad conversation input is an error naming the flag before anything is sent; the
// defaults follow the trace.
func TestPrepareSessions(t *testing.T) {
	srv := &vllmtest.Server{}
	u := vllmtest.Start(t, srv)
	plain := writeTrace(t, uniformTrace(4, time.Millisecond, 3, 2))
	conv := writeTrace(t, sessionTrace(2, 2, time.Millisecond, 10*time.Millisecond))
	prep := func(path string, mod func(*Config)) (*Session, error) {
		cfg := DefaultConfig()
		cfg.Endpoint, cfg.Trace, cfg.Quiet, cfg.Prewarm = u.String(), path, true, 0
		cfg.Output = filepath.Join(t.TempDir(), "r.parquet")
		if mod != nil {
			mod(&cfg)
		}
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		s, err := Prepare(context.Background(), cfg, Env{Flags: map[string]string{}})
		if s != nil {
			t.Cleanup(s.Close)
		}
		return s, err
	}
	for _, tc := range []struct {
		name, path string
		mod        func(*Config)
		want       string
	}{
		{"sequential without sessions", plain, func(c *Config) { c.Sessions = SessionsSequential }, "--sessions sequential: trace t.parquet has no session_id"},
		{"think time", conv, func(c *Config) { c.ThinkTime = "lognormal:3000" }, "--think-time"},
		{"think time unit", conv, func(c *Config) { c.ThinkTime = "3 s" }, "--think-time"},
		{"actual and token ids", conv, func(c *Config) { c.History, c.PromptFormat = HistoryActual, "token-ids" }, "--history actual: needs text prompts"},
		{"actual and independent", conv, func(c *Config) { c.History, c.Sessions = HistoryActual, SessionsIndependent }, "--history actual: needs --sessions sequential"},
		{"turn error", conv, func(c *Config) { c.OnTurnError = "retry" }, "--on-turn-error"},
	} {
		_, err := prep(tc.path, tc.mod)
		if !IsConfigError(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a usage error with %q", tc.name, err, tc.want)
		}
	}
	if n := srv.Count.Load(); n != 0 {
		t.Errorf("%d requests sent for bad input", n)
	}
	// Defaults: sequential with actual history (text prompts) on a conversation trace;
	// independent on the other; sequential in the closed loop too.
	s, err := prep(conv, func(c *Config) { c.PromptFormat = "auto" })
	if err != nil {
		t.Fatal(err)
	}
	if o := s.Options; o.Sessions != SessionsSequential || o.History != HistoryActual || o.Client.Options().TokenIDPrompts || o.SessionPlan.Turns[1000] != 2 ||
		o.Meta.Flags["sessions"] != SessionsSequential || o.Meta.Flags["history"] != HistoryActual {
		t.Errorf("conversation trace: sessions %q history %q plan %+v flags %v", o.Sessions, o.History, o.SessionPlan, o.Meta.Flags)
	}
	if s, err = prep(plain, nil); err != nil || s.Options.Sessions != "" || s.Options.Meta.Flags["sessions"] != SessionsIndependent {
		t.Errorf("plain trace: %v %q", err, s.Options.Sessions)
	}
	if s, err = prep(conv, func(c *Config) { c.Concurrency, c.ConcurrencySet = 2, true }); err != nil || s.Options.Sessions != SessionsSequential {
		t.Errorf("closed loop: %v %q", err, s.Options.Sessions)
	}
	if s, err = prep(conv, func(c *Config) { c.PromptFormat = "token-ids" }); err != nil || s.Options.History != HistorySynthetic || !s.Options.Client.Options().TokenIDPrompts {
		t.Errorf("token ids: %v %q", err, s.Options.History)
	}
}

// A stop while sessions wait for their answers: the turns in flight finish within the
// grace, the queued ones are not sent, and Run returns (the preparer, which records the
// turns of ended sessions, is done before the records are closed).
func TestSynctestSequentialStop(t *testing.T) {
	reqs := sessionTrace(4, 4, 0, 10*time.Millisecond)
	synctest.Test(t, func(t *testing.T) {
		ctx, stop, abort := WithStop(context.Background())
		defer abort()
		time.AfterFunc(450*time.Millisecond, stop)
		var rc records
		sr := runSynctest(t, ctx, trace.NewSliceSource(reqs), &fakeEndpoint{d: 200 * time.Millisecond}, func(o *Options) {
			o.Sessions, o.OnTurnError, o.seams.record = SessionsSequential, TurnErrorEndSession, rc.add
		})
		if sr.err != nil {
			t.Fatal(sr.err)
		}
		// Turns 0 and 1 of each session ran (0-200, 200-400 ms), turn 2 was sent at 400 ms
		// and finishes in the grace; turn 3 was never due.
		if len(rc.byID) != 12 || sr.took != 600*time.Millisecond {
			t.Errorf("%d records, run took %v; want 12 and 600ms", len(rc.byID), sr.took)
		}
		for id, r := range rc.byID {
			if r.Status != results.StatusOK || r.Turn > 2 {
				t.Errorf("request %d: turn %d %s", id, r.Turn, r.Status)
			}
		}
	})
}

// Closed loop, sequential sessions: a worker keeps the conversation it starts. Two workers,
// three conversations of three turns, answers in 100 ms, think time 50 ms: each worker runs
// one conversation to its end (turns at 0, 150, 300 ms), and the third starts when a worker
// is free of its own (400 ms); no wait beyond a trace time is recorded (there is none).
func TestSynctestClosedLoopSessionsStayOnAWorker(t *testing.T) {
	reqs := sessionTrace(3, 3, 0, 10*time.Millisecond)
	synctest.Test(t, func(t *testing.T) {
		var rc records
		var mu sync.Mutex
		inflight := map[int64]int{} // session -> turns in flight
		f := &fakeEndpoint{d: 100 * time.Millisecond}
		sr := runSynctest(t, context.Background(), trace.NewSliceSource(reqs), f, func(o *Options) {
			o.Concurrency, o.Sessions, o.ThinkTime, o.seams.record = 2, SessionsSequential, ThinkTime{Fixed: 50 * time.Millisecond}, rc.add
			o.seams.do = func(ctx context.Context, clk transport.Clock, req *transport.Request, res *results.Result) {
				mu.Lock()
				inflight[req.Session]++
				if inflight[req.Session] > 1 {
					t.Errorf("session %d: two turns in flight at %v", req.Session, time.Duration(clk.Now()))
				}
				mu.Unlock()
				f.do(ctx, clk, req, res)
				mu.Lock()
				inflight[req.Session]--
				mu.Unlock()
			}
		})
		if sr.err != nil {
			t.Fatal(sr.err)
		}
		ms := int64(time.Millisecond)
		// By session: turn sends; sessions 1000 and 1001 start at 0, 1002 at 400 ms.
		want := map[int64][]int64{1000: {0, 150 * ms, 300 * ms}, 1001: {0, 150 * ms, 300 * ms}, 1002: {400 * ms, 550 * ms, 700 * ms}}
		for id, r := range rc.byID {
			w := want[r.SessionID]
			if r.Status != results.StatusOK || r.Turn < 0 || int(r.Turn) >= len(w) || r.SentNS != w[r.Turn] || r.ScheduledNS != r.SentNS || r.SessionWaitNS != results.Null {
				t.Errorf("request %d: %+v, want sent and scheduled at %v, no session wait", id, r, w)
			}
		}
		if len(rc.byID) != 9 || sr.took != 800*time.Millisecond {
			t.Errorf("%d records in %v, want 9 in 800ms", len(rc.byID), sr.took)
		}
	})
}
