package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// templateServer counts a prompt as a chat template of known shape would: a chat request
// of m messages is perRequest + perMessage*m tokens plus its contents' (cl100k_base, the
// builder's encoding, so that a builder word is one token); a completions prompt is
// perRequest plus its text's (a BOS token, say). It has no /tokenize, so calibration
// counts through usage probes. Its answers are builder text of exactly max_tokens tokens,
// so that an answer taken into a conversation's history counts as its output tokens.
type templateServer struct {
	perRequest, perMessage int
	lastOnly               bool // counts a chat request's last message alone
	enc                    *tokenize.Encoding
	answers                *tokenize.Builder

	mu sync.Mutex
	n  int64 // answers given: each a different text
}

// templateBody is what templateServer reads of a request.
type templateBody struct {
	Prompt   string `json:"prompt"`
	Messages []struct {
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens int  `json:"max_tokens"`
	Stream    bool `json:"stream"`
}

func (s *templateServer) count(body *templateBody) int {
	n := s.perRequest + s.enc.Count(body.Prompt)
	msgs := body.Messages
	if s.lastOnly && len(msgs) > 0 {
		msgs = msgs[len(msgs)-1:]
	}
	for _, m := range msgs {
		n += s.perMessage + s.enc.Count(m.Content)
	}
	return n
}

func (s *templateServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		fmt.Fprint(w, `{"data":[{"id":"m"}]}`)
		return
	}
	chat := r.URL.Path == "/v1/chat/completions"
	if !chat && r.URL.Path != "/v1/completions" {
		http.NotFound(w, r)
		return
	}
	var body templateBody
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	prompt := s.count(&body)
	s.mu.Lock()
	s.n++
	id := s.n
	s.mu.Unlock()
	answer, _ := s.answers.AppendPrompt(nil, tokenize.PromptSpec{RequestID: id, Tokens: max(body.MaxTokens, 1)})
	if !body.Stream {
		fmt.Fprintf(w, `{"choices":[{"index":0,"text":"x","finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":1}}`, prompt)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	q, _ := json.Marshal(string(answer))
	if chat {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%s},\"finish_reason\":\"length\"}]}\n\n", q)
	} else {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":%s,\"finish_reason\":\"length\"}]}\n\n", q)
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", prompt, s.enc.Count(string(answer)))
}

// conversationTrace is sessions of turns whose prompt_tokens count the whole
// conversation as a server reports it: each turn the previous turn's prompt, its answer
// and new text of 60 to 95 tokens (room for any template of the tests), except the last
// session's third turn, whose length is its predecessor's: it cannot hold its history
// (shortTurn). With calls, each
// turn is an agent's call that appends to its predecessor's context (--sessions dag).
func conversationTrace(t *testing.T, sessions, turns int, calls bool) (string, []trace.Request) {
	var reqs []trace.Request
	prompt := make([]int32, sessions)
	for turn := range turns {
		for s := range sessions {
			i := len(reqs)
			out := int32(10 + 7*((i+turn)%4))
			if turn == 0 {
				prompt[s] = int32(200 + 31*s)
			} else {
				prev := reqs[i-sessions]
				prompt[s] = prev.PromptTokens + prev.OutputTokens + int32(60+5*((i*3)%8))
				if s == sessions-1 && turn == 2 {
					prompt[s] = prev.PromptTokens
				}
			}
			r := trace.Request{ID: int64(i + 1), Arrival: time.Duration(i) * time.Millisecond,
				PromptTokens: prompt[s], OutputTokens: out, SessionID: int64(500 + s), HasSession: true}
			if calls {
				r.Call = trace.NewCall()
				if turn > 0 {
					r.Call.Parents, r.Call.Gap, r.Call.GapKind = []int64{reqs[i-sessions].ID}, time.Millisecond, trace.GapTool
				}
			}
			reqs = append(reqs, r)
		}
	}
	return writeTrace(t, reqs), reqs
}

