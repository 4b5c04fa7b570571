package record

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
)

// frame feeds b to a framer of the given framing in pieces of step bytes (0: whole) and
// returns the bytes it took, the data it found and its error.
func frame(framing int, length int64, b []byte, step int) (int, []byte, error) {
	var f bodyFramer
	f.reset(framing, length)
	var data []byte
	used := 0
	for used < len(b) && !f.done() {
		end := len(b)
		if step > 0 && used+step < end {
			end = used + step
		}
		piece := b[used:end]
		n, err := f.feed(piece, func(d []byte) { data = append(data, d...) })
		used += n
		if err != nil {
			return used, data, err
		}
		if n < len(piece) && !f.done() {
			return used, data, errors.New("framer stopped short of its input without ending")
		}
	}
	if !f.done() && f.state != fsEOF {
		return used, data, io.ErrUnexpectedEOF
	}
	return used, data, nil
}

// TestBodyFramer: the framer ends a body where RFC 9112 says, takes none of the bytes
// after it, finds its data without the framing, and refuses malformed chunking; fed a
// byte at a time it decides as fed whole.
func TestBodyFramer(t *testing.T) {
	next := "POST /next HTTP/1.1\r\n"
	cases := []struct {
		name    string
		framing int
		length  int64
		body    string
		data    string
		bad     bool
	}{
		{"length", frameLength, 5, "hello", "hello", false},
		{"empty length", frameLength, 0, "", "", false},
		{"chunked", frameChunked, 0, "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "hello world", false},
		{"chunk extensions and hex case", frameChunked, 0, "A;name=v\r\n0123456789\r\n0;x\r\n\r\n", "0123456789", false},
		{"trailers", frameChunked, 0, "3\r\nabc\r\n0\r\nX-Usage: 7\r\nX-More: 1\r\n\r\n", "abc", false},
		{"bare LF lines", frameChunked, 0, "3\nabc\r\n0\n\n", "abc", false},
		{"data without CRLF", frameChunked, 0, "3\r\nabcX\r\n0\r\n\r\n", "abc", true},
		{"not hex", frameChunked, 0, "3g\r\nabc\r\n0\r\n\r\n", "", true},
		{"no size", frameChunked, 0, ";ext\r\nabc\r\n0\r\n\r\n", "", true},
		{"size overflow", frameChunked, 0, "1000000000000000\r\n", "", true},
		{"long chunk line", frameChunked, 0, "1;" + strings.Repeat("x", maxChunkLine) + "\r\n", "", true},
		{"long trailers", frameChunked, 0, "0\r\n" + strings.Repeat("X-A: b\r\n", maxTrailerBytes/8+1) + "\r\n", "", true},
	}
	for _, c := range cases {
		in := []byte(c.body + next)
		for _, step := range []int{0, 1, 2, 7} {
			n, data, err := frame(c.framing, c.length, in, step)
			if c.bad {
				if err == nil {
					t.Errorf("%s (pieces of %d): no error, want the body refused", c.name, step)
				}
				continue
			}
			if err != nil || n != len(c.body) || string(data) != c.data {
				t.Errorf("%s (pieces of %d): took %d bytes, data %q, err %v; want %d bytes, data %q",
					c.name, step, n, data, err, len(c.body), c.data)
			}
		}
	}
}

// TestBodyFraming: the framing a head's fields give, and the ones the relay refuses.
func TestBodyFraming(t *testing.T) {
	cases := []struct {
		h       http.Header
		framing int
		length  int64
		bad     bool
	}{
		{http.Header{}, frameNone, 0, false},
		{http.Header{"Content-Length": {" 12 "}}, frameLength, 12, false},
		{http.Header{"Transfer-Encoding": {"Chunked"}}, frameChunked, 0, false},
		{http.Header{"Transfer-Encoding": {"gzip, chunked"}}, 0, 0, true},
		{http.Header{"Transfer-Encoding": {"chunked"}, "Content-Length": {"3"}}, 0, 0, true},
		{http.Header{"Content-Length": {"3", "3"}}, 0, 0, true},
		{http.Header{"Content-Length": {"+3"}}, 0, 0, true},
		{http.Header{"Content-Length": {"-1"}}, 0, 0, true},
		{http.Header{"Content-Length": {""}}, 0, 0, true},
	}
	for _, c := range cases {
		f, n, err := bodyFraming(c.h)
		if c.bad != (err != nil) || (!c.bad && (f != c.framing || n != c.length)) {
			t.Errorf("%v: framing %d length %d err %v; want %d %d, refused %v", c.h, f, n, err, c.framing, c.length, c.bad)
		}
	}
}

// rawUpstream is an upstream that answers each request on a connection with the next of
// answers, written as given; it records each request's head and body as they came, and
// counts its connections.
type rawUpstream struct {
	ln      net.Listener
	answers []string
	mu      sync.Mutex
	reqs    []string
	conns   int
}

func startRawUpstream(t *testing.T, answers ...string) *rawUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, answers: answers}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns++
			u.mu.Unlock()
			go u.serve(c)
		}
	}()
	return u
}

