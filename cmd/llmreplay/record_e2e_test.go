package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
)

// byteLog keeps the bytes of each response by the request's X-Test-Seq header: on the
// upstream's side as its handler wrote them, on the client's as it read them.
type byteLog struct {
	mu sync.Mutex
	m  map[string]*bytes.Buffer
}

func (l *byteLog) buf(key string) *bytes.Buffer {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]*bytes.Buffer{}
	}
	if l.m[key] == nil {
		l.m[key] = &bytes.Buffer{}
	}
	return l.m[key]
}

func (l *byteLog) get(key string) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.m[key]; b != nil {
		return b.Bytes()
	}
	return nil
}

// teeWriter copies what a handler writes; Flush and Unwrap keep streaming working.
type teeWriter struct {
	http.ResponseWriter
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w teeWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	w.mu.Unlock()
	return w.ResponseWriter.Write(p)
}
func (w teeWriter) Flush()                              { w.ResponseWriter.(http.Flusher).Flush() }
func (w teeWriter) Unwrap() http.ResponseWriter         { return w.ResponseWriter }
func (l *byteLog) upstream(h http.Handler) http.Handler { return http.HandlerFunc(l.serve(h)) }

func (l *byteLog) serve(h http.Handler) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(teeWriter{ResponseWriter: w, mu: &l.mu, buf: l.buf(r.Header.Get("X-Test-Seq"))}, r)
	}
}

// client is an http.RoundTripper that keeps each response's bytes as the client read them.
func (l *byteLog) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, lockedWriter{&l.mu, l.buf(req.Header.Get("X-Test-Seq") + "/client")}), resp.Body}
	return resp, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// recordSession runs `llmreplay record` in front of upstream until stop is called; it
// returns the proxy's base URL.
type recordRun struct {
	dir            string
	stdout, stderr syncBuffer
	stop           func()
	done           chan error
}

func startRecord(t *testing.T, upstream string, extra ...string) (*recordRun, string) {
	t.Helper()
	r := &recordRun{dir: filepath.Join(t.TempDir(), "rec"), done: make(chan error, 1)}
	ctx, stop, abort := replay.WithStop(context.Background())
	r.stop = stop
	t.Cleanup(abort)
	args := append([]string{"record", "--listen", "127.0.0.1:0", "--upstream", upstream, "-o", r.dir, "--progress", "0"}, extra...)
	go func() { r.done <- run(ctx, args, &r.stdout, &r.stderr) }()
	re := regexp.MustCompile(`record: listening on (\S+),`)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if m := re.FindStringSubmatch(r.stderr.String()); m != nil {
			return r, "http://" + m[1]
		}
		select {
		case err := <-r.done:
			t.Fatalf("record stopped: %v\n%s", err, r.stderr.String())
		default:
		}
	}
	t.Fatalf("record never said it listens:\n%s", r.stderr.String())
	return nil, ""
}

func (r *recordRun) finish(t *testing.T) {
	t.Helper()
	r.stop()
	if err := <-r.done; err != nil {
		t.Fatalf("record: %v\n%s", err, r.stderr.String())
	}
}

// recordTraffic is what the test's clients sent: each request's prompt text (to search for),
// in order.
type recordTraffic struct {
	texts []string
	seq   int
}

const recordMarker = "zqxv-PRIVATE-MARKER-7731"
const recordKey = "sk-live-RECORDTESTKEY-0042"

// words returns n words of seeded text, the marker among them.
func words(rng *rand.Rand, n int) string {
	w := tokenize.Words()
	var b strings.Builder
	for i := range n {
		if i == n/2 {
			b.WriteString(recordMarker + " ")
			continue
		}
		b.WriteString(w[rng.IntN(len(w))])
		b.WriteByte(' ')
	}
	return b.String()
}

