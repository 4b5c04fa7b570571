package record

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestProxyFlushesEachEvent: the upstream writes its next event only after the client
// has read the previous one through the proxy. A proxy that held a chunk back (waiting to
// fill a buffer) would leave both waiting, and the test would fail at its deadline
// rather than pass: every event must pass on its own.
func TestProxyFlushesEachEvent(t *testing.T) {
	forRelays(t, func(t *testing.T, relay string) {
		events := strings.SplitAfter(strings.TrimSuffix(sseBody, ""), "\n\n")
		events = events[:len(events)-1]
		read := make(chan int)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for i, ev := range events {
				io.WriteString(w, ev)
				w.(http.Flusher).Flush()
				select {
				case got := <-read:
					if got != i {
						t.Errorf("the client read event %d, want %d", got, i)
					}
				case <-time.After(30 * time.Second):
					t.Errorf("event %d: the client never got it through the proxy (held back)", i)
					return
				}
			}
		}))
		defer up.Close()
		rec := startRecordingWith(t, relay, up.URL, nil)
		resp, err := http.Post(rec.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatStreamBody))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for i, ev := range events {
			var got strings.Builder
			for !strings.HasSuffix(got.String(), "\n\n") {
				line, err := br.ReadString('\n')
				got.WriteString(line)
				if err != nil {
					t.Fatalf("event %d: %v after %q", i, err, got.String())
				}
			}
			if got.String() != ev {
				t.Fatalf("event %d: %q, want %q", i, got.String(), ev)
			}
			read <- i
		}
	})
}

// TestProxyBackpressure: a client that stops reading stops the upstream's writes after a
// bounded amount (the sockets' buffers and the proxy's one copy buffer), instead of the
// proxy buffering the response in memory. The upstream writes until a write blocks for a
// second; what it wrote by then is what is held somewhere between it and the client.
func TestProxyBackpressure(t *testing.T) {
	forRelays(t, func(t *testing.T, relay string) {
		const piece = 64 << 10
		wrote := make(chan int64, 1)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			rc := http.NewResponseController(w)
			w.Header().Set("Content-Type", "text/event-stream")
			buf := []byte("data: " + strings.Repeat("x", piece-8) + "\n\n")
			var n int64
			for n < 1<<30 {
				rc.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := w.Write(buf); err != nil {
					break
				}
				if err := rc.Flush(); err != nil {
					break
				}
				n += int64(len(buf))
			}
			wrote <- n
		}))
		defer up.Close()
		rec := startRecordingWith(t, relay, up.URL, nil)
		c, err := net.Dial("tcp", strings.TrimPrefix(rec.srv.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.(*net.TCPConn).SetReadBuffer(64 << 10)
		io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
		n := <-wrote
		// Loopback sockets buffer a few MB each way (net.ipv4.tcp_wmem and tcp_rmem); the
		// proxy adds its 32 KiB copy buffer and the tap's one piece. 64 MiB is far above the
		// buffers and far below an unbounded buffer's 1 GiB.
		if n >= 64<<20 {
			t.Errorf("the upstream wrote %d MiB to a client that read nothing: the proxy buffers without bound", n>>20)
		}
		t.Logf("the upstream wrote %.1f MiB before its write blocked", float64(n)/(1<<20))
	})
}

// writeCounter counts the writes made to it.
type writeCounter struct{ writes int }

func (w *writeCounter) Write(p []byte) (int, error) { w.writes++; return len(p), nil }

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestProxySendsRequestInOneWrite: a recorded request reaches the upstream's transport
// with a body net/http knows is in memory, so that its head and body leave in one write
// (Request.Write is the serializer http.Transport uses: with a body of another kind it
// flushes the head first, and an upstream that woke for the head waits again for the
// body); and with GetBody, so that the transport may resend it on a fresh connection.
func TestProxySendsRequestInOneWrite(t *testing.T) {
	up, _ := url.Parse("http://upstream.invalid")
	rec := startRecording(t, up.String(), nil)
	var writes int
	var again []byte
	rt := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		var w writeCounter
		if err := req.Write(&w); err != nil {
			return nil, err
		}
		writes = w.writes
		if req.GetBody != nil {
			b, _ := req.GetBody()
			again, _ = io.ReadAll(b)
		}
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(strings.NewReader(sseBody)), Request: req}, nil
	})
	srv := httptest.NewServer(NewProxy(up, rec.rec, ProxyOptions{Transport: rt}))
	defer srv.Close()
	resp, body := post(t, srv.URL, "/v1/chat/completions", chatStreamBody, nil)
	if resp.StatusCode != http.StatusOK || string(body) != sseBody {
		t.Fatalf("through the proxy: %d %q", resp.StatusCode, body)
	}
	if writes != 1 {
		t.Errorf("the request left in %d writes, want its head and body in one", writes)
	}
	if string(again) != chatStreamBody {
		t.Errorf("GetBody gave %q, want the body again", again)
	}
}
