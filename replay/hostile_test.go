package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// hostileOut is the output length of the requests a hostile server mistreats; the others
// (4 tokens) get a well-formed stream from the same server, so a test also sees the run
// go on around the hostile ones.
const hostileOut = 3

type hostileCase struct {
	name    string
	handler func(w http.ResponseWriter, r *http.Request)
	status  results.Status
	http    int32
	errHas  string // in every hostile request's error (and, with errHas2, that too)
	errHas2 string
	chunks  int // output chunks of each hostile request's record; -1: any
	tokens  int32
}

// hijack takes the connection of r after reading its body, for raw bytes.
func hijack(w http.ResponseWriter, r *http.Request) (io.Writer, func()) {
	io.Copy(io.Discard, r.Body)
	conn, bw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	return conn, func() {
		// Hold the connection until the client closes it (reads then fail).
		io.Copy(io.Discard, bw)
		conn.Close()
	}
}

// TestHostileServers replays against servers that are broken or hostile in ways that could
// eat the replayer's memory or hang it. For each, on both HTTP clients: a precise error on
// each mistreated request, the others exact, the run over within its timeout, and the
// memory the whole run allocated (runtime.MemStats.TotalAlloc, deterministic: the
// replayer's caps, not the machine, bound it) under 64 MiB though the server offers a
// gigabyte or more. The caps (docs/replay.md, "Hostile servers"): a response head of
// 64 KiB, an SSE line of MaxLine (4 MiB by default), 2·max_tokens+16 output chunks per
// request, 1 KiB of an error body.
func TestHostileServers(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time servers")
	}
	event := []byte("data: {\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":null}]}\n\n")
	cases := []hostileCase{
		{name: "1GiB Content-Length that never comes", handler: func(w http.ResponseWriter, r *http.Request) {
			c, hold := hijack(w, r)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", 1<<30, okChunk)
			hold()
		}, status: results.StatusTimeout, http: 200, errHas: "stream not finished within the 500ms timeout (1 output chunks)", chunks: 1},
		{name: "endless empty SSE comments", handler: func(w http.ResponseWriter, r *http.Request) {
			send := sseStart(w, r)
			block := strings.Repeat(":\n\n", 16<<10)
			for r.Context().Err() == nil {
				send(block)
			}
		}, status: results.StatusTimeout, http: 200, errHas: "stream not finished within the 500ms timeout (0 output chunks)"},
		{name: "a million one-token chunks", handler: func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			block := bytes.Repeat(event, 1000)
			for i := 0; i < 1000 && r.Context().Err() == nil; i++ {
				if _, err := w.Write(block); err != nil {
					return
				}
			}
			io.WriteString(w, "data: [DONE]\n\n")
		}, status: results.StatusStreamError, http: 200, errHas: "more than 22 output chunks", errHas2: "max_tokens 3", chunks: 22},
		{name: "invalid UTF-8 in the text", handler: func(w http.ResponseWriter, r *http.Request) {
			send := sseStart(w, r)
			for range hostileOut {
				send("data: {\"choices\":[{\"index\":0,\"text\":\"\xff\xfe\xc3\",\"finish_reason\":null}]}\n\n")
			}
			send(`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3}}` + "\n\n")
			send("data: [DONE]\n\n")
		}, status: results.StatusOK, http: 200, chunks: hostileOut, tokens: hostileOut},
		{name: "invalid UTF-8 in an error event", handler: func(w http.ResponseWriter, r *http.Request) {
			send := sseStart(w, r)
			send(okChunk)
			send("event: error\ndata: \xff\xfeengine \xc3down\n\n")
		}, status: results.StatusStreamError, http: 200, errHas: "server error event: ?engine ?down", chunks: 1},
		{name: "invalid UTF-8 in an error body", handler: func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.WriteHeader(502)
			io.WriteString(w, "\xff\xfebad \xc3gateway")
		}, status: results.StatusHTTPError, http: 502, errHas: "HTTP 502: ?bad ?gateway"},
		{name: "header block over the cap", handler: func(w http.ResponseWriter, r *http.Request) {
			c, hold := hijack(w, r)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
			pad := strings.Repeat("x", 1000)
			for i := range 100 { // 100 KB of headers, then a good stream
				fmt.Fprintf(c, "X-Pad-%d: %s\r\n", i, pad)
			}
			io.WriteString(c, "Transfer-Encoding: chunked\r\n\r\n")
			hold()
		}, status: results.StatusTransportError, http: results.Null, errHas: "65536 bytes"},
		{name: "gzip not asked for", handler: func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if r.Header.Get("Accept-Encoding") != "" {
				http.Error(w, "the client asked for "+r.Header.Get("Accept-Encoding"), 400)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			for range hostileOut {
				zw.Write([]byte(okChunk))
			}
			io.WriteString(zw, "data: [DONE]\n\n")
			zw.Close()
		}, status: results.StatusStreamError, http: 200, errHas: "Content-Encoding gzip", errHas2: "did not ask"},
		{name: "gzip error body not asked for", handler: func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Encoding", "gzip")
			w.WriteHeader(503)
			zw := gzip.NewWriter(w)
			io.WriteString(zw, `{"error":{"message":"overloaded"}}`)
			zw.Close()
		}, status: results.StatusHTTPError, http: 503, errHas: "HTTP 503: (a gzip body, which the client did not ask for)"},
	}
	for _, hc := range []string{transport.HTTPClientRaw, transport.HTTPClientNetHTTP} {
		if hc == transport.HTTPClientRaw && !transport.RawBuilt {
			continue
		}
		for _, tc := range cases {
			t.Run(hc+"/"+tc.name, func(t *testing.T) { testHostile(t, hc, tc) })
		}
	}
}