func (u *rawUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		var head bytes.Buffer
		req.Header.Write(&head)
		body, _ := io.ReadAll(req.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, req.RequestURI+"\n"+head.String()+"\n"+string(body))
		i := len(u.reqs) - 1
		u.mu.Unlock()
		io.WriteString(c, u.answers[i%len(u.answers)])
	}
}

// TestRelayPassesFraming: through the raw relay, a chunked response with trailers
// reaches the client byte for byte after its head, a 1xx interim response passes before
// the final one, hop-by-hop fields are dropped both ways, a chunked request body and an
// Expect: 100-continue request reach the upstream whole, and keep-alive requests share
// one upstream connection.
func TestRelayPassesFraming(t *testing.T) {
	chunked := "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nTrailer: X-Usage\r\n\r\n"
	body := "f\r\ndata: {\"a\":1}\n\n\r\n0;ext\r\nX-Usage: 3\r\n\r\n"
	up := startRawUpstream(t, chunked+body)
	rec := startRecordingWith(t, "raw", "http://"+up.ln.Addr().String(), nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(rec.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	reqs := []string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTE: deflate, trailers\r\nConnection: X-Secret-Hop, TE\r\nX-Secret-Hop: 1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n3\r\n1}\n\r\n0\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 8\r\n\r\n",
	}
	for i, r := range reqs {
		io.WriteString(c, r)
		if i == 1 {
			line, err := br.ReadString('\n')
			if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
				t.Fatalf("after Expect: 100-continue the client got %q, %v; want the go-ahead", line, err)
			}
			br.ReadString('\n')
			io.WriteString(c, `{"a":1}`+"\n")
		}
		interim, err := http.ReadResponse(br, nil)
		if err != nil || interim.StatusCode != 103 || interim.Header.Get("Link") != "</a>" {
			t.Fatalf("request %d: first response %v, %v; want the upstream's 103 with its Link", i, interim, err)
		}
		// The final head, read by hand, then the body's bytes as they came.
		tp, err := readHeadRaw(br)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(tp, "Transfer-Encoding: chunked") || strings.Contains(tp, "X-Hop") || strings.Contains(tp, "Keep-Alive") {
			t.Errorf("request %d: the client's head\n%s\nwant the framing kept and the hop-by-hop fields dropped", i, tp)
		}
		got := make([]byte, len(body))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != body {
			t.Errorf("request %d: body %q, %v; want the upstream's bytes %q", i, got, err, body)
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.conns != 1 {
		t.Errorf("the upstream saw %d connections for two keep-alive requests, want 1", up.conns)
	}
	if len(up.reqs) == 0 || !strings.Contains(up.reqs[0], "Te: trailers\r\n") || strings.Contains(up.reqs[0], "deflate") {
		t.Errorf("the upstream saw TE of\n%v\nwant trailers alone, as net/http's ReverseProxy forwards it", up.reqs)
	}
	for i, r := range up.reqs {
		if !strings.HasSuffix(r, "\n"+`{"a":1}`+"\n") || strings.Contains(r, "X-Secret-Hop") || strings.Contains(r, "Expect") {
			t.Errorf("upstream request %d:\n%s\nwant the body whole, without the hop-by-hop field or the expectation", i, r)
		}
	}
}

// readHeadRaw reads a head through its blank line.
func readHeadRaw(br *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return b.String(), err
		}
		b.WriteString(line)
		if line == "\r\n" {
			return b.String(), nil
		}
	}
}

