//go:build linux

package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/rxstamp"
)

// rawResponse is one HTTP/1.1 response read off the wire with its chunk framing checked.
type rawResponse struct {
	status string
	header http.Header
	body   []byte // de-chunked
	chunks int
}

// readRawResponse reads one response, failing on any chunk framing error: each chunk is
// "%x\r\n" data "\r\n", the body ends with "0\r\n", trailers and "\r\n".
func readRawResponse(br *bufio.Reader) (*rawResponse, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	r := &rawResponse{status: strings.TrimSpace(line), header: http.Header{}}
	readHeaders := func() error {
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return err
			}
			if !strings.HasSuffix(l, "\r\n") {
				return fmt.Errorf("header line %q lacks CRLF", l)
			}
			if l == "\r\n" {
				return nil
			}
			k, v, ok := strings.Cut(strings.TrimSuffix(l, "\r\n"), ": ")
			if !ok {
				return fmt.Errorf("bad header line %q", l)
			}
			r.header.Add(k, v)
		}
	}
	if err := readHeaders(); err != nil {
		return nil, err
	}
	if r.header.Get("Transfer-Encoding") != "chunked" {
		return nil, fmt.Errorf("not chunked: %v", r.header)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if !strings.HasSuffix(l, "\r\n") {
			return nil, fmt.Errorf("chunk size line %q lacks CRLF", l)
		}
		hex := strings.TrimSuffix(l, "\r\n")
		n, err := strconv.ParseInt(hex, 16, 64)
		if err != nil || strconv.FormatInt(n, 16) != hex {
			return nil, fmt.Errorf("chunk size line %q", l)
		}
		if n == 0 {
			return r, readHeaders() // trailers, then the blank line
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, err
		}
		if string(data[n:]) != "\r\n" {
			return nil, fmt.Errorf("chunk of %d bytes not followed by CRLF", n)
		}
		r.body = append(r.body, data[:n]...)
		r.chunks++
	}
}

func rawRequest(addr, path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nX-Request-Id: rid\r\nContent-Length: %d\r\n\r\n%s",
		path, addr, len(body), body)
}

var createdRE = regexp.MustCompile(`"created(_at)?":\d+`)

