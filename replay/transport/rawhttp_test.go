//go:build linux

package transport

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/wire"
)

// feedResponse runs the raw client's response parser over resp as if it arrived in
// reads of split bytes (0: all at once), then, if eof, as if the server closed.
func feedResponse(t *testing.T, resp string, split int, eof bool) (*rawResp, *results.Result) {
	t.Helper()
	c := &Client{opts: ClientOptions{MaxLine: DefaultMaxLine}}
	res := results.NewResult(1, 0, 0, 3, 4)
	res.SentNS = 0
	p := &rawResp{buf: make([]byte, 64), res: res, sse: NewSSEReader(nil, nil, 16, DefaultMaxLine)}
	p.st.begin(c, res, nil)
	stamp := int64(0)
	stopped := false
	for len(resp) > 0 && !stopped {
		n := len(resp)
		if split > 0 {
			n = min(n, split)
		}
		if !p.makeRoom() {
			p.err = errRawHeadTooLarge
			break
		}
		n = min(n, len(p.buf)-p.hi)
		copy(p.buf[p.hi:], resp[:n])
		p.hi += n
		resp = resp[n:]
		stamp++
		stopped = p.process(stamp)
	}
	if eof && !stopped {
		p.eof = true
		p.process(stamp + 1)
	}
	switch {
	case p.mode == modeSSE && (p.st.over() || p.state == rsDone):
		p.st.end()
	case p.mode == modeErrBody:
		res.Status, res.Error = results.StatusHTTPError, wire.HTTPErrorText(p.status, p.errBody)
	}
	return p, res
}

const rawSSEBody = "data: {\"choices\":[{\"text\":\" a\"}]}\n\n" +
	"data: {\"choices\":[{\"text\":\" b\",\"finish_reason\":\"length\"}]}\n\n" +
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n" +
	"data: [DONE]\n\n"

// chunked frames body in chunked encoding, one chunk per SSE event, with a trailer.
func chunked(body string) string {
	var b strings.Builder
	for _, ev := range strings.SplitAfter(body, "\n\n") {
		if ev != "" {
			fmt.Fprintf(&b, "%x;ext=1\r\n%s\r\n", len(ev), ev)
		}
	}
	b.WriteString("0\r\nX-Sim-Timing: 1\r\n\r\n")
	return b.String()
}

