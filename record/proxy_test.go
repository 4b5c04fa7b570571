package record

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
)

// recording is a proxy under test: its server, its recorder and its folder.
type recording struct {
	t    *testing.T
	srv  *proxyServer
	rec  *Recorder
	dir  string
	done bool
}

// proxyServer is the proxy under test, net/http's or the raw relay, on loopback.
type proxyServer struct {
	URL   string
	Close func()
}

// relays are the two ways the proxy relays a recorded request: every proxy test runs
// with each.
var relays = []string{"nethttp", "raw"}

// forRelays runs test once with each relay.
func forRelays(t *testing.T, test func(t *testing.T, relay string)) {
	for _, relay := range relays {
		t.Run(relay, func(t *testing.T) { test(t, relay) })
	}
}

// serveProxy starts the proxy of the given relay in front of up.
func serveProxy(t testing.TB, relay string, up *url.URL, rec *Recorder, o RelayOptions) *proxyServer {
	t.Helper()
	if relay == "nethttp" {
		srv := httptest.NewServer(NewProxy(up, rec, o.ProxyOptions))
		return &proxyServer{URL: srv.URL, Close: srv.Close}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := NewRelay(up, rec, o)
	served := make(chan error, 1)
	go func() { served <- r.Serve(ln) }()
	return &proxyServer{URL: "http://" + ln.Addr().String(), Close: func() {
		r.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("the relay's Serve returned %v, want http.ErrServerClosed", err)
		}
	}}
}

func startRecording(t *testing.T, upstream string, edit func(*Options)) *recording {
	t.Helper()
	return startRecordingWith(t, "nethttp", upstream, edit)
}

func startRecordingWith(t *testing.T, relay, upstream string, edit func(*Options)) *recording {
	t.Helper()
	up, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Dir: t.TempDir(), Upstream: up, Sample: 1, Encoding: enc, BlockTokens: 16, Workers: 2, ToolVersion: "test"}
	if edit != nil {
		edit(&o)
	}
	rec, err := NewRecorder(o)
	if err != nil {
		t.Fatal(err)
	}
	r := &recording{t: t, rec: rec, dir: o.Dir}
	r.srv = serveProxy(t, relay, up, rec, RelayOptions{})
	t.Cleanup(r.stop)
	return r
}

// stop stops the proxy and the recorder, once.
func (r *recording) stop() {
	if r.done {
		return
	}
	r.done = true
	r.srv.Close()
	if _, _, err := r.rec.Close(); err != nil {
		r.t.Error(err)
	}
}

// close stops the proxy and writes the files; it returns the production results and the
// trace's rows.
func (r *recording) close() ([]results.Result, []trace.Request) {
	r.t.Helper()
	r.stop()
	res, _, err := results.ReadFile(filepath.Join(r.dir, "results-0001.parquet"))
	if err != nil {
		r.t.Fatal(err)
	}
	tr, err := trace.Open(filepath.Join(r.dir, "trace-0001.parquet"))
	if err != nil {
		r.t.Fatal(err)
	}
	defer tr.Close()
	var rows []trace.Request
	for tr.Next() {
		rows = append(rows, tr.Request())
	}
	if err := tr.Err(); err != nil {
		r.t.Fatal(err)
	}
	return res, rows
}

const sseBody = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n" +
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}]}\n\n" +
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":2,\"total_tokens\":14}}\n\n" +
	"data: [DONE]\n\n"