// TestRelayRetriesClosedIdle: an upstream that closes its idle keep-alive connection gets
// the next request on a new one, and the client sees no failure.
func TestRelayRetriesClosedIdle(t *testing.T) {
	ok := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan struct{}, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				// One answer per connection, then the connection closes while idle.
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err == nil {
					io.Copy(io.Discard, req.Body)
					io.WriteString(c, ok)
				}
				c.Close()
				closed <- struct{}{}
			}()
		}
	}()
	u, _ := url.Parse("http://" + ln.Addr().String())
	rec := startRecordingWith(t, "raw", u.String(), nil)
	for i := 0; i < 2; i++ {
		resp, body := post(t, rec.srv.URL, "/v1/chat/completions", `{"model":"m","messages":[]}`, nil)
		if resp.StatusCode != 200 || string(body) != "{}" {
			t.Fatalf("request %d: %d %q, want the upstream's answer", i, resp.StatusCode, body)
		}
		<-closed // the pooled connection is closed before the next request
	}
}

// FuzzRelayRequest: the relay's request parsing never panics, takes a head only through
// its blank line, takes only a GET or a POST, records exactly the recorded APIs' POSTs,
// and frames a body fed a byte at a time as it frames it fed whole.
//
//	go test ./record -run '^$' -fuzz FuzzRelayRequest -fuzztime 1m
func FuzzRelayRequest(f *testing.F) {
	for _, s := range []string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2;e\r\n{}\r\n0\r\nT: 1\r\n\r\n",
		"POST /v1/embeddings HTTP/1.1\nHost: x\nExpect: 100-continue\nContent-Length: 0\n\n",
		"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	r := &Relay{maxBody: 1 << 20}
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(in), maxRelayHead)
		n, err := peekHead(br)
		if err != nil || n == 0 {
			return
		}
		if n > len(in) || headLen(in[:n]) != n {
			t.Fatalf("head of %d bytes in %d: not through its blank line", n, len(in))
		}
		req, ok := r.plain(br, n)
		if !ok {
			return
		}
		if (req.method != http.MethodGet && req.method != http.MethodPost) || !strings.HasPrefix(req.target, "/") {
			t.Fatalf("took %+v as a plain request", req)
		}
		if want := recordedAPI(req.method, req.path); req.api != want {
			t.Fatalf("%s %s recorded as %q, want %q", req.method, req.path, req.api, want)
		}
		body := in[n:]
		n1, d1, e1 := frame(req.framing, req.length, body, 0)
		n2, d2, e2 := frame(req.framing, req.length, body, 1)
		if n1 != n2 || !bytes.Equal(d1, d2) || (e1 == nil) != (e2 == nil) {
			t.Fatalf("whole: %d %q %v; a byte at a time: %d %q %v", n1, d1, e1, n2, d2, e2)
		}
	})
}

// TestRelayHTTPSUpstream: the raw relay reaches an https upstream over TLS (crypto/tls,
// HTTP/1.1 asked for), and its streamed answer comes back as it does over plain HTTP.
func TestRelayHTTPSUpstream(t *testing.T) {
	var proto string
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		proto = r.Proto
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sseBody)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	rec := startRecordingWith(t, "raw", up.URL, nil)
	rec.srv.Close() // the same recorder, behind a relay that trusts the test server
	rec.srv = serveProxy(t, "raw", u, rec.rec, RelayOptions{TLS: &tls.Config{RootCAs: roots}})
	resp, body := post(t, rec.srv.URL, "/v1/chat/completions", chatStreamBody, nil)
	if resp.StatusCode != 200 || string(body) != sseBody || proto != "HTTP/1.1" {
		t.Errorf("through TLS: %d, %s, body %q; want 200 over HTTP/1.1 and the stream", resp.StatusCode, proto, body)
	}
	res, _ := rec.close()
	if len(res) != 1 || res[0].Status != results.StatusOK || res[0].OutputTokens != 2 {
		t.Errorf("recorded %+v, want one ok request of 2 output tokens", res)
	}
}

