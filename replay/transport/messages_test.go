package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/wire"
)

// messagesKey is the API key of the Messages API tests: it must reach the server in
// x-api-key and nowhere else.
const messagesKey = "sk-ant-Secret-77"

// messagesGap is how long the reference server waits before each output event; a stamp
// taken at any later event than the right one is late by at least this much, more than
// messagesLate.
const messagesGap = 300 * time.Millisecond

// messagesLate bounds how late a loaded machine may read an event (replay's toxic tests
// allow the same 150 ms).
const messagesLate = 150 * time.Millisecond

// messagesEvent writes one event as Anthropic's reference does: "event: TYPE", then its
// JSON data.
func messagesEvent(w io.Writer, typ, data string) {
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, data)
	w.(http.Flusher).Flush()
}

// messagesServer is an httptest server written from Anthropic's streaming reference
// (docs.anthropic.com/en/docs/build-with-claude/streaming): message_start with the
// prompt's usage, a ping, a thinking block of three thinking_deltas and a signature_delta,
// a text block of two text_deltas, message_delta with the cumulative output_tokens (7: the
// five streamed and two the reference does not stream, as a model's think tags), then
// message_stop. Each output event is written after messagesGap, and the clock time just
// before the first is kept: the TTFT the client must stamp.
type messagesServer struct {
	t     *testing.T
	clk   Clock
	usage string // message_start's and message_delta's prompt usage fields
	mu    sync.Mutex
	first []int64 // per request, clk's time before writing its first output event
	body  []byte
	hdr   http.Header
}

