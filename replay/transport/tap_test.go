package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/wire"
)

// tapStampBase is the stamp of a test's first body piece; piece k is stamped base+k, by
// the Tap as by the client's clock when it read it.
const tapStampBase = 1000

// pieceReader returns a body in the pieces given, one piece (or what is left of it) per
// Read, and stamps each read as the Tap stamps the piece.
type pieceReader struct {
	pieces [][]byte
	i      int
	stamp  int64
}

func (r *pieceReader) Read(p []byte) (int, error) {
	for r.i < len(r.pieces) && len(r.pieces[r.i]) == 0 {
		r.i++
	}
	if r.i == len(r.pieces) {
		return 0, io.EOF
	}
	n := copy(p, r.pieces[r.i])
	r.stamp = tapStampBase + int64(r.i)
	r.pieces[r.i] = r.pieces[r.i][n:]
	return n, nil
}

// tapFixture is a recorded stream of an API.
type tapFixture struct {
	name string
	api  wire.API
	body []byte
}

// tapFixtures are the streams the Tap is held to the client on: wire's recorded fixtures
// of the Messages and Responses APIs, the simulated engine's streams of every API (with
// reasoning), BenchmarkReadStream's vLLM completions stream, and one of each with CRLF
// line ends (the parser's other path).
func tapFixtures(t *testing.T) []tapFixture {
	t.Helper()
	var out []tapFixture
	for _, d := range []struct {
		dir string
		api wire.API
	}{{"messages", wire.APIMessages}, {"responses", wire.APIResponses}} {
		files, _ := filepath.Glob(filepath.Join("..", "..", "wire", "testdata", d.dir, "*.sse"))
		if len(files) == 0 {
			t.Fatalf("no %s fixtures", d.dir)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, tapFixture{d.dir + "/" + filepath.Base(f), d.api, b})
		}
	}
	for api, b := range simBodies(t, true) {
		out = append(out, tapFixture{"sim-" + string(api), api, b})
	}
	out = append(out, tapFixture{"vllm-completions", wire.APICompletions, benchCompletionsStream()})
	n := len(out)
	for _, f := range out[:n] {
		if strings.HasPrefix(f.name, "sim-") {
			out = append(out, tapFixture{f.name + "-crlf", f.api, bytes.ReplaceAll(f.body, []byte("\n"), []byte("\r\n"))})
		}
	}
	return out
}

// simRequest is a request of n tokens in api's shape, streamed or not.
func simRequest(api wire.API, n int, stream bool) (path, body string) {
	switch api {
	case wire.APICompletions:
		return "/v1/completions", fmt.Sprintf(`{"model":"m","prompt":"Hello there","max_tokens":%d,"ignore_eos":true,"stream":%v%s}`,
			n, stream, map[bool]string{true: `,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`}[stream])
	case wire.APIChat:
		return "/v1/chat/completions", fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"Hello there"}],"max_tokens":%d,"ignore_eos":true,"stream":%v%s}`,
			n, stream, map[bool]string{true: `,"stream_options":{"include_usage":true}`}[stream])
	case wire.APIMessages:
		return "/v1/messages", fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"Hello there"}],"max_tokens":%d,"stream":%v}`, n, stream)
	}
	return "/v1/responses", fmt.Sprintf(`{"model":"m","input":"Hello there","max_output_tokens":%d,"stream":%v}`, n, stream)
}

var simOnce struct {
	sync.Mutex
	bodies map[bool]map[wire.API][]byte
}

// simBodies are the simulated engine's answers of 23 tokens, 30% reasoning, to the same
// prompt by every generation API: streamed, or not.
func simBodies(t *testing.T, stream bool) map[wire.API][]byte {
	t.Helper()
	simOnce.Lock()
	defer simOnce.Unlock()
	if simOnce.bodies != nil {
		return simOnce.bodies[stream]
	}
	cfg, err := sim.Profile("fixed")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Model, cfg.FixedTTFT, cfg.FixedITL = "m", time.Millisecond, 100*time.Microsecond
	cfg.ReasoningShare, cfg.ReasoningUsage = 0.3, true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := sim.Start(ctx, "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base := strings.TrimSuffix(srv.BaseURL(), "/v1")
	all := map[bool]map[wire.API][]byte{true: {}, false: {}}
	for _, s := range []bool{true, false} {
		for _, api := range []wire.API{wire.APICompletions, wire.APIChat, wire.APIMessages, wire.APIResponses} {
			path, body := simRequest(api, 23, s)
			resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("%s stream %v: %d %v %s", path, s, resp.StatusCode, err, b)
			}
			all[s][api] = b
		}
	}
	simOnce.bodies = all
	return all[stream]
}