func testHostile(t *testing.T, hc string, tc hostileCase) {
	good := &vllmtest.Server{TTFT: 5 * time.Millisecond, ITL: time.Millisecond}
	base := vllmtest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var b vllmtest.ReqBody
		json.Unmarshal(body, &b)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if b.MaxTokens == hostileOut {
			tc.handler(w, r)
			return
		}
		good.ServeHTTP(w, r)
	}))
	c := newTestClient(t, base, func(o *transport.ClientOptions) {
		o.Timeout, o.HTTPClient = 500*time.Millisecond, hc
		o.CountTokens = func(s string) int { return len(s) }
	})
	reqs := make([]trace.Request, 6)
	for i := range reqs {
		out := int32(4)
		if i%2 == 1 {
			out = hostileOut
		}
		reqs[i] = trace.Request{ID: int64(100 + i), Arrival: time.Duration(i) * 20 * time.Millisecond, PromptTokens: 3, OutputTokens: out}
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	t0 := time.Now()
	_, res, _ := runTrace(t, t.Context(), c, reqs, nil)
	if el := time.Since(t0); el > 100*time.Millisecond+500*time.Millisecond+5*time.Second {
		t.Errorf("the run took %v: its last request was due at 100 ms, with a 500 ms timeout", el)
	}
	runtime.ReadMemStats(&m1)
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 64<<20 {
		t.Errorf("the run allocated %d MiB", alloc>>20)
	}
	checkOneRecordEach(t, reqs, res)
	for _, r := range res {
		if !utf8.ValidString(r.Error) {
			t.Errorf("request %d: error %q is not UTF-8", r.RequestID, r.Error)
		}
		if r.OutputTokensTarget != hostileOut {
			if r.Status != results.StatusOK || r.OutputTokens != r.OutputTokensTarget || len(r.ChunkNS) != int(r.OutputTokensTarget) {
				t.Errorf("request %d (well served): %s %q, %d tokens in %d chunks", r.RequestID, r.Status, r.Error, r.OutputTokens, len(r.ChunkNS))
			}
			continue
		}
		if r.Status != tc.status || r.HTTPStatus != tc.http || !strings.Contains(r.Error, tc.errHas) || !strings.Contains(r.Error, tc.errHas2) ||
			(tc.chunks >= 0 && len(r.ChunkNS) != tc.chunks) || (tc.tokens > 0 && r.OutputTokens != tc.tokens) {
			t.Errorf("request %d: status %s http %d, %d chunks, %d tokens, error %q; want %s http %d, %d chunks, error with %q and %q",
				r.RequestID, r.Status, r.HTTPStatus, len(r.ChunkNS), r.OutputTokens, r.Error, tc.status, tc.http, tc.chunks, tc.errHas, tc.errHas2)
		}
	}
}

// TestRawNoResendAfterLateLoss: a reused connection that the server drops 1.5 s after it
// received a request, unanswered, is not a connection closed while idle: the request may
// have been served, so the raw client records the loss and does not send it again.
func TestRawNoResendAfterLateLoss(t *testing.T) {
	if !transport.RawBuilt {
		t.Skip("the raw client is built for linux only")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var received atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for n := 1; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					received.Add(1)
					if n > 1 { // the second request on a connection: dropped unanswered
						time.Sleep(1500 * time.Millisecond)
						return
					}
					body := okChunk + "data: [DONE]\n\n"
					fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				}
			}()
		}
	}()
	base, _ := wire.BaseURL("http://" + ln.Addr().String())
	c := newTestClient(t, base, func(o *transport.ClientOptions) { o.HTTPClient = transport.HTTPClientRaw })
	reqs := uniformTrace(2, 300*time.Millisecond, 3, 1)
	_, res, _ := runTrace(t, t.Context(), c, reqs, nil)
	if n := received.Load(); n != 2 {
		t.Errorf("the server received %d requests for 2", n)
	}
	for _, r := range res {
		if r.RequestID == reqs[1].ID && (r.Status != results.StatusTransportError || !strings.Contains(r.Error, "closed the connection before responding")) {
			t.Errorf("the dropped request: %s %q", r.Status, r.Error)
		}
	}
}
