package transport

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/wire"
)

// responsesClients are the HTTP clients a test runs through: net/http, and the raw client
// where it exists.
func responsesClients() []string {
	clients := []string{HTTPClientNetHTTP}
	if runtime.GOOS == "linux" {
		clients = append(clients, HTTPClientRaw)
	}
	return clients
}

// responsesEvent is one event as OpenAI's streaming events reference writes it: the type
// on the event line and in the data.
func responsesEvent(w io.Writer, typ, fields string) {
	fmt.Fprintf(w, "event: %s\ndata: {\"type\":%q,%s}\n\n", typ, typ, fields)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// TestResponsesServed: a server written from OpenAI's Responses reference streams
// reasoning deltas, then answer deltas, then response.completed with its usage. On both
// clients the request is ok, its output and prompt tokens are the usage's, every delta is
// an output chunk, and the first reasoning and first answer deltas are dated between the
// server's start of writing them and its next write (which waits until the client has
// taken the delta: no sleep, no timed bound).
func TestResponsesServed(t *testing.T) {
	const reasoning, answer, input, cached = 7, 5, 12, 8
	for _, hc := range responsesClients() {
		t.Run(hc, func(t *testing.T) {
			var taken atomic.Int64 // output chunks the client has taken (onTokens)
			waitTaken := func(n int64) {
				for deadline := time.Now().Add(10 * time.Second); taken.Load() < n; time.Sleep(100 * time.Microsecond) {
					if time.Now().After(deadline) {
						t.Errorf("the client never took output chunk %d", n)
						return
					}
				}
			}
			var firstReasoning, afterReasoning, firstAnswer, afterAnswer atomic.Int64 // wall ns
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if r.URL.Path != "/v1/responses" || !strings.Contains(string(body), `"input":`) || !strings.Contains(string(body), `"max_output_tokens":12`) {
					http.Error(w, "unexpected request "+r.URL.Path+" "+string(body), http.StatusBadRequest)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				responsesEvent(w, "response.created", `"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null},"sequence_number":0`)
				responsesEvent(w, "response.in_progress", `"response":{"id":"resp_1","object":"response","status":"in_progress","output":[],"usage":null},"sequence_number":1`)
				responsesEvent(w, "response.output_item.added", `"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]},"sequence_number":2`)
				for i := 0; i < reasoning; i++ {
					if i == 1 {
						waitTaken(1)
						afterReasoning.Store(time.Now().UnixNano())
					}
					if i == 0 {
						firstReasoning.Store(time.Now().UnixNano())
					}
					responsesEvent(w, "response.reasoning_text.delta", `"item_id":"rs_1","output_index":0,"content_index":0,"delta":"hm ","sequence_number":3`)
				}
				responsesEvent(w, "response.reasoning_text.done", `"item_id":"rs_1","output_index":0,"content_index":0,"text":"hm","sequence_number":4`)
				responsesEvent(w, "response.output_item.done", `"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]},"sequence_number":5`)
				responsesEvent(w, "response.output_item.added", `"output_index":1,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]},"sequence_number":6`)
				responsesEvent(w, "response.content_part.added", `"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]},"sequence_number":7`)
				for i := 0; i < answer; i++ {
					if i == 1 {
						waitTaken(reasoning + 1)
						afterAnswer.Store(time.Now().UnixNano())
					}
					if i == 0 {
						firstAnswer.Store(time.Now().UnixNano())
					}
					responsesEvent(w, "response.output_text.delta", `"item_id":"msg_1","output_index":1,"content_index":0,"delta":"ok\n","sequence_number":8`)
				}
				responsesEvent(w, "response.output_text.done", `"item_id":"msg_1","output_index":1,"content_index":0,"text":"ok","sequence_number":9`)
				responsesEvent(w, "response.content_part.done", `"item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":"ok","annotations":[]},"sequence_number":10`)
				responsesEvent(w, "response.output_item.done", `"output_index":1,"item":{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[]},"sequence_number":11`)
				responsesEvent(w, "response.completed", fmt.Sprintf(`"response":{"id":"resp_1","object":"response","status":"completed","usage":{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":%d},"total_tokens":%d}},"sequence_number":12`,
					input, cached, reasoning+answer, reasoning, input+reasoning+answer))
			}))
			defer srv.Close()
			base, _ := url.Parse(srv.URL + "/v1")
			c := newTestClient(t, base, func(o *ClientOptions) { o.HTTPClient, o.API = hc, wire.APIResponses })
			tr := c.Transport()
			req := &Request{ID: 1, PromptTokens: input, OutputTokens: reasoning + answer, Body: c.AppendBody(nil, []byte("why?"), reasoning+answer)}
			tr.Prepare(req, false)
			res := results.NewResult(1, 0, 0, input, reasoning+answer)
			clk := Clock{Start: time.Now()}
			tr.RoundTrip(context.Background(), clk, req, res, NewSSEReader(nil, clk.Now, 4096, DefaultMaxLine), func(n int) { taken.Add(int64(n)) }, nil)
			if res.Status != results.StatusOK {
				t.Fatalf("%s %s", res.Status, res.Error)
			}
			if len(res.ChunkNS) != reasoning+answer || res.OutputTokens != reasoning+answer || res.OutputTokensSource != results.SourceUsage ||
				res.PromptTokensServer != input || res.PromptTokensCached != cached {
				t.Errorf("%d chunks, output %d (%s), prompt %d, cached %d; want %d chunks and output, %d prompt, %d cached",
					len(res.ChunkNS), res.OutputTokens, res.OutputTokensSource, res.PromptTokensServer, res.PromptTokensCached, reasoning+answer, input, cached)
			}
			const tol = 50_000 // ns: the wall and monotonic readings of one time.Now
			wall := func(runNS int64) int64 { return clk.Start.UnixNano() + runNS }
			if got := wall(res.FirstTokenNS); got < firstReasoning.Load()-tol || got > afterReasoning.Load()+tol {
				t.Errorf("TTFT dated %d ns after the first reasoning delta's write began; its next write began %d ns after",
					got-firstReasoning.Load(), afterReasoning.Load()-firstReasoning.Load())
			}
			if got := wall(res.SentNS + res.ChunkNS[reasoning]); got < firstAnswer.Load()-tol || got > afterAnswer.Load()+tol {
				t.Errorf("first answer chunk dated %d ns after its write began; the next write began %d ns after",
					got-firstAnswer.Load(), afterAnswer.Load()-firstAnswer.Load())
			}
		})
	}
}