// benchCompletionsStream is BenchmarkReadStream's stream: 100 vLLM completions chunks
// with continuous usage, a usage chunk, [DONE].
func benchCompletionsStream() []byte { return completionsStream(100) }

// completionsStream is a vLLM completions stream of n chunks with continuous usage, a
// usage chunk, [DONE].
func completionsStream(n int) []byte {
	var body bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&body, "data: {\"id\":\"cmpl-8c3f1e2a\",\"object\":\"text_completion\",\"created\":1733140000,\"model\":\"sim-fixed\",\"choices\":[{\"index\":0,\"text\":\" the\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":{\"prompt_tokens\":100,\"total_tokens\":%d,\"completion_tokens\":%d}}\n\n", 100+i, i)
	}
	fmt.Fprintf(&body, "data: {\"id\":\"cmpl-8c3f1e2a\",\"object\":\"text_completion\",\"created\":1733140000,\"model\":\"sim-fixed\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"total_tokens\":%d,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", 100+n, n)
	return body.Bytes()
}

// tapClient is a client of api that counts a token a word when countWords.
func tapClient(t testing.TB, api wire.API, countWords bool) *Client {
	t.Helper()
	enc, err := wire.NewEncoder(api, wire.BackendVLLM, false)
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{enc: enc, opts: ClientOptions{API: api, MaxLine: DefaultMaxLine}}
	if countWords {
		c.opts.CountTokens = func(s string) int { return len(strings.Fields(s)) }
	}
	return c
}

// clientRecord is what the client's pull side records reading body in pieces.
func clientRecord(c *Client, pieces [][]byte, target int32) *results.Result {
	res := results.NewResult(1, 0, 0, 100, target)
	res.SentNS, res.HTTPStatus = 0, 200
	pr := &pieceReader{pieces: append([][]byte(nil), pieces...)}
	sse := NewSSEReader(pr, func() int64 { return pr.stamp }, 4<<10, c.opts.MaxLine)
	ctx := context.Background()
	c.readStream(ctx, ctx, sse, res, nil)
	return res
}

// tapRecord is what a Tap records of a 200 event stream passing in pieces, ended by endErr.
func tapRecord(c *Client, pieces [][]byte, target int32, o TapOptions, endErr error) *results.Result {
	res := results.NewResult(1, 0, 0, 100, target)
	res.SentNS = 0
	tp := c.NewTap(res, o)
	tp.Head(200, http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}, tapStampBase-1)
	for k, p := range pieces {
		tp.Body(p, tapStampBase+int64(k))
	}
	tp.End(endErr, tapStampBase+int64(len(pieces)))
	return res
}

// splits are ways to cut body into the pieces a proxy may read: in two at every
// stride-th byte boundary, a byte a piece, and at random points.
func splits(body []byte, rng *rand.Rand, stride int) [][][]byte {
	var out [][][]byte
	for i := 1; i < len(body); i += stride {
		out = append(out, [][]byte{body[:i], body[i:]})
	}
	var bytewise [][]byte
	for i := range body {
		bytewise = append(bytewise, body[i:i+1])
	}
	out = append(out, bytewise)
	for range 20 {
		var ps [][]byte
		for rest := body; len(rest) > 0; {
			n := min(len(rest), 1+rng.IntN(300))
			ps, rest = append(ps, rest[:n]), rest[n:]
		}
		out = append(out, ps)
	}
	return out
}

// TestTapMatchesClient: for every API's recorded streams, cut at every byte boundary, a
// byte a piece and at random points, the Tap's record equals the client's reading the
// same pieces at the same stamps, field by field, with and without a tokenizer. (Some 120
// boundaries spread over each stream, where every one of the ~100,000 took the race
// detector's run to 40 s; TestTapEveryBoundary cuts one stream of each API everywhere.)
func TestTapMatchesClient(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 1))
	for _, f := range tapFixtures(t) {
		for _, words := range []bool{false, true} {
			c := tapClient(t, f.api, words)
			if whole := clientRecord(c, [][]byte{f.body}, 1000); len(whole.ChunkNS) == 0 {
				t.Fatalf("%s: the client records %s %q and no chunk: not a fixture to compare on", f.name, whole.Status, whole.Error)
			}
			stride := max(1, len(f.body)/120)
			if words {
				stride = len(f.body) // the tokenizer's use does not depend on the cut
			}
			for _, ps := range splits(f.body, rng, stride) {
				want := clientRecord(c, ps, 1000)
				got := tapRecord(c, ps, 1000, TapOptions{Stream: true}, nil)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s (tokenizer %v), %d pieces:\n got %+v\nwant %+v", f.name, words, len(ps), got, want)
				}
			}
		}
	}
}