// streamer is an upstream that streams sseBody event by event, flushing each, and
// answers other paths with a fixed JSON body and headers of its own.
func streamer(t *testing.T, seen func(*http.Request)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if seen != nil {
			seen(r)
		}
		if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			w.Header().Set("X-Upstream", "yes")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTeapot)
			fmt.Fprint(w, `{"other":"path `+r.URL.Path+`"}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Upstream", "yes")
		for _, ev := range strings.SplitAfter(sseBody, "\n\n") {
			if ev == "" {
				continue
			}
			io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

const chatStreamBody = `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":8}`

func post(t *testing.T, base, path, body string, h http.Header) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestProxyPassesExchangesUnchanged: a stream, another API's path and an unknown path
// come through the proxy as they come direct: status, the upstream's headers, the body
// byte for byte; the request reaches the upstream with its credentials and its body.
func TestProxyPassesExchangesUnchanged(t *testing.T) {
	forRelays(t, func(t *testing.T, relay string) {
		var mu sync.Mutex
		var auth []string
		var paths []string
		up := streamer(t, func(r *http.Request) {
			mu.Lock()
			auth = append(auth, r.Header.Get("Authorization"))
			paths = append(paths, r.URL.Path)
			mu.Unlock()
		})
		rec := startRecordingWith(t, relay, up.URL, nil)
		h := http.Header{"Authorization": {"Bearer sk-test-secret"}, "Content-Type": {"application/json"}}
		for _, path := range []string{"/v1/chat/completions", "/v1/unknown/thing", "/health"} {
			direct, db := post(t, up.URL, path, chatStreamBody, h)
			proxied, pb := post(t, rec.srv.URL, path, chatStreamBody, h)
			if !bytes.Equal(db, pb) {
				t.Errorf("%s: through the proxy the body is\n%q\nwant\n%q", path, pb, db)
			}
			if direct.StatusCode != proxied.StatusCode {
				t.Errorf("%s: status %d, want %d", path, proxied.StatusCode, direct.StatusCode)
			}
			for _, k := range []string{"Content-Type", "X-Upstream"} {
				if direct.Header.Get(k) != proxied.Header.Get(k) {
					t.Errorf("%s: header %s %q, want %q", path, k, proxied.Header.Get(k), direct.Header.Get(k))
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for i, a := range auth {
			if a != "Bearer sk-test-secret" {
				t.Errorf("request %d (%s) reached the upstream with Authorization %q", i, paths[i], a)
			}
		}
		res, rows := rec.close()
		if len(res) != 1 || len(rows) != 1 {
			t.Fatalf("recorded %d results and %d trace rows, want the one chat request", len(res), len(rows))
		}
		if r := res[0]; r.Status != results.StatusOK || r.HTTPStatus != 200 {
			t.Errorf("recorded status %s (HTTP %d), want ok (200)", r.Status, r.HTTPStatus)
		}
	})
}

// TestProxyForwardsOnlyToUpstream: a request in absolute form naming another host goes to
// the upstream all the same, and CONNECT is refused: the proxy is never an open proxy.
func TestProxyForwardsOnlyToUpstream(t *testing.T) {
	forRelays(t, func(t *testing.T, relay string) {
		var got []string
		var mu sync.Mutex
		up := streamer(t, func(r *http.Request) { mu.Lock(); got = append(got, r.URL.Path); mu.Unlock() })
		rec := startRecordingWith(t, relay, up.URL, nil)
		addr := strings.TrimPrefix(rec.srv.URL, "http://")
		for _, raw := range []string{
			"POST http://elsewhere.invalid/v1/other HTTP/1.1\r\nHost: elsewhere.invalid\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
			"CONNECT elsewhere.invalid:443 HTTP/1.1\r\nHost: elsewhere.invalid:443\r\nConnection: close\r\n\r\n",
		} {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(c, raw)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			c.Close()
			want := http.StatusTeapot // the upstream's answer for other paths
			if strings.HasPrefix(raw, "CONNECT") {
				want = http.StatusMethodNotAllowed
			}
			if resp.StatusCode != want {
				t.Errorf("%s: status %d, want %d", strings.Fields(raw)[0], resp.StatusCode, want)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 1 || got[0] != "/v1/other" {
			t.Errorf("the upstream saw %q, want the absolute-form request's path only", got)
		}
	})
}

// TestProxyFaults: what a client sees through the proxy when the upstream fails, and
// what the record says.
func TestProxyFaults(t *testing.T) {
	forRelays(t, func(t *testing.T, relay string) {
		var mode string
		var mu sync.Mutex
		stall := make(chan struct{})
		t.Cleanup(func() { close(stall) })
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			m := mode
			mu.Unlock()
			switch m {
			case "reset-before-head":
				hj, _ := w.(http.Hijacker)
				c, _, _ := hj.Hijack()
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			case "reset-mid-stream", "stall":
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, strings.SplitAfter(sseBody, "\n\n")[1])
				w.(http.Flusher).Flush()
				if m == "stall" {
					select {
					case <-stall:
					case <-r.Context().Done():
					}
					return
				}
				hj, _ := w.(http.Hijacker)
				c, _, _ := hj.Hijack()
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
		}))
		defer up.Close()
		rec := startRecordingWith(t, relay, up.URL, nil)
		set := func(m string) { mu.Lock(); mode = m; mu.Unlock() }

		// A reset before the head and a reset mid-stream: through the proxy the client sees
		// what it sees direct (no response; the first event, then a broken body).
		for _, m := range []string{"reset-before-head", "reset-mid-stream"} {
			set(m)
			direct := outcome(up.URL)
			proxied := outcome(rec.srv.URL)
			if direct != proxied {
				t.Errorf("%s: through the proxy the client sees %s; direct, %s", m, proxied, direct)
			}
		}
		// A stalled upstream and a client that gives up after the first event.
		set("stall")
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rec.srv.URL+"/v1/chat/completions", strings.NewReader(chatStreamBody))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		first := make([]byte, len(strings.SplitAfter(sseBody, "\n\n")[1]))
		if _, err := io.ReadFull(resp.Body, first); err != nil {
			t.Fatal(err)
		}
		cancel()
		resp.Body.Close()

		res, _ := waitRecorded(t, rec, 3)

		want := []struct {
			status results.Status
			msg    string
		}{
			{results.StatusTransportError, "upstream"},
			{results.StatusStreamError, ""},
			{results.StatusCanceled, "client went away"},
		}
		for i, w := range want {
			r := res[i]
			if r.Status != w.status || !strings.Contains(r.Error, w.msg) {
				t.Errorf("request %d: recorded %s %q, want %s containing %q", i, r.Status, r.Error, w.status, w.msg)
			}
		}
		if res[1].FirstTokenNS == results.Null || res[2].FirstTokenNS == results.Null {
			t.Errorf("the broken and the abandoned stream each passed a token: first_token_ns %d, %d", res[1].FirstTokenNS, res[2].FirstTokenNS)
		}
	})
}

// waitRecorded closes the recording once n requests have been recorded (a canceled
// request's handler may return after its client has) and returns its results by id.
func waitRecorded(t *testing.T, rec *recording, n int64) ([]results.Result, []trace.Request) {
	t.Helper()
	for rec.rec.Counts().Requests < n {
		time.Sleep(time.Millisecond)
	}
	res, rows := rec.close()
	if int64(len(res)) != n {
		t.Fatalf("recorded %d results, want %d", len(res), n)
	}
	byID := make([]results.Result, n)
	for _, r := range res {
		byID[r.RequestID] = r
	}
	return byID, rows
}

// outcome is what a client sees of a chat request to base: no response, or the body it
// read and whether reading it broke.
func outcome(base string) string {
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(chatStreamBody))
	if err != nil {
		return "no response"
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return fmt.Sprintf("HTTP %d, body %q, broken %v", resp.StatusCode, b, err != nil)
}

// TestProxyCompressedAnswer: a client that asks for gzip gets the upstream's gzipped
// answer as sent, and the record reads its usage from a decompressed copy.
func TestProxyCompressedAnswer(t *testing.T) {
	forRelays(t, func(t *testing.T, relay string) {
		answer := `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}`
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		io.WriteString(zw, answer)
		zw.Close()
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gz.Bytes())
		}))
		defer up.Close()
		rec := startRecordingWith(t, relay, up.URL, nil)
		resp, body := post(t, rec.srv.URL, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			http.Header{"Accept-Encoding": {"gzip"}, "Content-Type": {"application/json"}})
		if !bytes.Equal(body, gz.Bytes()) || resp.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("the client got %d bytes (Content-Encoding %q), want the upstream's %d gzipped bytes", len(body), resp.Header.Get("Content-Encoding"), gz.Len())
		}
		res, rows := rec.close()
		if len(res) != 1 {
			t.Fatalf("%d records", len(res))
		}
		r := res[0]
		if r.Status != results.StatusOK || r.PromptTokensServer != 12 || r.OutputTokens != 7 || rows[0].PromptTokens != 12 || rows[0].OutputTokens != 7 {
			t.Errorf("recorded %s %q, prompt %d output %d (trace %d, %d); want ok, 12 and 7 from the usage",
				r.Status, r.Error, r.PromptTokensServer, r.OutputTokens, rows[0].PromptTokens, rows[0].OutputTokens)
		}
	})
}