// TestResponsesBadStreams: a Responses stream that goes wrong ends its record as a clear
// stream_error on both clients, every output chunk before the fault kept, nothing hung.
func TestResponsesBadStreams(t *testing.T) {
	delta := func(w io.Writer) {
		responsesEvent(w, "response.output_text.delta", `"item_id":"m","output_index":0,"content_index":0,"delta":"a"`)
	}
	cases := []struct {
		name  string
		serve func(w io.Writer)
		want  string
	}{
		{"unknown event", func(w io.Writer) {
			delta(w)
			responsesEvent(w, "response.telepathy.delta", `"delta":"x"`)
		}, `unknown event type "response.telepathy.delta"`},
		{"no response.completed", func(w io.Writer) { delta(w); delta(w) }, "stream ended before response.completed after 2 output chunks"},
		{"error event", func(w io.Writer) {
			delta(w)
			responsesEvent(w, "error", `"code":"server_error","message":"the engine died","param":null`)
		}, "server error event: "},
		{"error without its event line", func(w io.Writer) {
			delta(w)
			io.WriteString(w, "data: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"the engine died\"}\n\n")
		}, "server error mid-stream: server_error: the engine died"},
		{"response.failed", func(w io.Writer) {
			delta(w)
			responsesEvent(w, "response.failed", `"response":{"status":"failed","error":{"code":"server_error","message":"out of memory"}}`)
		}, "server error mid-stream: response.failed: server_error: out of memory"},
		{"truncated delta", func(w io.Writer) {
			delta(w)
			io.WriteString(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"tru\n\n")
		}, "event 2: malformed chunk: unexpected end of JSON input"},
	}
	for _, hc := range responsesClients() {
		for _, tc := range cases {
			t.Run(hc+"/"+tc.name, func(t *testing.T) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.Copy(io.Discard, r.Body)
					w.Header().Set("Content-Type", "text/event-stream")
					tc.serve(w)
				}))
				defer srv.Close()
				base, _ := url.Parse(srv.URL + "/v1")
				c := newTestClient(t, base, func(o *ClientOptions) { o.HTTPClient, o.API = hc, wire.APIResponses })
				tr := c.Transport()
				req := &Request{ID: 1, PromptTokens: 3, OutputTokens: 4, Body: c.AppendBody(nil, []byte("q"), 4)}
				tr.Prepare(req, false)
				res := results.NewResult(1, 0, 0, 3, 4)
				clk := Clock{Start: time.Now()}
				tr.RoundTrip(context.Background(), clk, req, res, NewSSEReader(nil, clk.Now, 4096, DefaultMaxLine), nil, nil)
				if res.Status != results.StatusStreamError || !strings.Contains(res.Error, tc.want) {
					t.Errorf("%s %q, want stream_error with %q", res.Status, res.Error, tc.want)
				}
				want := 1
				if tc.name == "no response.completed" {
					want = 2
				}
				if len(res.ChunkNS) != want {
					t.Errorf("%d output chunks kept, want %d", len(res.ChunkNS), want)
				}
			})
		}
	}
}

// TestResponsesLengthCheck: the preflight's length check speaks the Responses API: it
// reads the deltas and response.completed's usage, and says which length fields it sent
// and whether they force the length (vLLM's ResponsesRequest takes ignore_eos, SGLang's
// nothing but the cap).
func TestResponsesLengthCheck(t *testing.T) {
	var body atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body.Store(string(b))
		w.Header().Set("Content-Type", "text/event-stream")
		responsesEvent(w, "response.output_text.delta", `"delta":"a"`)
		responsesEvent(w, "response.output_text.delta", `"delta":"b"`)
		responsesEvent(w, "response.incomplete", `"response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":3,"output_tokens":2}}`)
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL + "/v1")
	for _, tc := range []struct {
		backend wire.Backend
		fields  string
		forced  bool
	}{
		{wire.BackendVLLM, "max_output_tokens and ignore_eos", true},
		{wire.BackendSGLang, "max_output_tokens", false},
	} {
		c := newTestClient(t, base, func(o *ClientOptions) { o.API, o.Backend = wire.APIResponses, tc.backend })
		l, err := c.CheckLength(context.Background(), []byte("q"), 4)
		if err != nil {
			t.Fatal(err)
		}
		if l.Field != "max_output_tokens" || l.Fields != tc.fields || l.Forced != tc.forced || l.Chunks != 2 || l.CompletionTokens != 2 || !l.Finished || l.Over() {
			t.Errorf("%s: %+v", tc.backend, l)
		}
		if b := body.Load().(string); strings.Contains(b, "min_tokens") || strings.Contains(b, "ignore_eos") != tc.forced {
			t.Errorf("%s: body %s", tc.backend, b)
		}
	}
}