// TestTapMatchesClientOverHTTP: the client reading a test server's response (net/http,
// its clock stopped) and a Tap fed the same response record the same, for streams, HTTP
// errors (JSON, text, compressed), a compressed stream and an answer that is not a stream.
func TestTapMatchesClientOverHTTP(t *testing.T) {
	type answer struct {
		name, ctype, cenc string
		status            int
		body              []byte
	}
	cases := []answer{
		{"error-json", "application/json", "", 400, []byte(`{"object":"error","message":"max_tokens is too large","type":"BadRequestError","code":400}`)},
		{"error-text", "text/plain", "", 503, []byte("upstream overloaded, try later")},
		{"error-gzip", "application/json", "gzip", 500, []byte("\x1f\x8b\x08\x00")},
		{"stream-gzip", "text/event-stream", "gzip", 200, []byte("\x1f\x8b\x08\x00")},
		{"not-a-stream", "application/json", "", 200, []byte(`{"choices":[]}`)},
	}
	for _, f := range tapFixtures(t) {
		cases = append(cases, answer{f.name, "text/event-stream", "", 200, f.body})
	}
	var cur answer
	srv := newTapServer(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", cur.ctype)
		if cur.cenc != "" {
			w.Header().Set("Content-Encoding", cur.cenc)
		}
		w.WriteHeader(cur.status)
		for rest := cur.body; len(rest) > 0; { // in pieces, as a server streams
			n := min(len(rest), 97)
			w.Write(rest[:n])
			w.(http.Flusher).Flush()
			rest = rest[n:]
		}
	})
	for _, a := range cases {
		cur = a
		api := wire.APIChat
		for _, f := range tapFixtures(t) {
			if f.name == a.name {
				api = f.api
			}
		}
		// net/http with its clock stopped, so that the stamps are equal; and the raw
		// client where it serves (Linux), whose stamps are the kernel's: its record is
		// compared with the stamps left out.
		for _, client := range []string{HTTPClientNetHTTP, HTTPClientAuto} {
			c, err := NewClient(ClientOptions{BaseURL: mustURL(t, srv), API: api, Backend: wire.BackendVLLM, Model: "m", HTTPClient: client,
				CountTokens: func(s string) int { return len(strings.Fields(s)) }})
			if err != nil {
				t.Fatal(err)
			}
			if client == HTTPClientAuto && c.raw == nil {
				continue
			}
			want := results.NewResult(1, 0, 0, 100, 1000)
			sse := NewSSEReader(nil, func() int64 { return 7 }, 0, 0)
			req := &Request{Body: []byte("{}")}
			c.Transport().Prepare(req, false)
			c.Transport().RoundTrip(context.Background(), Clock{Start: time.Now()}, req, want, sse, nil, nil)
			c.Close()
			got := results.NewResult(1, 0, 0, 100, 1000)
			got.SentNS = want.SentNS
			tp := c.NewTap(got, TapOptions{Stream: true})
			h := http.Header{"Content-Type": {a.ctype}}
			if a.cenc != "" {
				h.Set("Content-Encoding", a.cenc)
			}
			tp.Head(a.status, h, 7)
			tp.Body(a.body, 7)
			tp.End(nil, 7)
			if client != HTTPClientNetHTTP {
				got, want = stampless(got), stampless(want)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s, %s client:\n got %+v\nwant %+v", a.name, c.HTTPClientName(), got, want)
			}
		}
	}
}

// stampless is r with every stamp set to 0 where it is not null, the chunks' too.
func stampless(r *results.Result) *results.Result {
	x := *r
	for _, p := range []*int64{&x.FirstTokenNS, &x.FirstAnswerNS, &x.EndNS} {
		if *p != results.Null {
			*p = 0
		}
	}
	x.ChunkNS = make([]int64, len(r.ChunkNS))
	return &x
}

// TestTapNeverCuts: where the replayer fails a stream (more chunks than max_tokens
// allows, a malformed chunk, a line over the cap), the Tap records the same failure, and
// then looks at nothing more: later bytes change nothing, and its parser's buffers are
// gone.
func TestTapNeverCuts(t *testing.T) {
	chunk := func(text string) string {
		return `data: {"object":"text_completion","choices":[{"index":0,"text":"` + text + `","finish_reason":null}]}` + "\n\n"
	}
	many := strings.Repeat(chunk(" a"), maxOutputChunks(4)+1)
	cases := map[string]string{
		"too many chunks": many,
		"malformed chunk": chunk(" a") + "data: {\"choices\":[{\"text\":\n\n",
		"line over cap":   chunk(" a") + "data: " + strings.Repeat("x", 2048),
	}
	for name, body := range cases {
		c := tapClient(t, wire.APICompletions, true)
		c.opts.MaxLine = 1024
		pieces := [][]byte{[]byte(body)}
		want := clientRecord(c, pieces, 4)
		if want.Status != results.StatusStreamError {
			t.Fatalf("%s: the client records %s: not a failing stream", name, want.Status)
		}
		res := results.NewResult(1, 0, 0, 100, 4)
		res.SentNS = 0
		tp := c.NewTap(res, TapOptions{Stream: true})
		tp.Head(200, http.Header{"Content-Type": {"text/event-stream"}}, tapStampBase-1)
		tp.Body([]byte(body), tapStampBase)
		if tp.sse != nil {
			t.Errorf("%s: the parser is kept after the stream failed", name)
		}
		before := *res
		before.ChunkNS = append([]int64(nil), res.ChunkNS...)
		tp.Body([]byte(chunk(" later")+strings.Repeat("y", 4096)), tapStampBase+1)
		tp.Body([]byte("data: [DONE]\n\n"), tapStampBase+2)
		if !reflect.DeepEqual(*res, before) {
			t.Errorf("%s: bytes after the failure changed the record:\n got %+v\nwant %+v", name, *res, before)
		}
		tp.End(nil, tapStampBase+3)
		if !reflect.DeepEqual(res, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, res, want)
		}
	}
}