func (s *messagesServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.body, s.hdr = body, r.Header.Clone()
	s.mu.Unlock()
	if r.URL.Path != "/v1/messages" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	messagesEvent(w, "message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,"usage":{`+s.usage+`,"output_tokens":1}}}`)
	messagesEvent(w, "ping", `{"type": "ping"}`)
	messagesEvent(w, "content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}`)
	for i, th := range []string{"Let me", " think", " it through."} {
		time.Sleep(messagesGap)
		if i == 0 {
			s.mu.Lock()
			s.first = append(s.first, s.clk.Now())
			s.mu.Unlock()
		}
		messagesEvent(w, "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"`+th+`"}}`)
	}
	messagesEvent(w, "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM"}}`)
	messagesEvent(w, "content_block_stop", `{"type":"content_block_stop","index":0}`)
	messagesEvent(w, "content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`)
	for _, tx := range []string{"Hello", "!"} {
		time.Sleep(messagesGap)
		messagesEvent(w, "content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"`+tx+`"}}`)
	}
	messagesEvent(w, "content_block_stop", `{"type":"content_block_stop","index":1}`)
	messagesEvent(w, "message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}}`)
	messagesEvent(w, "message_stop", `{"type":"message_stop"}`)
}

// httpClients are the clients a test runs on: net/http, and the raw client where it serves.
func httpClients() []string {
	if runtime.GOOS == "linux" {
		return []string{HTTPClientNetHTTP, HTTPClientRaw}
	}
	return []string{HTTPClientNetHTTP}
}

// roundTrip sends one request of outputTokens after prompt through c and returns its record.
func roundTrip(c *Client, clk Clock, prompt string, outputTokens int32) *results.Result {
	req := &Request{ID: 1, PromptTokens: 8, OutputTokens: outputTokens, Body: c.AppendBody(nil, []byte(prompt), outputTokens)}
	c.Transport().Prepare(req, false)
	res := results.NewResult(1, 0, 0, 8, outputTokens)
	c.Transport().RoundTrip(context.Background(), clk, req, res, NewSSEReader(nil, clk.Now, 4096, DefaultMaxLine), func(int) {}, nil)
	return res
}

// TestMessagesStream: on both clients, a stream of the reference's shape is one ok record
// whose output tokens are message_delta's, whose prompt and cached tokens are the whole
// prompt and its cache hit as the backend's server means them (SGLang's input_tokens is
// the whole prompt, Anthropic's and vLLM's the uncached part), whose chunks are the five output
// deltas and whose TTFT is the first thinking delta's, not message_start's, the ping's or
// the block start's. The request went to /v1/messages with the key in x-api-key (and as a
// bearer token to an engine) and anthropic-version, as the reference's body.
func TestMessagesStream(t *testing.T) {
	clk := Clock{Start: time.Now()}
	for _, tc := range []struct {
		api     wire.API
		backend wire.Backend
		usage   string
	}{
		{wire.APIMessages, wire.BackendSGLang, `"input_tokens":30,"cache_read_input_tokens":12`},
		{wire.APIMessages, wire.BackendOpenAI, `"input_tokens":18,"cache_creation_input_tokens":0,"cache_read_input_tokens":12`},
		{wire.APIMessages, wire.BackendVLLM, `"input_tokens":18,"cache_creation_input_tokens":0,"cache_read_input_tokens":12`},
		// The same kind outside package wire's built-ins: decoded through Kind.Decode.
		{messagesOwn.Name, wire.BackendSGLang, `"input_tokens":30,"cache_read_input_tokens":12`},
	} {
		srv := &messagesServer{t: t, clk: clk, usage: tc.usage}
		ts := httptest.NewServer(srv)
		base, _ := url.Parse(ts.URL + "/v1")
		for _, hc := range httpClients() {
			c := newTestClient(t, base, func(o *ClientOptions) {
				o.API, o.Backend, o.APIKey, o.HTTPClient = tc.api, tc.backend, messagesKey, hc
			})
			res := roundTrip(c, clk, "hi", 64)
			name := string(tc.api) + "/" + string(tc.backend) + "/" + hc
			if res.Status != results.StatusOK || res.OutputTokens != 7 || res.OutputTokensSource != results.SourceUsage ||
				res.PromptTokensServer != 30 || res.PromptTokensCached != 12 || len(res.ChunkNS) != 5 {
				t.Errorf("%s: %s %q, output %d (%s), prompt %d cached %d, %d chunks; want ok, 7 (usage), 30, 12, 5",
					name, res.Status, res.Error, res.OutputTokens, res.OutputTokensSource, res.PromptTokensServer, res.PromptTokensCached, len(res.ChunkNS))
			}
			srv.mu.Lock()
			first, hdr, body := srv.first[len(srv.first)-1], srv.hdr, srv.body
			srv.mu.Unlock()
			if late := time.Duration(res.FirstTokenNS - first); late < 0 || late > messagesLate {
				t.Errorf("%s: TTFT stamped %v after the first thinking delta was written; want within [0, %v]", name, late, messagesLate)
			}
			// An engine reads the key from Authorization on every route; Anthropic's own API
			// from x-api-key alone.
			bearer := "Bearer " + messagesKey
			if tc.backend == wire.BackendOpenAI {
				bearer = ""
			}
			if hdr.Get("x-api-key") != messagesKey || hdr.Get("anthropic-version") != "2023-06-01" || hdr.Get("Authorization") != bearer {
				t.Errorf("%s: headers x-api-key %q, anthropic-version %q, Authorization %q; want the key, 2023-06-01, %q",
					name, hdr.Get("x-api-key"), hdr.Get("anthropic-version"), hdr.Get("Authorization"), bearer)
			}
			var req struct {
				Model     string `json:"model"`
				MaxTokens int    `json:"max_tokens"`
				Stream    bool   `json:"stream"`
				Messages  []struct {
					Role, Content string
				} `json:"messages"`
			}
			if err := json.Unmarshal(body, &req); err != nil || req.Model != "m" || req.MaxTokens != 64 || !req.Stream ||
				len(req.Messages) != 1 || req.Messages[0].Role != "user" || req.Messages[0].Content != "hi" {
				t.Errorf("%s: body %s (%v)", name, body, err)
			}
		}
		ts.Close()
	}
}

// TestMessagesBadStreams: a bad stream of the Messages API ends as one clear stream_error
// record on either client, and soon (the client's timeout, 5 s, would say timeout): an
// event type the reference does not define, a stream without message_stop, an error event
// (whose message, echoing the key, is scrubbed), a JSON delta cut short. A stream whose
// usage never counts the output has it counted from its text.
func TestMessagesBadStreams(t *testing.T) {
	start := `event: message_start` + "\n" + `data: {"type":"message_start","message":{"usage":{"input_tokens":5,"output_tokens":0}}}` + "\n\n" +
		`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a b"}}` + "\n\n"
	stop := `event: message_stop` + "\n" + `data: {"type":"message_stop"}` + "\n\n"
	for _, tc := range []struct {
		name, body string
		status     results.Status
		errHas     string
	}{
		{"unknown event", start + "event: message_pause\ndata: {\"type\":\"message_pause\"}\n\n" + stop,
			results.StatusStreamError, `event 3: malformed chunk: unknown event type "message_pause"`},
		{"no message_stop", start, results.StatusStreamError, "stream ended before message_stop after 1 output chunks"},
		{"error event", start + "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded for " + messagesKey + "\"}}\n\n",
			results.StatusStreamError, "server error event: "},
		{"error, data only", start + "data: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}\n\n",
			results.StatusStreamError, "server error mid-stream: api_error: boom"},
		{"truncated delta", start + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_de\n\n" + stop,
			results.StatusStreamError, "event 3: malformed chunk: unexpected end of JSON input"},
		{"no output count", start + stop, results.StatusOK, ""},
	} {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, tc.body)
		}))
		base, _ := url.Parse(ts.URL + "/v1")
		for _, hc := range httpClients() {
			c := newTestClient(t, base, func(o *ClientOptions) {
				o.API, o.APIKey, o.HTTPClient = wire.APIMessages, messagesKey, hc
				o.CountTokens = func(s string) int { return len(strings.Fields(s)) }
			})
			res := roundTrip(c, Clock{Start: time.Now()}, "hi", 8)
			if res.Status != tc.status || !strings.Contains(res.Error, tc.errHas) || strings.Contains(res.Error, messagesKey) {
				t.Errorf("%s, %s: %s %q; want %s with %q, without the key", tc.name, hc, res.Status, res.Error, tc.status, tc.errHas)
			}
			if tc.status == results.StatusOK && (res.OutputTokens != 2 || res.OutputTokensSource != results.SourceTokenizer || res.PromptTokensServer != 5) {
				t.Errorf("%s, %s: output %d (%s), prompt %d; want 2 counted from the text, and message_start's 5",
					tc.name, hc, res.OutputTokens, res.OutputTokensSource, res.PromptTokensServer)
			}
		}
		ts.Close()
	}
}