// TestPreciseWireMatchesGoroutinePath: a fixed stream written by the precise writer
// carries the same bytes as one written through net/http (the same events, usage and
// [DONE], the same headers), in valid chunks, and the connection serves a second request.
func TestPreciseWireMatchesGoroutinePath(t *testing.T) {
	cfg, _ := Profile("fixed")
	cfg.FixedTTFT, cfg.FixedITL = 3*time.Millisecond, time.Millisecond
	cfg.ReasoningShare, cfg.ReasoningUsage = 0.4, true // every API's reasoning-to-answer turn
	precise, plain := startSim(t, cfg), startSim(t, cfg)
	plain.srv.noPrecise.Store(true)
	reqs := []struct{ path, body string }{
		{"/v1/completions", `{"prompt":"hi","max_tokens":12,"ignore_eos":true,"stream":true}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":9,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`},
		{"/v1/completions", `{"prompt":"hi","max_tokens":1,"stream":true,"stream_options":{"include_usage":true}}`},
		{"/v1/messages", `{"model":"` + cfg.Model + `","messages":[{"role":"user","content":"hi"}],"max_tokens":9,"stream":true}`},
		{"/v1/responses", `{"input":"hi","max_output_tokens":9,"stream":true}`},
		{"/v1/messages", `{"model":"` + cfg.Model + `","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"stream":true}`},
		{"/v1/responses", `{"input":"hi","max_output_tokens":2,"stream":true}`},
	}
	ends := map[string]string{"/v1/messages": "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", "/v1/responses": "\"type\":\"response.completed\"}\n\n"}
	exchange := func(r *Running) []*rawResponse {
		conn, err := net.Dial("tcp", r.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		var out []*rawResponse
		for _, q := range reqs { // one keep-alive connection for all
			if _, err := io.WriteString(conn, rawRequest(r.Addr().String(), q.path, q.body)); err != nil {
				t.Fatal(err)
			}
			resp, err := readRawResponse(br)
			if err != nil {
				t.Fatalf("%s: %v", q.path, err)
			}
			out = append(out, resp)
		}
		return out
	}
	got, want := exchange(precise), exchange(plain)
	for i := range reqs {
		g, w := got[i], want[i]
		if g.status != w.status {
			t.Errorf("%d: status %q, want %q", i, g.status, w.status)
		}
		g.header.Del("Date")
		w.header.Del("Date")
		if fmt.Sprint(g.header) != fmt.Sprint(w.header) {
			t.Errorf("%d: header %v, want %v", i, g.header, w.header)
		}
		gb, wb := createdRE.ReplaceAll(g.body, nil), createdRE.ReplaceAll(w.body, nil)
		if !bytes.Equal(gb, wb) {
			t.Errorf("%d: body\n%s\nwant\n%s", i, gb, wb)
		}
		end := "data: [DONE]\n\n"
		if e, ok := ends[reqs[i].path]; ok {
			end = e
		}
		if !bytes.HasSuffix(g.body, []byte(end)) {
			t.Errorf("%d: does not end %q:\n%s", i, end, g.body)
		}
	}
	if n, m := precise.srv.fixedPrecise.Load(), plain.srv.fixedPrecise.Load(); n != int64(len(reqs)) || m != 0 {
		t.Fatalf("precise streams %d and %d, want %d and 0", n, m, len(reqs))
	}

	// A plain net/http client reads it, and reuses the connection.
	c := &http.Client{Transport: &http.Transport{}}
	defer c.Transport.(*http.Transport).CloseIdleConnections()
	for i := range 2 {
		var reused bool
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { reused = ci.Reused }})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, precise.BaseURL()+"/completions", strings.NewReader(reqs[0].body))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if ev := bytes.Count(b, []byte("\n\n")); ev != 13 || !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
			t.Fatalf("request %d: %d events, want 12 tokens + [DONE]:\n%s", i, ev, b)
		}
		if i == 1 && !reused {
			t.Error("second request did not reuse the keep-alive connection")
		}
	}
}

// TestPreciseCancelNoWriteAfterReturn: clients that go away mid-stream end their
// handlers, after which the scheduler makes no write for them, and every goroutine ends.
func TestPreciseCancelNoWriteAfterReturn(t *testing.T) {
	base := runtime.NumGoroutine()
	cfg, _ := Profile("fixed")
	cfg.FixedTTFT, cfg.FixedITL = time.Millisecond, time.Millisecond
	ctx, cancelSim := context.WithCancel(context.Background())
	defer cancelSim()
	r, err := Start(ctx, "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	type ret struct {
		st     *pstream
		writes int
	}
	var mu sync.Mutex
	var rets []ret
	r.srv.preciseReturned = func(st *pstream) {
		st.mu.Lock()
		w := st.writes
		st.mu.Unlock()
		mu.Lock()
		rets = append(rets, ret{st, w})
		mu.Unlock()
	}
	const streams = 8
	tr := &http.Transport{}
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.BaseURL()+"/completions",
				strings.NewReader(`{"prompt":"hi","max_tokens":5000,"ignore_eos":true,"stream":true}`))
			resp, err := c.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for range 3 + 5*i { // events read before going away
				if _, err := br.ReadString('\n'); err != nil {
					t.Error(err)
					return
				}
			}
			cancel()
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(rets)
		mu.Unlock()
		if n == streams {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d handlers returned", n, streams)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(30 * time.Millisecond) // many ITLs: any write the scheduler still made would show
	mu.Lock()
	for _, x := range rets {
		x.st.mu.Lock()
		if x.st.writes != x.writes {
			t.Errorf("stream wrote %d times after its handler returned", x.st.writes-x.writes)
		}
		if x.writes == 0 {
			t.Error("a stream made no precise write before it was canceled")
		}
		x.st.mu.Unlock()
	}
	mu.Unlock()
	tr.CloseIdleConnections()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	waitGoroutines(t, base)
}