// TestTapNoMaxTokens: a request that sent no max_tokens (target 0) has no chunk cap from
// it: its 200 chunks are recorded whole, where the replayer's cap for a target of 0
// would cut them. A request of n choices has n times one choice's cap.
func TestTapNoMaxTokens(t *testing.T) {
	var body strings.Builder
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&body, "data: {\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":%d}}\n\n", i)
	}
	body.WriteString("data: {\"object\":\"text_completion\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":200}}\n\ndata: [DONE]\n\n")
	c := tapClient(t, wire.APICompletions, false)
	pieces := [][]byte{[]byte(body.String())}
	if r := clientRecord(c, pieces, 0); r.Status != results.StatusStreamError {
		t.Fatalf("the replayer's cap for target 0 does not cut 200 chunks (%s): the test shows nothing", r.Status)
	}
	res := tapRecord(c, pieces, 0, TapOptions{Stream: true}, nil)
	if res.Status != results.StatusOK || len(res.ChunkNS) != 200 || res.OutputTokens != 200 || res.OutputTokensTarget != 0 {
		t.Errorf("%s %q: %d chunks, %d tokens, target %d; want ok, 200, 200, 0", res.Status, res.Error, len(res.ChunkNS), res.OutputTokens, res.OutputTokensTarget)
	}
	// n choices of max_tokens each: n times the chunks one choice may have. 200 chunks
	// are over the cap of 50 tokens (116 chunks) and under that of 4 choices of 50.
	if res = tapRecord(c, pieces, 50, TapOptions{Stream: true}, nil); res.Status != results.StatusStreamError {
		t.Errorf("200 chunks for max_tokens 50: %s, want stream_error", res.Status)
	}
	if res = tapRecord(c, pieces, 50, TapOptions{Stream: true, N: 4}, nil); res.Status != results.StatusOK || len(res.ChunkNS) != 200 {
		t.Errorf("200 chunks for 4 choices of 50 tokens: %s %q, %d chunks; want ok, 200", res.Status, res.Error, len(res.ChunkNS))
	}
}