// runConversations replays the conversation trace tr (conversationTrace) with Prepare and
// Run, as `llmreplay replay` would, against endpoint in mode (sequential sessions with
// actual history, or agents) and reads the results back.
func runConversations(t *testing.T, tr, endpoint string, api wire.API, mode string, calibrate bool) (*Summary, []results.Result, *results.RunMeta) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Trace, cfg.Endpoint, cfg.API, cfg.Calibrate = tr, endpoint, string(api), calibrate
	cfg.Sessions, cfg.Quiet = mode, true
	if mode == SessionsSequential {
		cfg.History = HistoryActual
	}
	cfg.Output = filepath.Join(t.TempDir(), "r.parquet")
	sess, err := Prepare(context.Background(), cfg, Env{ToolVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	sum, err := Run(context.Background(), sess.Options)
	if err != nil {
		t.Fatal(err)
	}
	rows, meta, err := results.ReadFile(cfg.Output)
	if err != nil {
		t.Fatal(err)
	}
	return sum, rows, meta
}

// TestCalibratedConversations replays conversations with actual history (and agents'
// calls, each appending to its predecessor's context) against servers
// whose template costs perRequest tokens a request and perMessage a message, each zero
// and not. With --calibrate every turn's prompt, history and all, is counted by the
// server as exactly the trace's prompt_tokens: the calibration measures the template of a
// one-message prompt and what each earlier answer and user message add, and the history
// counts each earlier turn's text without the template of the request it was sent in.
// Without --calibrate the builder's text is the trace's length and the server adds its
// template on top: perRequest + perMessage x messages (docs/replay.md, "History").
func TestCalibratedConversations(t *testing.T) {
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		t.Fatal(err)
	}
	answers, err := tokenize.NewBuilder(enc, tokenize.BuilderOptions{Seed: 77})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{SessionsSequential, SessionsDAG} {
		tr, reqs := conversationTrace(t, 3, 4, mode == SessionsDAG)
		byID := map[int64]trace.Request{}
		for _, q := range reqs {
			byID[q.ID] = q
		}
		testCalibratedConversations(t, enc, answers, mode, tr, reqs, byID)
	}
}

// shortTurn reports whether conversationTrace's turn of session is one whose history does
// not fit its trace length.
func shortTurn(session int64, turn int32, sessions int) bool {
	return session == int64(500+sessions-1) && turn == 2
}

func testCalibratedConversations(t *testing.T, enc *tokenize.Encoding, answers *tokenize.Builder, mode, tr string, reqs []trace.Request, byID map[int64]trace.Request) {
	for _, api := range []wire.API{wire.APIChat, wire.APICompletions} {
		for _, tmpl := range [][2]int{{0, 0}, {7, 0}, {0, 5}, {3, 4}} {
			if api == wire.APICompletions && tmpl[1] != 0 {
				continue // a completions prompt has no messages
			}
			for _, calibrate := range []bool{true, false} {
				name := fmt.Sprintf("%s/%s/request%d-message%d/calibrate=%v", mode, api, tmpl[0], tmpl[1], calibrate)
				t.Run(name, func(t *testing.T) {
					srv := httptest.NewServer(&templateServer{perRequest: tmpl[0], perMessage: tmpl[1], enc: enc, answers: answers})
					t.Cleanup(srv.Close)
					sum, rows, meta := runConversations(t, tr, srv.URL+"/v1", api, mode, calibrate)
					if sum.HistoryLonger != 1 {
						t.Errorf("%d turns sent longer than the trace, want 1: the last session's third", sum.HistoryLonger)
					}
					// What was measured: a one-message prompt's template (c + d) and each
					// earlier answer and user message's (2d; none for completions).
					perExchange := 2 * tmpl[1]
					if api == wire.APICompletions {
						perExchange = 0
					}
					if got := meta.Flags["history-overhead"]; calibrate && (!strings.HasPrefix(got, fmt.Sprintf("%d.00 tokens per request ", tmpl[0]+tmpl[1])) ||
						!strings.Contains(got, fmt.Sprintf(" + %d.00 per earlier answer and user message", perExchange))) {
						t.Errorf("history-overhead %q, want %d per request and %d per earlier answer and user message", got, tmpl[0]+tmpl[1], perExchange)
					}
					if len(rows) != len(reqs) {
						t.Fatalf("%d rows, want %d", len(rows), len(reqs))
					}
					for _, r := range rows {
						q := byID[r.RequestID]
						// A turn whose history does not fit is sent longer, and prompt_tokens
						// records what the server counts of it (its new text one builder token).
						sent := q.PromptTokens
						if shortTurn(r.SessionID, r.Turn, 3) {
							sent = r.PromptTokens
							if sent <= q.PromptTokens {
								t.Errorf("request %d: prompt_tokens %d, want more than the trace's %d: its history does not fit", r.RequestID, sent, q.PromptTokens)
							}
						}
						want := sent
						if !calibrate {
							messages := int32(0) // completions
							if api == wire.APIChat {
								messages = 2*r.Turn + 1
							}
							want += int32(tmpl[0]) + int32(tmpl[1])*messages
						}
						if r.Status != results.StatusOK || r.PromptTokens != sent || r.PromptTokensServer != want {
							t.Errorf("request %d (session %d turn %d): %s %q, prompt_tokens %d, the server counted %d; want %d counted for the trace's %d",
								r.RequestID, r.SessionID, r.Turn, r.Status, r.Error, r.PromptTokens, r.PromptTokensServer, want, q.PromptTokens)
						}
					}
				})
			}
		}
	}
}