// TestProxyOversizedBody: a request body over MaxBody reaches the upstream whole and
// framed as it came (by its length, or chunked and streamed on as it comes), its answer
// reaches the client, and the request is counted as not recorded.
func TestProxyOversizedBody(t *testing.T) {
	forRelays(t, func(t *testing.T, relay string) {
		var mu sync.Mutex
		var got []string
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			got = append(got, fmt.Sprint(r.ContentLength, r.TransferEncoding, len(b)))
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"n":%d}`, len(b))
		}))
		defer up.Close()
		rec := startRecordingWith(t, relay, up.URL, nil)
		rec.srv.Close()
		u, _ := url.Parse(up.URL)
		rec.srv = serveProxy(t, relay, u, rec.rec, RelayOptions{ProxyOptions: ProxyOptions{MaxBody: 64}})
		body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 200) + `"}]}`
		for _, r := range []io.Reader{
			strings.NewReader(body),                 // sent with its Content-Length
			io.MultiReader(strings.NewReader(body)), // of unknown length: sent chunked
		} {
			resp, err := http.Post(rec.srv.URL+"/v1/chat/completions", "application/json", r)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if want := fmt.Sprintf(`{"n":%d}`, len(body)); string(b) != want {
				t.Errorf("the client got %q, want the upstream's %q", b, want)
			}
		}
		rec.done = true
		rec.srv.Close()
		n, _, err := rec.rec.Close()
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{fmt.Sprint(len(body), " [] ", len(body)), fmt.Sprint("-1 [chunked] ", len(body))}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("the upstream saw (length, encoding, bytes) %q, want %q", got, want)
		}
		if n.Skipped["request body over --max-body"] != 2 || n.Recorded != 0 {
			t.Errorf("counts %+v, want both requests passed unrecorded as over --max-body", n)
		}
	})
}

// TestProxyLongResponseHead: a response head far longer than the raw relay's 32 KiB
// reader (a 100 KiB field) reaches the client whole, with the body after it, as it does
// through net/http and direct.
func TestProxyLongResponseHead(t *testing.T) {
	long := strings.Repeat("v", 100<<10)
	forRelays(t, func(t *testing.T, relay string) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("X-Long", long)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"ok":1}`)
		}))
		defer up.Close()
		rec := startRecordingWith(t, relay, up.URL, nil)
		for i := 0; i < 2; i++ { // the second on the connection the first left
			resp, err := http.Post(rec.srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.Header.Get("X-Long") != long || string(b) != `{"ok":1}` {
				t.Errorf("request %d: a field of %d bytes and body %q, want %d bytes and the upstream's body", i, len(resp.Header.Get("X-Long")), b, len(long))
			}
		}
	})
}
