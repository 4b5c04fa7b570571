package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/wire"
)

// sseStart writes the event-stream header and returns a function that writes and flushes.
// It reads the request body first: net/http notices a client hanging up (and cancels
// r.Context()) only once the body has been read.
func sseStart(w http.ResponseWriter, r *http.Request) func(string) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	f := w.(http.Flusher)
	return func(s string) { fmt.Fprint(w, s); f.Flush() }
}

const okChunk = "data: {\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n"

// TestFaults checks that each way an endpoint can fail gives every affected request a
// precise status and message, that no run hangs, and that every due request is recorded.
func TestFaults(t *testing.T) {
	refused := func() *url.URL {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there any more: connections are refused
		u, _ := wire.BaseURL("http://" + addr)
		return u
	}
	cases := []faultCase{
		{name: "refused", status: results.StatusTransportError, http: results.Null, errHas: "connection refused"},
		{name: "500", handler: func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":{"message":"engine exploded","type":"InternalError"}}`, 500)
		}, status: results.StatusHTTPError, http: 500, errHas: "HTTP 500: engine exploded"},
		{name: "429 plain text", handler: func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "slow down", 429)
		}, status: results.StatusHTTPError, http: 429, errHas: "HTTP 429: slow down"},
		{name: "503 vllm object", handler: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(503)
			fmt.Fprint(w, `{"object":"error","message":"overloaded","type":"ServiceUnavailable","code":503}`)
		}, status: results.StatusHTTPError, http: 503, errHas: "HTTP 503: overloaded"},
		{name: "disconnect mid-stream", handler: func(w http.ResponseWriter, r *http.Request) {
			send := sseStart(w, r)
			send(okChunk)
			send(okChunk)
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		}, status: results.StatusStreamError, http: 200, errHas: "stream broken after 2 output chunks", chunks: 2},
		{name: "clean close before DONE", handler: func(w http.ResponseWriter, r *http.Request) {
			send := sseStart(w, r)
			send(okChunk)
		}, status: results.StatusStreamError, http: 200, errHas: "ended before [DONE] after 1 output chunks", chunks: 1},
		{name: "stall", timeout: 300 * time.Millisecond, handler: func(w http.ResponseWriter, r *http.Request) {
			send := sseStart(w, r)
			send(okChunk)
			<-r.Context().Done()
		}, status: results.StatusTimeout, http: 200, errHas: "timeout (1 output chunks)", chunks: 1},
		{name: "slow first byte", timeout: 300 * time.Millisecond, handler: func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}, status: results.StatusTimeout, http: results.Null, errHas: "no response within the 300ms timeout"},
		{name: "malformed chunk", handler: func(w http.ResponseWriter, r *http.Request) {
			send := sseStart(w, r)
			send(okChunk)
			send("data: {\"choices\":[{\"text\":\"x\"\n\n")
			send("data: [DONE]\n\n")
		}, status: results.StatusStreamError, http: 200, errHas: "event 2: malformed chunk", chunks: 1},
		{name: "endless line", maxLine: 64 << 10, handler: func(w http.ResponseWriter, r *http.Request) {
			send := sseStart(w, r)
			send(okChunk)
			big := strings.Repeat("x", 16<<10)
			for range 100 { // 1.6 MB without a newline
				if r.Context().Err() != nil {
					return
				}
				send(big)
			}
		}, status: results.StatusStreamError, http: 200, errHas: "SSE line too long: over 65536 bytes", chunks: 1},
		{name: "error event mid-stream", handler: func(w http.ResponseWriter, r *http.Request) {
			send := sseStart(w, r)
			send(okChunk)
			send("data: {\"error\":{\"message\":\"KV cache exhausted\",\"code\":500}}\n\n")
		}, status: results.StatusStreamError, http: 200, errHas: "server error mid-stream: KV cache exhausted", chunks: 1},
		{name: "named error event", handler: func(w http.ResponseWriter, r *http.Request) {
			send := sseStart(w, r)
			send("event: error\ndata: upstream gone\n\n")
		}, status: results.StatusStreamError, http: 200, errHas: "server error event: upstream gone"},
		{name: "not an event stream", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"choices":[{"text":"hello"}]}`)
		}, status: results.StatusStreamError, http: 200, errHas: "not an event stream"},
	}
	for _, hc := range []string{transport.HTTPClientRaw, transport.HTTPClientNetHTTP} {
		if hc == transport.HTTPClientRaw && !transport.RawBuilt {
			continue // the raw client is built for linux only
		}
		for _, tc := range cases {
			t.Run(hc+"/"+tc.name, func(t *testing.T) {
				testFault(t, hc, tc, refused)
			})
		}
	}
}

type faultCase struct {
	name    string
	handler http.HandlerFunc // nil: refused connection
	timeout time.Duration
	maxLine int
	status  results.Status
	http    int32
	errHas  string
	chunks  int // output chunks recorded
}

// testFault replays four requests against tc's handler with the HTTP client hc and
// checks each record.
func testFault(t *testing.T, hc string, tc faultCase, refused func() *url.URL) {
	var base *url.URL
	if tc.handler == nil {
		base = refused()
	} else {
		base = vllmtest.Start(t, tc.handler)
	}
	c := newTestClient(t, base, func(o *transport.ClientOptions) {
		if tc.timeout > 0 {
			o.Timeout = tc.timeout
		}
		o.MaxLine = tc.maxLine
		o.HTTPClient = hc
	})
	if got := c.HTTPClientName(); got != hc {
		t.Fatalf("client %s, want %s", got, hc)
	}
	reqs := uniformTrace(4, 5*time.Millisecond, 3, 4)
	t0 := time.Now()
	_, res, _ := runTrace(t, context.Background(), c, reqs, nil)
	if el := time.Since(t0); el > 15*time.Second { // generous: the point is that no fault hangs a run
		t.Errorf("run took %v", el)
	}
	if len(res) != len(reqs) {
		t.Fatalf("%d records, want %d", len(res), len(reqs))
	}
	for _, r := range res {
		if r.Status != tc.status || r.HTTPStatus != tc.http || !strings.Contains(r.Error, tc.errHas) || len(r.ChunkNS) != tc.chunks {
			t.Errorf("request %d: status %s http %d chunks %d error %q; want %s %d %d %q",
				r.RequestID, r.Status, r.HTTPStatus, len(r.ChunkNS), r.Error, tc.status, tc.http, tc.chunks, tc.errHas)
		}
		if tc.status == results.StatusTransportError && r.SentNS != results.Null {
			t.Errorf("refused request has sent_ns %d", r.SentNS)
		}
	}
}

// TestChatReasoningAndTokenizerFallback: chat deltas with reasoning count as output, the
// role-only chunk does not, and with no usage the client counts the text.
func TestChatReasoningAndTokenizerFallback(t *testing.T) {
	base := vllmtest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		send := sseStart(w, r)
		send(`data:{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
		time.Sleep(20 * time.Millisecond)
		send(`data: {"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}` + "\n\n")
		send(`data: {"choices":[{"index":0,"delta":{"reasoning":"more"}}]}` + "\r\n\r\n")
		send(": keep-alive comment\n\n")
		send(`data: {"choices":[{"index":0,"delta":{"content":"answer"},"finish_reason":"stop"}]}` + "\n\n")
		send("data: [DONE]\n\n")
	}))
	c := newTestClient(t, base, func(o *transport.ClientOptions) {
		o.API = wire.APIChat
		o.Backend = wire.BackendOpenAI
		o.CountTokens = func(s string) int { return len(s) }
	})
	_, res, _ := runTrace(t, context.Background(), c, uniformTrace(1, 0, 3, 4), nil)
	r := res[0]
	if r.Status != results.StatusOK || len(r.ChunkNS) != 3 || r.ChunkTokens != nil {
		t.Fatalf("record %+v", r)
	}
	if r.OutputTokens != int32(len("thinkmoreanswer")) || r.OutputTokensSource != results.SourceTokenizer || r.PromptTokensServer != results.Null {
		t.Errorf("output %d (%s), prompt_server %d", r.OutputTokens, r.OutputTokensSource, r.PromptTokensServer)
	}
	if ttft, _ := r.TTFT(); ttft < 20 {
		t.Errorf("TTFT %.1f ms counts the role-only chunk", ttft)
	}
}