// TestRecordThroughProxy records a client library's traffic (openai-go: chat completions
// and the Responses API, streamed and not, conversations that resend their history) passed
// through `llmreplay record` to the simulated engine, then checks:
//   - every response reached the client byte for byte as the engine wrote it;
//   - the trace: one row per request in the order sent, prompt and output tokens as the
//     engine counted them, each conversation one session whose turns name the turn before
//     as parent, the API and sampling columns;
//   - the production results: every request ok, with the engine's usage;
//   - privacy: no byte the recorder wrote (files, journals, stdout, stderr) holds the
//     marker, the API key or any 8-token window of a prompt;
//   - the trace replays against a fresh engine due at its arrivals to the nanosecond, with
//     the prompt and output lengths the engine counted, and a prefix-cache hit rate within
//     2 points of production's; compare takes the two for runs of one trace.
func TestRecordThroughProxy(t *testing.T) {
	for _, relay := range []string{"nethttp", "raw"} {
		t.Run(relay, func(t *testing.T) { recordThroughProxy(t, relay) })
	}
}

// recordThroughProxy is TestRecordThroughProxy with one --relay.
func recordThroughProxy(t *testing.T, relay string) {
	cfg, err := sim.Profile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.TimeScale = 20
	eng, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	var bl byteLog
	up := httptest.NewServer(bl.upstream(eng.Handler()))
	defer up.Close()
	rec, base := startRecord(t, up.URL, "--block-tokens", "16", "--relay", relay)

	var tr recordTraffic
	rng := rand.New(rand.NewPCG(7, 7))
	cl := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey(recordKey), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: &bl}))
	ctx := context.Background()
	system := words(rng, 300)
	model := "sim-tiny"
	next := func(text string) option.RequestOption {
		tr.texts = append(tr.texts, text)
		tr.seq++
		return option.WithHeader("X-Test-Seq", fmt.Sprint(tr.seq-1))
	}
	var wants []recordWant
	// Three chat conversations of three turns, their turns interleaved, streamed (with the
	// usage asked for in one of them, counted by the recorder in the others).
	convs := make([][]openai.ChatCompletionMessageParamUnion, 3)
	for turn := range 3 {
		for c := range convs {
			if turn == 0 {
				convs[c] = []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system)}
			}
			user := words(rng, 60+rng.IntN(80))
			convs[c] = append(convs[c], openai.UserMessage(user))
			p := openai.ChatCompletionNewParams{Model: model, Messages: convs[c], MaxTokens: openai.Int(int64(20 + 10*c))}
			if c == 0 {
				p.StreamOptions.IncludeUsage = openai.Bool(true)
			}
			s := cl.Chat.Completions.NewStreaming(ctx, p, next(system+user))
			var acc openai.ChatCompletionAccumulator
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil {
				t.Fatalf("chat conversation %d turn %d: %v", c, turn, err)
			}
			convs[c] = append(convs[c], openai.AssistantMessage(acc.Choices[0].Message.Content))
			wants = append(wants, recordWant{session: c, turn: turn, api: "chat", stream: true})
		}
	}
	// Chat not streamed.
	for range 2 {
		user := words(rng, 50)
		if _, err := cl.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(user)}, MaxTokens: openai.Int(12)}, next(user)); err != nil {
			t.Fatal(err)
		}
		wants = append(wants, recordWant{session: -1, api: "chat"})
	}
	// The Responses API: a conversation that resends its items, streamed, then a request
	// not streamed.
	var items responses.ResponseInputParam
	for turn := range 2 {
		user := words(rng, 70)
		items = append(items, responses.ResponseInputItemParamOfMessage(user, responses.EasyInputMessageRoleUser))
		s := cl.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: model, MaxOutputTokens: openai.Int(16),
			Input: responses.ResponseNewParamsInputUnion{OfInputItemList: items}}, next(user))
		var answer string
		for s.Next() {
			if ev := s.Current(); ev.Type == "response.output_text.delta" {
				answer += ev.Delta
			}
		}
		if err := s.Err(); err != nil {
			t.Fatalf("responses turn %d: %v", turn, err)
		}
		items = append(items, responses.ResponseInputItemParamOfMessage(answer, responses.EasyInputMessageRoleAssistant))
		wants = append(wants, recordWant{session: 10, turn: turn, api: "responses", stream: true})
	}
	user := words(rng, 40)
	if _, err := cl.Responses.New(ctx, responses.ResponseNewParams{Model: model, MaxOutputTokens: openai.Int(16),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(user)}}, next(user)); err != nil {
		t.Fatal(err)
	}
	wants = append(wants, recordWant{session: -1, api: "responses"})

	// The journals, as a recording killed now would leave them, for the privacy check.
	time.Sleep(700 * time.Millisecond) // the recorder flushes its journals every 500 ms
	journals := readDirBytes(t, rec.dir)
	rec.finish(t)

	for i := range tr.seq {
		key := fmt.Sprint(i)
		got, sent := bl.get(key+"/client"), bl.get(key)
		if len(sent) == 0 || !bytes.Equal(got, sent) {
			t.Errorf("request %d: the client read %d bytes through the proxy, the engine wrote %d, not the same", i, len(got), len(sent))
		}
	}
	rows, prod := readRecording(t, rec.dir)
	if len(rows) != len(wants) || len(prod) != len(wants) {
		t.Fatalf("recorded %d trace rows and %d results, want %d", len(rows), len(prod), len(wants))
	}
	checkRecordedRows(t, rows, prod, wants)
	checkRecordPrivacy(t, tr.texts, journals, readDirBytes(t, rec.dir), rec.stdout.String(), rec.stderr.String())
	checkRecordReplays(t, rec.dir, rows, prod)
}