func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d at start:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPreciseSlowReaderFallsBack: a reader that leaves the socket full makes a write
// incomplete; the handler writes the rest and finishes the stream on its own path, with
// every token, in valid chunks, and the request log counts every token once.
func TestPreciseSlowReaderFallsBack(t *testing.T) {
	acceptHook = func(c net.Conn) { c.(*net.TCPConn).SetWriteBuffer(4096) }
	defer func() { acceptHook = nil }()
	cfg, _ := Profile("fixed")
	cfg.FixedTTFT, cfg.FixedITL = time.Millisecond, 20*time.Microsecond
	cfg.RequestLog = filepath.Join(t.TempDir(), "req.jsonl")
	cfg.RequestLogWrites = true
	r := startSim(t, cfg)
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", r.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const tokens = 3000
	if _, err := io.WriteString(conn, rawRequest(r.Addr().String(), "/v1/completions",
		fmt.Sprintf(`{"prompt":"hi","max_tokens":%d,"ignore_eos":true,"stream":true}`, tokens))); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the whole stream falls due while nobody reads
	resp, err := readRawResponse(bufio.NewReader(conn))
	if err != nil {
		t.Fatal(err)
	}
	if ev := bytes.Count(resp.body, []byte("\n\n")); ev != tokens+1 || !bytes.HasSuffix(resp.body, []byte("data: [DONE]\n\n")) {
		t.Fatalf("%d events, want %d tokens + [DONE]", ev, tokens)
	}
	if n := r.srv.fixedFallbacks.Load(); n != 1 {
		t.Fatalf("%d fallbacks, want 1", n)
	}
	conn.Close()
	r.Close()
	recs := readLog(t, cfg.RequestLog)
	if len(recs) != 1 {
		t.Fatalf("%d log lines", len(recs))
	}
	checkStamps(t, recs[0], tokens)
}