// TestMessagesCheckLength: the preflight's length check reads a Messages API stream (its
// text deltas, message_delta's output_tokens, message_stop) and sends max_tokens alone
// with a backend that would force lengths on chat: a server that honours it passes, one
// that sends more is caught.
func TestMessagesCheckLength(t *testing.T) {
	for _, sent := range []int{4, 9} {
		var body map[string]any
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			json.NewDecoder(r.Body).Decode(&body)
			w.Header().Set("Content-Type", "text/event-stream")
			messagesEvent(w, "message_start", `{"type":"message_start","message":{"usage":{"input_tokens":16,"output_tokens":0}}}`)
			for range sent {
				messagesEvent(w, "content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" w"}}`)
			}
			messagesEvent(w, "message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":%d}}`, sent))
			messagesEvent(w, "message_stop", `{"type":"message_stop"}`)
		}))
		base, _ := url.Parse(ts.URL + "/v1")
		c := newTestClient(t, base, func(o *ClientOptions) { o.API = wire.APIMessages })
		l, err := c.CheckLength(context.Background(), []byte("hi"), 4)
		ts.Close()
		if err != nil || l.Field != "max_tokens" || !l.Finished || l.Chunks != sent || l.CompletionTokens != sent || l.Over() != (sent > 4) {
			t.Errorf("server sending %d: %+v, %v; want max_tokens, finished, %d chunks and tokens, over %v", sent, l, err, sent, sent > 4)
		}
		if _, ok := body["min_tokens"]; ok || body["ignore_eos"] != nil || body["max_tokens"] != float64(4) {
			t.Errorf("length check body %v: want max_tokens 4 alone", body)
		}
	}
}