// recordWant is what the test sent as one request: its conversation (-1: a request of
// its own), turn, API and whether it streamed.
type recordWant struct {
	session int // index of the conversation; -1: a request of its own
	turn    int
	api     string
	stream  bool
}

// checkRecordedRows: rows in the order sent, production ok, the API and stream columns,
// and each conversation one session whose turns name the turn before as parent.
func checkRecordedRows(t *testing.T, rows []trace.Request, prod []results.Result, wants []recordWant) {
	t.Helper()
	sessionOf := map[int]int64{}
	for i, w := range wants {
		row, res := rows[i], prod[i]
		if row.ID != int64(i) || res.RequestID != int64(i) {
			t.Fatalf("row %d has request_id %d (results %d): want the order sent", i, row.ID, res.RequestID)
		}
		if res.Status != results.StatusOK {
			t.Errorf("request %d: production status %s %q", i, res.Status, res.Error)
		}
		if row.Params == nil || row.Params.API != w.api || row.Params.Stream != w.stream {
			t.Errorf("request %d: params %+v, want api %s stream %v", i, row.Params, w.api, w.stream)
		}
		if w.session < 0 {
			if row.Call != nil && row.Call.Parents != nil {
				t.Errorf("request %d: a request of its own has parents %v", i, row.Call.Parents)
			}
			continue
		}
		if w.turn == 0 {
			sessionOf[w.session] = row.SessionID
			continue
		}
		if row.SessionID != sessionOf[w.session] {
			t.Errorf("request %d (conversation %d turn %d): session %d, want the first turn's %d", i, w.session, w.turn, row.SessionID, sessionOf[w.session])
		}
		prev := -1
		for j := i - 1; j >= 0; j-- {
			if wants[j].session == w.session && wants[j].turn == w.turn-1 {
				prev = j
				break
			}
		}
		if row.Call == nil || len(row.Call.Parents) != 1 || row.Call.Parents[0] != int64(prev) || row.Call.GapKind != trace.GapUser {
			t.Errorf("request %d (conversation %d turn %d): call %+v, want parent %d after a user gap", i, w.session, w.turn, row.Call, prev)
		}
	}
}