// newTapServer serves every request with serve.
func newTapServer(t *testing.T, serve func(http.ResponseWriter)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		serve(w)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// tapMarker stands for prompt text a server echoes in an error.
const tapMarker = "PROMPT-MARKER-7f3a"

// TestTapPrivate: with Private, no error of the record carries a byte of a body: an error
// event's message, a chunk's error, a malformed chunk, an HTTP error's body, an answer's
// error or bad JSON, all holding the marker. Without it the same errors quote the
// body (the test can fail).
func TestTapPrivate(t *testing.T) {
	ok := `data: {"object":"text_completion","choices":[{"index":0,"text":" a","finish_reason":null}]}` + "\n\n"
	type tc struct {
		api    wire.API
		status int
		ctype  string
		stream bool
		body   string
		want   string // the private error
	}
	cases := map[string]tc{
		"error event":     {wire.APICompletions, 200, "text/event-stream", true, ok + "event: error\ndata: {\"message\":\"" + tapMarker + "\"}\n\n", "server error event"},
		"chunk error":     {wire.APICompletions, 200, "text/event-stream", true, ok + "data: {\"error\":{\"message\":\"bad " + tapMarker + "\"}}\n\n", "server error mid-stream"},
		"malformed chunk": {wire.APICompletions, 200, "text/event-stream", true, ok + "data: {\"choices\":[{\"text\":\"" + tapMarker + "\n\n", "event 2: malformed chunk"},
		"unknown event":   {wire.APIResponses, 200, "text/event-stream", true, "event: x\ndata: {\"type\":\"" + tapMarker + "\"}\n\n", "event 1: malformed chunk"},
		"http error":      {wire.APIChat, 400, "application/json", true, `{"error":{"message":"prompt ` + tapMarker + ` too long"}}`, "HTTP 400"},
		"http error text": {wire.APIChat, 500, "text/plain", false, tapMarker, "HTTP 500"},
		"answer error":    {wire.APIChat, 200, "application/json", false, `{"error":{"message":"` + tapMarker + `"}}`, "server error in the answer"},
		"answer not JSON": {wire.APIChat, 200, "application/json", false, `{"choices":[` + tapMarker, "answer is not a generation's JSON"},
		"unary error":     {wire.APIEmbeddings, 200, "application/json", false, `{"error":"` + tapMarker + `"}`, "server error in the answer"},
		"unary not JSON":  {wire.APIEmbeddings, 200, "application/json", false, `{"data":[` + tapMarker, "answer is not JSON"},
	}
	for name, c := range cases {
		for _, private := range []bool{true, false} {
			res := results.NewResult(1, 0, 0, 100, 50)
			tp := tapClient(t, c.api, true).NewTap(res, TapOptions{Stream: c.stream, Private: private})
			tp.Head(c.status, http.Header{"Content-Type": {c.ctype}}, 1)
			for i := range c.body { // a byte a piece: no whole event at once
				tp.Body([]byte(c.body[i:i+1]), 2)
			}
			tp.End(nil, 3)
			switch {
			case res.Status == results.StatusOK:
				t.Errorf("%s: ok", name)
			case private && res.Error != c.want:
				t.Errorf("%s: private error %q, want %q", name, res.Error, c.want)
			case !private && !strings.HasPrefix(res.Error, c.want+": "):
				// Not private, the same error quotes the body (the marker, or a byte of
				// it where a JSON error names the byte): the private case shows that.
				t.Errorf("%s: error %q does not quote the body: the private case shows nothing", name, res.Error)
			}
		}
	}
}

// TestTapEnd: a body cut by an error (the upstream's reset, the client gone) is a
// stream_error saying after how many chunks and what; before a response head it is a
// transport_error; after the stream's end marker it changes nothing; a clean end without
// the marker is what the replayer says of it.
func TestTapEnd(t *testing.T) {
	c := tapClient(t, wire.APICompletions, false)
	body := benchCompletionsStream()
	cut := bytes.Index(body, []byte("data:")[:5])
	for range 3 { // after three events
		cut += bytes.Index(body[cut+1:], []byte("data:")) + 1
	}
	reset := errors.New("upstream: read: connection reset by peer")
	res := tapRecord(c, [][]byte{body[:cut]}, 1000, TapOptions{Stream: true}, reset)
	if want := "stream broken after 3 output chunks: " + reset.Error(); res.Status != results.StatusStreamError || res.Error != want {
		t.Errorf("cut: %s %q, want stream_error %q", res.Status, res.Error, want)
	}
	if res = tapRecord(c, [][]byte{body}, 1000, TapOptions{Stream: true}, reset); res.Status != results.StatusOK || len(res.ChunkNS) != 100 {
		t.Errorf("cut after [DONE]: %s %q, %d chunks; want ok, 100", res.Status, res.Error, len(res.ChunkNS))
	}
	want := clientRecord(c, [][]byte{body[:cut]}, 1000)
	if res = tapRecord(c, [][]byte{body[:cut]}, 1000, TapOptions{Stream: true}, nil); !reflect.DeepEqual(res, want) || res.Status == results.StatusOK {
		t.Errorf("clean end before [DONE]:\n got %+v\nwant %+v", res, want)
	}
	res = results.NewResult(1, 0, 0, 100, 1000)
	tp := c.NewTap(res, TapOptions{Stream: true})
	tp.End(reset, 5)
	if res.Status != results.StatusTransportError || res.Error != reset.Error() || res.HTTPStatus != results.Null {
		t.Errorf("before a head: %s %q HTTP %d, want transport_error %q", res.Status, res.Error, res.HTTPStatus, reset)
	}
}

// TestTapTextCap: a stream without usage whose text outgrows the cap kept for counting
// has no output count (null), where a count of part of its text would be wrong; below
// the cap the text is counted.
func TestTapTextCap(t *testing.T) {
	word := strings.Repeat("x", 1023) + " "
	stream := func(chunks int) []byte {
		var b bytes.Buffer
		for range chunks {
			fmt.Fprintf(&b, "data: {\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":%q,\"finish_reason\":null}]}\n\n", word)
		}
		b.WriteString("data: [DONE]\n\n")
		return b.Bytes()
	}
	c := tapClient(t, wire.APICompletions, true)
	under := tapRecord(c, [][]byte{stream(tapTextCap / len(word) / 2)}, 0, TapOptions{Stream: true}, nil)
	if under.OutputTokens != int32(tapTextCap/len(word)/2) || under.OutputTokensSource != results.SourceTokenizer {
		t.Errorf("under the cap: %d tokens (%q), want %d counted", under.OutputTokens, under.OutputTokensSource, tapTextCap/len(word)/2)
	}
	over := tapRecord(c, [][]byte{stream(tapTextCap/len(word) + 1)}, 0, TapOptions{Stream: true}, nil)
	if over.Status != results.StatusOK || over.OutputTokens != results.Null || over.OutputTokensSource != "" {
		t.Errorf("over the cap: %s, %d tokens (%q), want ok and null", over.Status, over.OutputTokens, over.OutputTokensSource)
	}
	// A reasoning stream: its reasoning is counted from the text kept, and has no count
	// past the cap either.
	var b bytes.Buffer
	n := tapTextCap/len(word)/2 + 1
	for range n {
		fmt.Fprintf(&b, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":%q},\"finish_reason\":null}]}\n\n", word)
	}
	b.WriteString("data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"done\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	res := tapRecord(tapClient(t, wire.APIChat, true), [][]byte{b.Bytes()}, 0, TapOptions{Stream: true}, nil)
	if res.Status != results.StatusOK || res.ReasoningTokens != results.Null || res.OutputTokens != results.Null {
		t.Errorf("reasoning over the cap: %s, %d reasoning tokens (%q), %d output; want ok and null", res.Status, res.ReasoningTokens, res.ReasoningTokensSource, res.OutputTokens)
	}
	small := bytes.Repeat(b.Bytes()[:bytes.Index(b.Bytes(), []byte("\n\n"))+2], 3)
	small = append(small, b.Bytes()[bytes.LastIndex(b.Bytes(), []byte("data: {")):]...)
	if res = tapRecord(tapClient(t, wire.APIChat, true), [][]byte{small}, 0, TapOptions{Stream: true}, nil); res.ReasoningTokens != 3 {
		t.Errorf("reasoning under the cap: %d reasoning tokens (%q), want 3 counted", res.ReasoningTokens, res.ReasoningTokensSource)
	}
}

// answerRecord is what a Tap records of a 200 JSON answer of api passing in pieces.
func answerRecord(c *Client, pieces [][]byte, endErr error) *results.Result {
	res := results.NewResult(1, 0, 0, 100, 1000)
	res.SentNS = 0
	tp := c.NewTap(res, TapOptions{})
	tp.Head(200, http.Header{"Content-Type": {"application/json"}}, tapStampBase-1)
	for k, p := range pieces {
		tp.Body(p, tapStampBase+int64(k))
	}
	tp.End(endErr, tapStampBase+int64(len(pieces))+5)
	return res
}

// TestTapAnswers: the simulated engine's answer that was not streamed, by every
// generation API, is recorded with the same counts as its stream of the same request
// (the usage's, else the text counted), its first token and end at the body's last byte,
// no chunks; cut anywhere, it records the same; without usage its text is counted.
func TestTapAnswers(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 2))
	streams := simBodies(t, true)
	for api, body := range simBodies(t, false) {
		c := tapClient(t, api, true)
		st := tapRecord(c, [][]byte{streams[api]}, 1000, TapOptions{Stream: true}, nil)
		if st.Status != results.StatusOK {
			t.Fatalf("%s: the stream records %s %q", api, st.Status, st.Error)
		}
		for _, ps := range splits(body, rng, max(1, len(body)/200)) {
			res := answerRecord(c, ps, nil)
			last := tapStampBase + int64(len(ps)) - 1
			if res.Status != results.StatusOK || res.HTTPStatus != 200 || len(res.ChunkNS) != 0 || res.ChunkTokens != nil ||
				res.FirstTokenNS != last || res.EndNS != last || res.FirstAnswerNS != last {
				t.Fatalf("%s, %d pieces: %s %q HTTP %d, %d chunks, first token %d, first answer %d, end %d; want ok, no chunks, all at %d",
					api, len(ps), res.Status, res.Error, res.HTTPStatus, len(res.ChunkNS), res.FirstTokenNS, res.FirstAnswerNS, res.EndNS, last)
			}
			got := [...]any{res.OutputTokens, res.OutputTokensSource, res.PromptTokensServer, res.PromptTokensCached, res.ReasoningTokens, res.ReasoningTokensSource}
			want := [...]any{st.OutputTokens, st.OutputTokensSource, st.PromptTokensServer, st.PromptTokensCached, st.ReasoningTokens, st.ReasoningTokensSource}
			if got != want {
				t.Fatalf("%s, %d pieces: output, source, prompt, cached, reasoning, source %v; the stream's %v", api, len(ps), got, want)
			}
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		delete(m, "usage")
		noUsage, _ := json.Marshal(m)
		res := answerRecord(c, [][]byte{noUsage}, nil)
		if res.OutputTokens != st.OutputTokens || res.OutputTokensSource != results.SourceTokenizer || res.PromptTokensServer != results.Null {
			t.Errorf("%s without usage: %d tokens (%s), prompt %d; want %d counted, prompt null", api, res.OutputTokens, res.OutputTokensSource, res.PromptTokensServer, st.OutputTokens)
		}
	}
}

// TestTapAnswerLimits: an answer cut by an error says after how many bytes; one over the
// cap is recorded as not read, and its bytes are not kept.
func TestTapAnswerLimits(t *testing.T) {
	c := tapClient(t, wire.APIChat, true)
	body := simBodies(t, false)[wire.APIChat]
	res := answerRecord(c, [][]byte{body[:40]}, errors.New("client: write: broken pipe"))
	if want := "answer broken after 40 bytes: client: write: broken pipe"; res.Status != results.StatusStreamError || res.Error != want {
		t.Errorf("cut: %s %q, want stream_error %q", res.Status, res.Error, want)
	}
	res = results.NewResult(1, 0, 0, 100, 1000)
	tp := c.NewTap(res, TapOptions{})
	tp.Head(200, http.Header{"Content-Type": {"application/json"}}, 1)
	piece := bytes.Repeat([]byte(" "), 1<<20)
	for range tapAnswerCap>>20 + 1 {
		tp.Body(piece, 2)
	}
	if tp.body != nil {
		t.Errorf("%d bytes kept past the cap", len(tp.body))
	}
	tp.End(nil, 3)
	if res.Status != results.StatusStreamError || !strings.Contains(res.Error, "not read") {
		t.Errorf("over the cap: %s %q, want stream_error, not read", res.Status, res.Error)
	}
}

// TestTapUnary: an embeddings answer goes through the replayer's unary path; a recording,
// which does not know how many inputs the request sent (Inputs null), does not hold the
// answer's count against it.
func TestTapUnary(t *testing.T) {
	c := tapClient(t, wire.APIEmbeddings, false)
	body := []byte(`{"object":"list","data":[{"object":"embedding","embedding":[0.1,0.2],"index":0},{"object":"embedding","embedding":[0.3,0.4],"index":1}],"model":"m","usage":{"prompt_tokens":12,"total_tokens":12}}`)
	for _, inputs := range []int32{results.Null, 2, 3} {
		res := results.NewResult(1, 0, 0, 100, 0)
		res.Inputs = inputs
		tp := c.NewTap(res, TapOptions{})
		tp.Head(200, http.Header{"Content-Type": {"application/json"}}, 1)
		tp.Body(body[:50], 2)
		tp.Body(body[50:], 3)
		tp.End(nil, 4)
		wantOK := inputs != 3
		if (res.Status == results.StatusOK) != wantOK || res.PromptTokensServer != 12 || res.EndNS != 3 {
			t.Errorf("inputs %d: %s %q, prompt %d, end %d; want ok %v, 12, 3", inputs, res.Status, res.Error, res.PromptTokensServer, res.EndNS, wantOK)
		}
	}
}

// BenchmarkTap: the Tap's cost per streamed chunk (BenchmarkReadStream's stream of 100
// chunks), beside the client's own BenchmarkReadStream: "events" hands it an event a
// Body call, as a proxy reads a streaming engine's; "1KiB" in pieces of 1 KiB cut
// anywhere (the buffered path), as it reads a burst.
func BenchmarkTap(b *testing.B) {
	raw := benchCompletionsStream()
	var events, kib [][]byte
	for rest := raw; len(rest) > 0; {
		i := bytes.Index(rest, []byte("\n\n")) + 2
		events, rest = append(events, rest[:i]), rest[i:]
	}
	for rest := raw; len(rest) > 0; {
		n := min(len(rest), 1024)
		kib, rest = append(kib, rest[:n]), rest[n:]
	}
	for _, bc := range []struct {
		name   string
		pieces [][]byte
	}{{"events", events}, {"1KiB", kib}} {
		b.Run(bc.name, func(b *testing.B) { benchTap(b, raw, bc.pieces) })
	}
}

func benchTap(b *testing.B, raw []byte, pieces [][]byte) {
	c := &Client{}
	h := http.Header{"Content-Type": {"text/event-stream"}}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res := results.NewResult(1, 0, 0, 100, 100)
		res.SentNS = 0
		tp := c.NewTap(res, TapOptions{Stream: true})
		tp.Head(200, h, 1)
		for _, p := range pieces {
			tp.Body(p, 2)
		}
		tp.End(nil, 3)
		if res.Status != results.StatusOK || len(res.ChunkNS) != 100 || res.OutputTokens != 100 {
			b.Fatalf("%s %s %d chunks, %d tokens", res.Status, res.Error, len(res.ChunkNS), res.OutputTokens)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/chunk")
}

// TestTapEveryBoundary: short streams of the typed and the OpenAI shapes (Anthropic's
// recorded one; vLLM's completions stream of 4 tokens, with CRLF line ends) cut in two at
// every byte boundary, recorded by the Tap as by the client.
func TestTapEveryBoundary(t *testing.T) {
	anthropic, err := os.ReadFile(filepath.Join("..", "..", "wire", "testdata", "messages", "anthropic-basic.sse"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []tapFixture{
		{"anthropic-basic", wire.APIMessages, anthropic},
		{"vllm-crlf", wire.APICompletions, bytes.ReplaceAll(completionsStream(4), []byte("\n"), []byte("\r\n"))},
	} {
		c := tapClient(t, f.api, false)
		for i := 1; i < len(f.body); i++ {
			ps := [][]byte{f.body[:i], f.body[i:]}
			want := clientRecord(c, ps, 1000)
			if got := tapRecord(c, ps, 1000, TapOptions{Stream: true}, nil); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s cut at %d:\n got %+v\nwant %+v", f.name, i, got, want)
			}
		}
	}
}

// FuzzTap: any body, cut anywhere in up to three pieces, is recorded by the Tap as the
// client's pull side reads it, by each API's decoder, with and without a tokenizer; and
// the Tap leaves the bytes it is handed as they were.
func FuzzTap(f *testing.F) {
	f.Add(uint8(0), uint16(5), uint16(9), completionsStream(2))
	f.Add(uint8(2), uint16(40), uint16(41), []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
	f.Add(uint8(5), uint16(1), uint16(70), []byte("event: response.output_text.delta\r\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\r\n\r\n: ping\r\n\r\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\r\n\r\n"))
	apis := []wire.API{wire.APICompletions, wire.APIChat, wire.APIMessages, wire.APIResponses}
	f.Fuzz(func(t *testing.T, which uint8, cut1, cut2 uint16, body []byte) {
		api := apis[int(which)%len(apis)]
		c := tapClient(t, api, which&4 != 0)
		i, j := min(int(cut1), len(body)), min(int(cut2), len(body))
		if i > j {
			i, j = j, i
		}
		ps := [][]byte{body[:i], body[i:j], body[j:]}
		orig := bytes.Clone(body)
		want := clientRecord(c, ps, 8)
		got := tapRecord(c, ps, 8, TapOptions{Stream: true}, nil)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s, cut at %d and %d:\n got %+v\nwant %+v", api, i, j, got, want)
		}
		if !bytes.Equal(body, orig) {
			t.Fatal("the Tap changed the bytes it was handed")
		}
	})
}

// TestTapResponseID: a Responses API response's id, which a later request names as its
// previous_response_id, is taken from each engine's stream (its response.created event)
// and from an answer that was not streamed; another API's is "".
func TestTapResponseID(t *testing.T) {
	want := map[string]string{}
	for _, f := range tapFixtures(t) {
		if f.api != wire.APIResponses || strings.HasSuffix(f.name, "-crlf") {
			continue
		}
		var ev struct {
			Response struct{ ID string } `json:"response"`
		}
		first := bytes.SplitN(bytes.SplitN(f.body, []byte("data: "), 2)[1], []byte("\n"), 2)[0]
		if err := json.Unmarshal(first, &ev); err != nil || !strings.HasPrefix(ev.Response.ID, "resp_") {
			t.Fatalf("%s: first event %s: %v", f.name, first, err)
		}
		want[f.name] = ev.Response.ID
		res := results.NewResult(1, 0, 0, 100, 1000)
		tp := tapClient(t, f.api, false).NewTap(res, TapOptions{Stream: true})
		tp.Head(200, http.Header{"Content-Type": {"text/event-stream"}}, 1)
		tp.Body(f.body, 2)
		tp.End(nil, 3)
		if got := tp.ResponseID(); got != ev.Response.ID {
			t.Errorf("%s: response id %q, want %q", f.name, got, ev.Response.ID)
		}
	}
	if len(want) != 6 {
		t.Errorf("%d Responses streams, want wire's 5 and the sim's", len(want))
	}
	for api, body := range simBodies(t, false) {
		tp := tapClient(t, api, false).NewTap(results.NewResult(1, 0, 0, 100, 1000), TapOptions{})
		tp.Head(200, http.Header{"Content-Type": {"application/json"}}, 1)
		tp.Body(body, 2)
		tp.End(nil, 3)
		var a struct{ ID string }
		json.Unmarshal(body, &a)
		if api != wire.APIResponses {
			a.ID = ""
		}
		if got := tp.ResponseID(); got != a.ID || api == wire.APIResponses && !strings.HasPrefix(got, "resp_") {
			t.Errorf("%s answer: response id %q, want %q", api, got, a.ID)
		}
	}
}