// TestTLSAndHeaders: certificates are verified unless Insecure; the API key and extra
// headers reach the server and never the results.
func TestTLSAndHeaders(t *testing.T) {
	var gotAuth, gotTenant atomic.Value
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth.Store(r.Header.Get("Authorization"))
		gotTenant.Store(r.Header.Get("X-Tenant"))
		send := sseStart(w, r)
		send(okChunk)
		send("data: [DONE]\n\n")
	}))
	defer ts.Close()
	base, _ := wire.BaseURL(ts.URL)
	hdr := http.Header{"X-Tenant": {"t1"}}
	strict := newTestClient(t, base, func(o *transport.ClientOptions) { o.APIKey = "sk-secret"; o.Header = hdr })
	_, res, _ := runTrace(t, context.Background(), strict, uniformTrace(1, 0, 2, 1), nil)
	if res[0].Status != results.StatusTransportError || !strings.Contains(res[0].Error, "certificate") {
		t.Errorf("self-signed certificate accepted: %s %q", res[0].Status, res[0].Error)
	}
	loose := newTestClient(t, base, func(o *transport.ClientOptions) { o.APIKey = "sk-secret"; o.Header = hdr; o.Insecure = true })
	out := filepath.Join(t.TempDir(), "r.parquet")
	_, res, _ = runTrace(t, context.Background(), loose, uniformTrace(1, 0, 2, 1), func(o *Options) { o.Output = out })
	if res[0].Status != results.StatusOK {
		t.Fatalf("--insecure: %s %q", res[0].Status, res[0].Error)
	}
	if gotAuth.Load() != "Bearer sk-secret" || gotTenant.Load() != "t1" {
		t.Errorf("server saw Authorization %q, X-Tenant %q", gotAuth.Load(), gotTenant.Load())
	}
	raw, _ := os.ReadFile(out)
	if bytes.Contains(raw, []byte("sk-secret")) {
		t.Error("the API key is in the results file")
	}
}