// readDirBytes returns every file under dir, by name.
func readDirBytes(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

// readRecording reads a recording's first trace and results, the results by request id.
func readRecording(t *testing.T, dir string) ([]trace.Request, []results.Result) {
	t.Helper()
	tr, err := trace.Open(filepath.Join(dir, "trace-0001.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var rows []trace.Request
	for tr.Next() {
		rows = append(rows, tr.Request())
	}
	if err := tr.Err(); err != nil {
		t.Fatal(err)
	}
	res, _, err := results.ReadFile(filepath.Join(dir, "results-0001.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	byID := make([]results.Result, len(res))
	for _, r := range res {
		if r.RequestID < 0 || r.RequestID >= int64(len(res)) {
			t.Fatalf("results: request_id %d out of [0, %d)", r.RequestID, len(res))
		}
		byID[r.RequestID] = r
	}
	return rows, byID
}

// checkRecordPrivacy searches every byte the recorder wrote, and the text of every value
// of its files decoded, for the marker, the key and each 8-token window of the prompts.
func checkRecordPrivacy(t *testing.T, texts []string, journals, files map[string][]byte, stdout, stderr string) {
	t.Helper()
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		t.Fatal(err)
	}
	hay := map[string][]byte{"stdout": []byte(stdout), "stderr": []byte(stderr)}
	for name, b := range journals {
		hay["journal "+name] = b
	}
	if len(journals) == 0 {
		t.Error("no journal was on disk while recording: the privacy check of journals checked nothing")
	}
	for name, b := range files {
		hay[name] = b
	}
	// Parquet pages are compressed: the decoded values and metadata are searched too.
	rows, res := readRecordingFrom(t, files)
	hay["decoded trace"] = []byte(fmt.Sprintf("%+v", rows))
	hay["decoded results"] = []byte(fmt.Sprintf("%+v", res))
	needles := []string{recordMarker, recordKey}
	for _, text := range texts {
		ids := enc.Encode(text)
		for i := 0; i+8 <= len(ids); i += 3 {
			needles = append(needles, enc.Decode(ids[i:i+8]))
		}
	}
	for name, b := range hay {
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				t.Errorf("%s holds %q", name, n)
				break
			}
		}
	}
}

// readRecordingFrom decodes the trace and results files among files (by name) as strings
// of their rows and metadata.
func readRecordingFrom(t *testing.T, files map[string][]byte) (string, string) {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rows, res := readRecording(t, dir)
	tr, err := trace.Open(filepath.Join(dir, "trace-0001.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	_, run, err := results.ReadFile(filepath.Join(dir, "results-0001.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%+v %+v", tr.Meta(), rows), fmt.Sprintf("%+v %+v", *run, res)
}

// checkRecordReplays replays the recorded trace against fresh engines and checks it
// against production: independently, every request due at its recorded arrival to the
// nanosecond; as sessions (--sessions dag: each turn on its parent's context, the answer
// included, as production's conversations were), the parents kept, every first turn due at
// its arrival, and production's prefix-cache hit rate within 2 points. Both with the lengths
// the engine counted in production (--calibrate takes the chat template out).
func checkRecordReplays(t *testing.T, dir string, rows []trace.Request, prod []results.Result) {
	t.Helper()
	tr := filepath.Join(dir, "trace-0001.parquet")
	for _, mode := range []string{replay.SessionsIndependent, replay.SessionsDAG} {
		rep := replayRecorded(t, tr, mode)
		var prodCached, prodPrompt, repCached, repPrompt int64
		for _, r := range rep {
			row := rows[r.RequestID]
			if r.Status != results.StatusOK {
				t.Errorf("%s replay of request %d: %s %q", mode, r.RequestID, r.Status, r.Error)
				continue
			}
			first := row.Call == nil || row.Call.Parents == nil
			if (mode == replay.SessionsIndependent || first) && r.ScheduledNS != int64(row.Arrival) {
				t.Errorf("%s: request %d due at %d ns, recorded arrival %d ns", mode, r.RequestID, r.ScheduledNS, int64(row.Arrival))
			}
			if r.PromptTokensServer != row.PromptTokens || r.OutputTokens != row.OutputTokens {
				t.Errorf("%s: request %d: the fresh engine counted %d prompt and %d output tokens, production %d and %d",
					mode, r.RequestID, r.PromptTokensServer, r.OutputTokens, row.PromptTokens, row.OutputTokens)
			}
			if p := prod[r.RequestID]; p.PromptTokensCached != results.Null && r.PromptTokensCached != results.Null {
				prodCached += int64(p.PromptTokensCached)
				prodPrompt += int64(p.PromptTokensServer)
				repCached += int64(r.PromptTokensCached)
				repPrompt += int64(r.PromptTokensServer)
			}
		}
		if prodPrompt == 0 {
			t.Fatalf("%s: no request had a cached-token count in both production and the replay", mode)
		}
		pr, rr := float64(prodCached)/float64(prodPrompt), float64(repCached)/float64(repPrompt)
		t.Logf("%s: prefix-cache hit rate: production %.2f%%, replay %.2f%% (over %d prompt tokens)", mode, 100*pr, 100*rr, prodPrompt)
		if d := pr - rr; mode == replay.SessionsDAG && (d > 0.02 || d < -0.02) {
			t.Errorf("%s: prefix-cache hit rate: replay %.2f%%, production %.2f%%: more than 2 points apart", mode, 100*rr, 100*pr)
		}
	}
}

// replayRecorded replays a recorded trace against a fresh engine in a sessions mode, and
// checks that compare takes production and the replay for runs of one trace.
func replayRecorded(t *testing.T, tr, mode string) []results.Result {
	t.Helper()
	cfg, err := sim.Profile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.TimeScale = 20
	srv, err := sim.Start(context.Background(), "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	out := filepath.Join(t.TempDir(), mode+".parquet")
	var so, se bytes.Buffer
	if err := run(context.Background(), []string{"replay", "--trace", tr, "--endpoint", srv.BaseURL(), "--api", "chat",
		"--sessions", mode, "--calibrate", "--scrape", "none", "-q", "-o", out}, &so, &se); err != nil {
		t.Fatalf("replay --sessions %s: %v\n%s", mode, err, se.String())
	}
	rep, _, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	so.Reset()
	se.Reset()
	prod := filepath.Join(filepath.Dir(tr), "results-0001.parquet")
	if err := run(context.Background(), []string{"compare", prod, out}, &so, &se); err != nil {
		t.Fatalf("compare production and the %s replay: %v\n%s", mode, err, se.String())
	}
	if strings.Contains(so.String(), "DIFFERENT RUNS") {
		t.Errorf("compare takes production and its %s replay for different runs:\n%s", mode, so.String())
	}
	return rep
}

// TestRecordBlockTokensFlag: --block-tokens 0 records without prefix blocks (the server's
// prompt count kept); a negative one is refused.
func TestRecordBlockTokensFlag(t *testing.T) {
	err := run(context.Background(), []string{"record", "--upstream", "http://127.0.0.1:1", "-o", t.TempDir(), "--block-tokens", "-1"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--block-tokens -1 is negative") {
		t.Errorf("--block-tokens -1: %v, want it refused", err)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`+"\n\n"+
			`data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":150,"completion_tokens":1}}`+"\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	rec, base := startRecord(t, up.URL, "--block-tokens", "0")
	words := strings.Repeat("lorem ipsum ", 100)
	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"`+words+`"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	rec.finish(t)
	rows, _ := readRecording(t, rec.dir)
	if len(rows) != 1 || rows[0].PromptTokens != 150 || rows[0].PrefixBlocks != nil {
		t.Errorf("--block-tokens 0: rows %+v, want one of the server's 150 prompt tokens without prefix blocks", rows)
	}
}

// TestRecordRelayFlag: --relay takes nethttp or raw, nothing else.
func TestRecordRelayFlag(t *testing.T) {
	err := run(context.Background(), []string{"record", "--upstream", "http://127.0.0.1:1", "-o", t.TempDir(), "--relay", "fast"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `--relay "fast"`) {
		t.Errorf("--relay fast: %v, want it refused", err)
	}
}