// TestCalibratedConversationsSim replays conversations and agents' calls against the
// simulated engine, whose ChatML template (sim/server.go promptTokens) costs a request its
// reply's prefix and each message its markers. With --calibrate every turn is counted as
// exactly the trace's prompt_tokens, through every API that calibrates; without it the
// builder's text is exact and the engine adds its template on top (completions: none).
func TestCalibratedConversationsSim(t *testing.T) {
	cfg, err := sim.Profile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := sim.Start(ctx, "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, mode := range []string{SessionsSequential, SessionsDAG} {
		tr, reqs := conversationTrace(t, 3, 4, mode == SessionsDAG)
		byID := map[int64]trace.Request{}
		for _, q := range reqs {
			byID[q.ID] = q
		}
		for _, api := range []wire.API{wire.APIChat, wire.APIMessages, wire.APIResponses, wire.APICompletions} {
			for _, calibrate := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/calibrate=%v", mode, api, calibrate), func(t *testing.T) {
					_, rows, meta := runConversations(t, tr, srv.BaseURL(), api, mode, calibrate)
					t.Logf("calibration %s; history-overhead %s", meta.Flags["calibration"], meta.Flags["history-overhead"])
					for _, r := range rows {
						q := byID[r.RequestID]
						sent := q.PromptTokens
						if shortTurn(r.SessionID, r.Turn, 3) {
							sent = r.PromptTokens
						}
						want := sent
						if !calibrate && api != wire.APICompletions {
							// The engine's ChatML on top of the builder's text: the reply's
							// <|im_start|>assistant\n (3 tokens) and each message's
							// <|im_start|>, role line and <|im_end|>\n (5 for user and for
							// assistant alike).
							want += 3 + 5*(2*r.Turn+1)
						}
						if r.Status != results.StatusOK || r.PromptTokens != sent || r.PromptTokensServer != want {
							t.Errorf("request %d (session %d turn %d): %s %q, prompt_tokens %d, the engine counted %d; want %d",
								r.RequestID, r.SessionID, r.Turn, r.Status, r.Error, r.PromptTokens, r.PromptTokensServer, want)
						}
					}
				})
			}
		}
	}
}

// A server that does not count a conversation's earlier messages cannot be given the
// trace's lengths with actual history: --calibrate says so, naming what to do, before any
// request of the trace is sent.
func TestCalibrateHistoryIgnored(t *testing.T) {
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		t.Fatal(err)
	}
	answers, err := tokenize.NewBuilder(enc, tokenize.BuilderOptions{Seed: 77})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&templateServer{perRequest: 3, perMessage: 4, lastOnly: true, enc: enc, answers: answers})
	defer srv.Close()
	tr, _ := conversationTrace(t, 2, 2, false)
	cfg := DefaultConfig()
	cfg.Trace, cfg.Endpoint, cfg.API, cfg.Calibrate = tr, srv.URL+"/v1", string(wire.APIChat), true
	cfg.Sessions, cfg.History, cfg.Quiet = SessionsSequential, HistoryActual, true
	cfg.Output = filepath.Join(t.TempDir(), "r.parquet")
	_, err = Prepare(context.Background(), cfg, Env{ToolVersion: "test"})
	if err == nil || !strings.Contains(err.Error(), "does not count a conversation's earlier messages") || !strings.Contains(err.Error(), "--history synthetic") {
		t.Fatalf("Prepare: %v; want the calibration to say the server does not count earlier messages", err)
	}
}