// TestRelayHeadTimeout: a client that sends part of a head and stalls has its
// connection closed once HeadTimeout has passed, as net/http's ReadHeaderTimeout does.
func TestRelayHeadTimeout(t *testing.T) {
	up := streamer(t, nil)
	u, _ := url.Parse(up.URL)
	rec := startRecordingWith(t, "raw", up.URL, nil)
	rec.srv.Close()
	rec.srv = serveProxy(t, "raw", u, rec.rec, RelayOptions{HeadTimeout: 50 * time.Millisecond})
	c, err := net.Dial("tcp", strings.TrimPrefix(rec.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
	b, err := io.ReadAll(c) // returns when the relay closes the connection
	if err != nil || len(b) != 0 {
		t.Errorf("a stalled head got %q, %v; want the connection closed without an answer", b, err)
	}
}

// TestRelayIdleTimeout: an upstream connection idle past the pool's idle timeout is not
// used again; within it, it is.
func TestRelayIdleTimeout(t *testing.T) {
	ok := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	for _, c := range []struct {
		idle  time.Duration
		conns int
	}{{time.Hour, 1}, {-1, 2}} {
		up := startRawUpstream(t, ok)
		rec := startRecordingWith(t, "raw", "http://"+up.ln.Addr().String(), nil)
		rec.srv.Close()
		u, _ := url.Parse("http://" + up.ln.Addr().String())
		r := NewRelay(u, rec.rec, RelayOptions{})
		r.pool.idleTimeout = c.idle
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go r.Serve(ln)
		rec.srv = &proxyServer{URL: "http://" + ln.Addr().String(), Close: func() { r.Close() }}
		for i := 0; i < 2; i++ {
			post(t, rec.srv.URL, "/v1/chat/completions", `{"model":"m","messages":[]}`, nil)
		}
		up.mu.Lock()
		if up.conns != c.conns {
			t.Errorf("idle timeout %v: the upstream saw %d connections for two requests, want %d", c.idle, up.conns, c.conns)
		}
		up.mu.Unlock()
	}
}

// TestRelayPassesGET: a GET (a client's preflight /v1/models) passes through the raw relay
// unrecorded and keeps its connection on the relay, so the recorded POST after it on the
// same connection is relayed by it too, not by the net/http server it hands others to.
func TestRelayPassesGET(t *testing.T) {
	models := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"data\":[]}"
	ok := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
	up := startRawUpstream(t, models, ok)
	rec := startRecordingWith(t, "raw", "http://"+up.ln.Addr().String(), nil)
	rec.srv.Close()
	u, _ := url.Parse("http://" + up.ln.Addr().String())
	r := NewRelay(u, rec.rec, RelayOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go r.Serve(ln)
	rec.srv = &proxyServer{URL: "http://" + ln.Addr().String(), Close: func() { r.Close() }}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i, req := range []string{
		"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\r\n",
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 27\r\n\r\n{\"model\":\"m\",\"messages\":[]}",
	} {
		io.WriteString(c, req)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if want := []string{`{"data":[]}`, `{}`}[i]; string(b) != want {
			t.Errorf("request %d: body %q, want the upstream's %q", i, b, want)
		}
		r.mu.Lock()
		kept := len(r.conns)
		r.mu.Unlock()
		if kept != 1 {
			t.Fatalf("after request %d the relay serves %d connections, want the client's one (handed to net/http?)", i, kept)
		}
	}
	up.mu.Lock()
	if len(up.reqs) != 2 || !strings.HasPrefix(up.reqs[0], "/v1/models\n") || !strings.Contains(up.reqs[0], "Authorization: Bearer k") {
		t.Errorf("the upstream saw %q, want the GET as sent, then the POST", up.reqs)
	}
	up.mu.Unlock()
	if n := rec.rec.Counts(); n.Passed != 1 || n.Requests != 1 {
		t.Errorf("counts %+v, want the GET passed unrecorded and the POST taken for recording", n)
	}
}

// TestLongHead: a head longer than the reader's buffer is read through its blank line and
// not a byte past it, lines split across the buffer's fills included (the status line's
// "\r" and "\n" in two fills, a field whose "\r\n" comes alone); an unended one fails.
func TestLongHead(t *testing.T) {
	a := "X-A: " + strings.Repeat("a", 11) // 16 bytes: the reader's size
	for _, want := range []string{
		"HTTP/1.1 200 OK\r\n" + a + "\r\n" + a + a + "\r\n\r\n",
		"HTTP/1.1 200 OK\n" + a + "\n" + a + a + "\n\n",
	} {
		br := bufio.NewReaderSize(strings.NewReader(want+"\r\n\r\nBODY"), 16)
		if got, err := longHead(br); err != nil || string(got) != want {
			t.Errorf("longHead = %q, %v; want %q", got, err, want)
		}
		if rest, _ := io.ReadAll(br); string(rest) != "\r\n\r\nBODY" {
			t.Errorf("after the head the reader holds %q, want the body untouched", rest)
		}
	}
	br := bufio.NewReaderSize(strings.NewReader("HTTP/1.1 200 OK\r\n"+a+a), 16)
	if got, err := longHead(br); err == nil {
		t.Errorf("an unended head gave %q, want an error", got)
	}
}