func TestRawResponseFraming(t *testing.T) {
	sseHead := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
	cases := []struct {
		name      string
		resp      string
		eof       bool
		status    results.Status
		errHas    string
		chunks    int
		done      bool // the response was read to its end
		closeConn bool
	}{
		{name: "chunked with trailer", resp: sseHead + "Transfer-Encoding: chunked\r\n\r\n" + chunked(rawSSEBody),
			status: results.StatusOK, chunks: 2, done: true},
		{name: "content-length", resp: sseHead + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(rawSSEBody)) + rawSSEBody,
			status: results.StatusOK, chunks: 2, done: true},
		{name: "close-delimited", resp: sseHead + "\r\n" + rawSSEBody, eof: true,
			status: results.StatusOK, chunks: 2, done: true, closeConn: true},
		{name: "interim 100 then 200", resp: "HTTP/1.1 100 Continue\r\n\r\n" + sseHead + "Transfer-Encoding: chunked\r\n\r\n" + chunked(rawSSEBody),
			status: results.StatusOK, chunks: 2, done: true},
		{name: "bare LF head", resp: strings.ReplaceAll(sseHead, "\r\n", "\n") + "Content-Length: " + fmt.Sprint(len(rawSSEBody)) + "\n\n" + rawSSEBody,
			status: results.StatusOK, chunks: 2, done: true},
		{name: "connection close", resp: sseHead + "Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(rawSSEBody),
			status: results.StatusOK, chunks: 2, done: true, closeConn: true},
		{name: "HTTP/1.0", resp: strings.Replace(sseHead, "HTTP/1.1", "HTTP/1.0", 1) + "\r\n" + rawSSEBody, eof: true,
			status: results.StatusOK, chunks: 2, done: true, closeConn: true},
		{name: "HTTP/1.0 keep-alive", resp: strings.Replace(sseHead, "HTTP/1.1", "HTTP/1.0", 1) + "Connection: keep-alive\r\nContent-Length: " + fmt.Sprint(len(rawSSEBody)) + "\r\n\r\n" + rawSSEBody,
			status: results.StatusOK, chunks: 2, done: true},
		{name: "error JSON", resp: "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"2a\r\n{\"object\":\"error\",\"message\":\"overloaded\"}\r\n0\r\n\r\n",
			status: results.StatusHTTPError, errHas: "HTTP 503: overloaded", done: true},
		{name: "not a stream", resp: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
			status: results.StatusStreamError, errHas: "not an event stream"},
		{name: "cut mid-chunk", resp: sseHead + "Transfer-Encoding: chunked\r\n\r\n" + chunked(rawSSEBody)[:60], eof: true,
			errHas: "unexpected EOF", chunks: 1},
		{name: "bad chunk size", resp: sseHead + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", errHas: "chunk size"},
		{name: "no CRLF after chunk", resp: sseHead + "Transfer-Encoding: chunked\r\n\r\n2\r\nabXY\r\n", errHas: "no CRLF"},
		{name: "not HTTP", resp: "SSH-2.0-OpenSSH\r\n\r\n", errHas: "malformed HTTP response"},
	}
	for _, tc := range cases {
		for _, split := range []int{0, 1, 7} {
			t.Run(fmt.Sprintf("%s/split%d", tc.name, split), func(t *testing.T) {
				p, res := feedResponse(t, tc.resp, split, tc.eof)
				if p.err != nil && tc.errHas == "" {
					t.Fatalf("parse error %v", p.err)
				}
				if p.err != nil {
					if !strings.Contains(p.err.Error(), tc.errHas) {
						t.Errorf("error %v, want %q", p.err, tc.errHas)
					}
				} else if res.Status != tc.status || !strings.Contains(res.Error, tc.errHas) {
					t.Errorf("status %s error %q, want %s %q", res.Status, res.Error, tc.status, tc.errHas)
				}
				if len(res.ChunkNS) != tc.chunks {
					t.Errorf("%d chunks, want %d", len(res.ChunkNS), tc.chunks)
				}
				if (p.state == rsDone) != tc.done || (tc.done && p.closeConn != tc.closeConn) {
					t.Errorf("state %d close %v, want done %v close %v", p.state, p.closeConn, tc.done, tc.closeConn)
				}
				if tc.status == results.StatusOK && (res.OutputTokens != 2 || res.PromptTokensServer != 3) {
					t.Errorf("usage: output %d prompt %d", res.OutputTokens, res.PromptTokensServer)
				}
			})
		}
	}
}

func TestRawHeadTooLarge(t *testing.T) {
	resp := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("x", rawMaxHead) + "\r\n\r\n"
	p, _ := feedResponse(t, resp, 4096, false)
	if p.err != errRawHeadTooLarge {
		t.Fatalf("error %v, want %v", p.err, errRawHeadTooLarge)
	}
}

func TestHTTPClientChoice(t *testing.T) {
	mustURL := func(s string) *url.URL { u, _ := wire.BaseURL(s); return u }
	cases := []struct {
		choice, endpoint, want, errHas string
	}{
		{"", "http://127.0.0.1:8000", HTTPClientRaw, ""},
		{"auto", "https://127.0.0.1:8000", HTTPClientNetHTTP, ""},
		{"raw", "https://127.0.0.1:8000", "", "plain http only"},
		{"net/http", "http://127.0.0.1:8000", HTTPClientNetHTTP, ""},
		{"curl", "http://127.0.0.1:8000", "", "unknown HTTP client"},
	}
	for _, tc := range cases {
		c, err := NewClient(ClientOptions{BaseURL: mustURL(tc.endpoint), API: wire.APICompletions, Backend: wire.BackendVLLM, Model: "m", HTTPClient: tc.choice})
		switch {
		case tc.errHas != "":
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%s %s: error %v, want %q", tc.choice, tc.endpoint, err, tc.errHas)
			}
		case err != nil:
			t.Errorf("%s %s: %v", tc.choice, tc.endpoint, err)
		case c.HTTPClientName() != tc.want:
			t.Errorf("%s %s: %s, want %s", tc.choice, tc.endpoint, c.HTTPClientName(), tc.want)
		}
	}
	// A header that would split the request is refused, and its value is not repeated.
	_, err := NewClient(ClientOptions{BaseURL: mustURL("http://127.0.0.1:8000"), API: wire.APICompletions, Backend: wire.BackendVLLM, Model: "m",
		Header: http.Header{"X-Token": {"secret\r\nX-Injected: 1"}}})
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("header with CRLF: %v", err)
	}
	_, err = NewClient(ClientOptions{BaseURL: mustURL("http://127.0.0.1:8000"), API: wire.APICompletions, Backend: wire.BackendVLLM, Model: "m",
		Header: http.Header{"Bad Name": {"v"}}})
	if err == nil {
		t.Error("header name with a space accepted")
	}
}

// FuzzRawResponse: the response parser never panics or hangs, and what it makes of a
// response does not depend on how the bytes were split into reads.
func FuzzRawResponse(f *testing.F) {
	sseHead := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
	f.Add(sseHead+"Transfer-Encoding: chunked\r\n\r\n"+chunked(rawSSEBody), uint8(3), false)
	f.Add(sseHead+"\r\n"+rawSSEBody, uint8(1), true)
	f.Add("HTTP/1.1 500 x\r\nContent-Length: 5\r\n\r\nboom!", uint8(2), false)
	f.Add("HTTP/1.1 100 Continue\r\n\r\n"+sseHead+"Content-Length: 10\r\n\r\ndata: x\n\n", uint8(4), true)
	f.Fuzz(func(t *testing.T, resp string, split uint8, eof bool) {
		if len(resp) > 1<<16 {
			return
		}
		summary := func(p *rawResp, res *results.Result) string {
			errText := ""
			if p.err != nil {
				errText = p.err.Error()
			}
			state := p.state
			if p.err != nil || p.st.failed {
				state = -1 // where the framing stopped after a failure depends on the reads, harmlessly
			}
			return fmt.Sprintf("state %d mode %d status %s %q http %d chunks %d out %d err %q close %v",
				state, p.mode, res.Status, res.Error, res.HTTPStatus, len(res.ChunkNS), res.OutputTokens, errText, p.closeConn)
		}
		whole := summary(feedResponse(t, resp, 0, eof))
		if split == 0 {
			return
		}
		if got := summary(feedResponse(t, resp, int(split), eof)); got != whole {
			t.Errorf("split %d: %s\nwhole: %s", split, got, whole)
		}
	})
}