func readLog(t *testing.T, path string) []LogRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []LogRecord
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var rec LogRecord
		if err := json.Unmarshal(l, &rec); err != nil {
			t.Fatalf("%s: %v", l, err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// checkStamps checks a stream's server-side stamps: read <= first write = the first of
// the writes, non-decreasing, whose tokens sum to the completion.
func checkStamps(t *testing.T, rec LogRecord, tokens int) {
	t.Helper()
	if rec.Outcome != "ok" || rec.CompletionTokens != tokens {
		t.Fatalf("outcome %s, %d tokens, want ok and %d", rec.Outcome, rec.CompletionTokens, tokens)
	}
	if rec.ReadUnixNs == 0 || rec.FirstWriteUnixNs < rec.ReadUnixNs {
		t.Errorf("read %d, first write %d", rec.ReadUnixNs, rec.FirstWriteUnixNs)
	}
	if len(rec.WriteUnixNs) == 0 || len(rec.WriteUnixNs) != len(rec.WriteTokens) || rec.WriteUnixNs[0] != rec.FirstWriteUnixNs {
		t.Fatalf("writes %v tokens %v, first write %d", rec.WriteUnixNs, rec.WriteTokens, rec.FirstWriteUnixNs)
	}
	sum := 0
	for i, n := range rec.WriteTokens {
		if n < 1 {
			t.Errorf("write %d carried %d tokens", i, n)
		}
		sum += n
		if i > 0 && rec.WriteUnixNs[i] < rec.WriteUnixNs[i-1] {
			t.Errorf("write %d stamped before write %d", i, i-1)
		}
	}
	if sum != tokens {
		t.Errorf("write_tokens sum to %d, want %d", sum, tokens)
	}
}

// TestRequestLogServerStamps: each generation request's log line has the stamp of the
// read that delivered it (the second request on a keep-alive connection gets its own, not
// the first's) and, for streams, the first write and every write, on both write paths and
// for the engine profiles.
func TestRequestLogServerStamps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile string
		plain   bool
	}{{"fixed-precise", "fixed", false}, {"fixed-goroutine", "fixed", true}, {"tiny", "tiny", false}} {
		t.Run(tc.name, func(t *testing.T) {
			release, err := rxstamp.Hold(5 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer release()

			cfg, _ := Profile(tc.profile)
			cfg.RequestLog = filepath.Join(t.TempDir(), "req.jsonl")
			cfg.RequestLogWrites = true
			if cfg.Fixed {
				cfg.FixedTTFT, cfg.FixedITL = 2*time.Millisecond, time.Millisecond
			} else {
				cfg.TimeScale = 100
			}
			r := startSim(t, cfg)
			r.srv.noPrecise.Store(tc.plain)
			conn, err := net.Dial("tcp", r.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			const tokens = 10
			stream := fmt.Sprintf(`{"prompt":"hi","max_tokens":%d,"ignore_eos":true,"stream":true}`, tokens)
			var sentNs []int64
			for _, body := range []string{stream, stream, `{"prompt":"hi","max_tokens":3,"ignore_eos":true}`} {
				time.Sleep(20 * time.Millisecond) // the connection idles between requests
				sentNs = append(sentNs, time.Now().UnixNano())
				if _, err := io.WriteString(conn, rawRequest(r.Addr().String(), "/v1/completions", body)); err != nil {
					t.Fatal(err)
				}
				if strings.Contains(body, `"stream":true`) {
					if _, err := readRawResponse(br); err != nil {
						t.Fatal(err)
					}
					continue
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			conn.Close()
			r.Close()
			recs := readLog(t, cfg.RequestLog)
			if len(recs) != 3 {
				t.Fatalf("%d log lines, want 3", len(recs))
			}
			arrived := 0
			for i, rec := range recs {
				if rec.ReadUnixNs < sentNs[i] || (i+1 < len(sentNs) && rec.ReadUnixNs >= sentNs[i+1]) {
					t.Errorf("request %d read at %d: not between its send %d and the next", i, rec.ReadUnixNs, sentNs[i])
				}
				if rec.ArriveUnixNs == 0 {
					continue // unstamped by the kernel (rxstamp.Hold): the read's stamp is the arrival
				}
				arrived++
				if rec.ArriveUnixNs < sentNs[i] || rec.ArriveUnixNs > rec.ReadUnixNs {
					t.Errorf("request %d arrived at %d: not between its send %d and its read %d", i, rec.ArriveUnixNs, sentNs[i], rec.ReadUnixNs)
				}
				// The schedule starts at the arrival: the first token is due TTFT after it
				// (the precise writer may send it up to writeEarly before).
				if cfg.Fixed && rec.Stream && rec.FirstWriteUnixNs-rec.ArriveUnixNs < int64(cfg.FixedTTFT-writeEarly) {
					t.Errorf("request %d: first write %v after its arrival, TTFT %v", i, time.Duration(rec.FirstWriteUnixNs-rec.ArriveUnixNs), cfg.FixedTTFT)
				}
			}
			if arrived == 0 {
				t.Error("no request has the kernel's arrival stamp")
			}
			checkStamps(t, recs[0], tokens)
			checkStamps(t, recs[1], tokens)
			if recs[1].ReadUnixNs <= recs[0].WriteUnixNs[len(recs[0].WriteUnixNs)-1] {
				t.Error("second request's read stamp is not after the first's last write")
			}
			if w := recs[2]; w.Stream || w.FirstWriteUnixNs != 0 || w.WriteUnixNs != nil || w.ReadUnixNs == 0 {
				t.Errorf("non-stream line %+v", w)
			}
			if got := r.srv.fixedPrecise.Load(); (tc.name == "fixed-precise") != (got > 0) {
				t.Errorf("%d precise streams", got)
			}
		})
	}
}

var _ = errors.New
