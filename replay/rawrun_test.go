//go:build linux

package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/wire"
)

// replayRaw replays n requests every gap with the raw client against a vllmtest.Server whose
// http.Server configure adjusts, and returns the records; opts, when set, adjusts the run.
func replayRaw(t *testing.T, n int, gap time.Duration, configure func(*http.Server), opts ...func(*Options)) []results.Result {
	t.Helper()
	ts := httptest.NewUnstartedServer(&vllmtest.Server{TTFT: time.Millisecond, ITL: time.Millisecond})
	configure(ts.Config)
	ts.Start()
	t.Cleanup(ts.Close)
	base, _ := wire.BaseURL(ts.URL)
	c := newTestClient(t, base, func(o *transport.ClientOptions) { o.HTTPClient = transport.HTTPClientRaw })
	_, res, _ := runTrace(t, context.Background(), c, uniformTrace(n, gap, 5, 4), func(o *Options) {
		for _, f := range opts {
			f(o)
		}
	})
	return res
}

// TestRawKeepAlive: sequential requests share one connection. They are made sequential by
// a closed loop of one (each sent when the last has ended), not by a gap that a loaded
// machine can outlast: under load, 30 ms apart, a request was still in flight when the
// next was due and opened a second and a third connection.
func TestRawKeepAlive(t *testing.T) {
	var conns atomic.Int64
	res := replayRaw(t, 20, 30*time.Millisecond, func(srv *http.Server) {
		srv.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}
	}, func(o *Options) { o.Concurrency = 1; o.Speedup = 0 })
	if st := byStatus(res); st[results.StatusOK] != 20 {
		t.Fatalf("statuses %v", st)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 20 sequential requests; keep-alive should reuse one", n)
	}
}

// TestRawStaleConnection: a server that closes idle connections after 20 ms; every
// request but the first finds its pooled connection closed and is sent again on a new
// one, transparently.
func TestRawStaleConnection(t *testing.T) {
	res := replayRaw(t, 6, 150*time.Millisecond, func(srv *http.Server) { srv.IdleTimeout = 20 * time.Millisecond })
	if st := byStatus(res); st[results.StatusOK] != 6 {
		for _, r := range res {
			t.Logf("request %d: %s %q", r.RequestID, r.Status, r.Error)
		}
		t.Fatalf("statuses %v", st)
	}
}

// TestRawStaleConnections: the same with several connections pooled (prewarmed), all closed
// by the server while idle: the request sent again must not go on another of them, dead too,
// but on a new connection. Agent traffic found it: connections pooled across a tool's
// seconds of gap, then taken in a burst, failed "closed the connection before responding"
// with the raw client and never with net/http (which watches its idle connections).
func TestRawStaleConnections(t *testing.T) {
	res := replayRaw(t, 6, 150*time.Millisecond, func(srv *http.Server) { srv.IdleTimeout = 20 * time.Millisecond },
		func(o *Options) { o.Prewarm = 4 })
	if st := byStatus(res); st[results.StatusOK] != 6 {
		for _, r := range res {
			t.Logf("request %d: %s %q", r.RequestID, r.Status, r.Error)
		}
		t.Fatalf("statuses %v", st)
	}
}

// TestRawServerClosesBeforeAnswer: a fresh connection closed without a response is an
// error (not retried: it was not a kept-alive connection).
func TestRawServerClosesBeforeAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				br := bufio.NewReader(cn)
				http.ReadRequest(br) // read the head, then hang up
				cn.Close()
			}()
		}
	}()
	base, _ := wire.BaseURL("http://" + ln.Addr().String())
	c := newTestClient(t, base, func(o *transport.ClientOptions) { o.HTTPClient = transport.HTTPClientRaw })
	_, res, _ := runTrace(t, context.Background(), c, uniformTrace(3, 10*time.Millisecond, 5, 4), nil)
	for _, r := range res {
		if r.Status != results.StatusTransportError || !strings.Contains(r.Error, "closed the connection before responding") {
			t.Errorf("request %d: %s %q", r.RequestID, r.Status, r.Error)
		}
	}
	if n := accepted.Load(); n != 3 {
		t.Errorf("%d connections for 3 requests, want 3 (no retry on a fresh connection)", n)
	}
}

// TestRawRequestBytes: the request the raw client writes is what net/http's server
// parses as the same POST with the same headers and body as net/http's client sends.
func TestRawRequestBytes(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]string{}
	srv := &vllmtest.Server{TTFT: time.Millisecond, ITL: time.Millisecond}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		mu.Lock()
		key := r.Header.Get("X-Client")
		seen[key] = []string{r.Method, r.URL.String(), r.Host, r.Header.Get("Authorization"), r.Header.Get("Content-Type"),
			r.Header.Get("Accept"), r.Header.Get("X-Extra"), fmt.Sprint(r.ContentLength), string(body), r.Header.Get("Accept-Encoding")}
		mu.Unlock()
		srv.ServeHTTP(w, r)
	})
	base := vllmtest.Start(t, h)
	for _, hc := range []string{transport.HTTPClientRaw, transport.HTTPClientNetHTTP} {
		c := newTestClient(t, base, func(o *transport.ClientOptions) {
			o.HTTPClient = hc
			o.APIKey = "sk-test"
			o.Header = http.Header{"X-Extra": {"v1"}, "X-Client": {"x"}}
		})
		_, res, _ := runTrace(t, context.Background(), c, uniformTrace(1, 0, 5, 4), nil)
		if res[0].Status != results.StatusOK {
			t.Fatalf("%s: %s %q", hc, res[0].Status, res[0].Error)
		}
		mu.Lock()
		seen[hc] = seen["x"]
		delete(seen, "x")
		mu.Unlock()
	}
	raw, std := seen[transport.HTTPClientRaw], seen[transport.HTTPClientNetHTTP]
	for i := range raw {
		if i == len(raw)-1 { // Accept-Encoding: net/http adds gzip unless compression is off; both send none
			if raw[i] != "" || std[i] != "" {
				t.Errorf("Accept-Encoding raw %q net/http %q, want none", raw[i], std[i])
			}
			continue
		}
		if raw[i] != std[i] {
			t.Errorf("field %d: raw %q, net/http %q", i, raw[i], std[i])
		}
	}
}
