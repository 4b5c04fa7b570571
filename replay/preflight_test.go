package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/scrape"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

func TestDefaultOutputName(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 30, 5, 999e6, time.FixedZone("CET", 3600))
	if got := DefaultOutputName(at, trace.Shard{Index: 0, Count: 1}); got != "results-20261203T093005Z.parquet" {
		t.Errorf("single run: %s", got)
	}
	if got := DefaultOutputName(at, trace.Shard{Index: 2, Count: 4}); got != "results-20261203T093005Z.shard-2.parquet" {
		t.Errorf("shard 2/4: %s", got)
	}
	dir := t.TempDir()
	name := filepath.Join(dir, "results-x.parquet")
	if got := uniqueOutput(name); got != name {
		t.Errorf("free name changed: %s", got)
	}
	touch(t, name)
	touch(t, filepath.Join(dir, "results-x-2.parquet.journal"))
	if got := uniqueOutput(name); got != filepath.Join(dir, "results-x-3.parquet") {
		t.Errorf("taken name and journal: %s", got)
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckOutput(t *testing.T) {
	dir := t.TempDir()
	free := filepath.Join(dir, "new.parquet")
	if err := CheckOutput(free, false); err != nil {
		t.Fatalf("a new file in a writable folder: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the check left %d files behind", len(ents))
	}
	folder := filepath.Join(dir, "out.parquet")
	os.Mkdir(folder, 0o755)
	existing := filepath.Join(dir, "old.parquet")
	touch(t, existing)
	unfinished := filepath.Join(dir, "crashed.parquet")
	touch(t, unfinished+results.JournalSuffix)
	withMetrics := filepath.Join(dir, "m.parquet")
	touch(t, results.MetricsPath(withMetrics))
	notDir := filepath.Join(existing, "x.parquet")
	for _, c := range []struct {
		path  string
		force bool
		want  string // "" = accepted
	}{
		{folder, false, "is a folder; name a file"},
		{folder, true, "is a folder"},
		{existing, false, "file exists"},
		{existing, true, ""},
		{unfinished, false, "llmreplay recover " + unfinished + results.JournalSuffix},
		{unfinished, true, ""},
		{withMetrics, false, "metrics file"},
		{filepath.Join(dir, "no-such-dir", "r.parquet"), false, "no such file or directory"},
		{notDir, false, "not a directory"},
	} {
		err := CheckOutput(c.path, c.force)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s force=%v: %v", c.path, c.force, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !IsConfigError(err) || !strings.HasPrefix(err.Error(), "-o "+c.path)):
			t.Errorf("%s force=%v: got %v, want a *ConfigError starting -o PATH and containing %q", c.path, c.force, err, c.want)
		}
	}
	if _, err := os.Stat(existing); err != nil {
		t.Errorf("the check removed the existing file: %v", err)
	}
}

// TestPrepareChecksOutputBeforeTraffic: a bad -o (a folder, an existing file, a folder that
// does not exist) stops Prepare before any request reaches the endpoint.
func TestPrepareChecksOutputBeforeTraffic(t *testing.T) {
	var hits atomic.Int64
	u := vllmtest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte(`{"data":[{"id":"m"}]}`))
	}))
	dir := t.TempDir()
	existing := filepath.Join(dir, "old.parquet")
	touch(t, existing)
	for _, out := range []string{dir, existing, filepath.Join(dir, "nope", "r.parquet")} {
		cfg := DefaultConfig()
		cfg.Endpoint, cfg.Output, cfg.Limit = u.String(), out, 3
		_, err := Prepare(context.Background(), cfg, Env{})
		if !IsConfigError(err) {
			t.Errorf("-o %s: %v, want a configuration error", out, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the endpoint saw %d requests before the output was refused", n)
	}
}

// TestPrepareDefaultOutput: with no -o the results go to a new results-<UTC>.parquet in the
// current folder, never to an existing file's name.
func TestPrepareDefaultOutput(t *testing.T) {
	u := vllmtest.Start(t, &vllmtest.Server{})
	t.Chdir(t.TempDir())
	cfg := DefaultConfig()
	cfg.Endpoint, cfg.Limit, cfg.Quiet = u.String(), 3, true
	sess, err := Prepare(context.Background(), cfg, Env{})
	if err != nil {
		t.Fatal(err)
	}
	first := sess.Output
	if !regexp.MustCompile(`^results-\d{8}T\d{6}Z\.parquet$`).MatchString(first) || sess.Options.Output != first {
		t.Fatalf("default output %q (options %q)", first, sess.Options.Output)
	}
	if _, err := Run(context.Background(), sess.Options); err != nil {
		t.Fatal(err)
	}
	sess.Close()
	sess, err = Prepare(context.Background(), cfg, Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if sess.Output == first {
		t.Errorf("a second run in the same folder was given the first run's file %s", first)
	}
}

// TestPrepareEndpointMustAnswer: with --model given (no discovery), an endpoint where nothing
// listens, or one that refuses the credentials, stops the run before it starts, with the
// reason and without the key.
func TestPrepareEndpointMustAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	out := filepath.Join(t.TempDir(), "r.parquet")
	cfg := DefaultConfig()
	cfg.Endpoint, cfg.Model, cfg.Output = closed, "m", out
	_, err = Prepare(context.Background(), cfg, Env{})
	if err == nil || !strings.Contains(err.Error(), "does not answer") || !strings.Contains(err.Error(), "no request was sent") {
		t.Errorf("nothing listening: %v", err)
	}

	u := vllmtest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad key", http.StatusUnauthorized)
	}))
	cfg.Endpoint, cfg.APIKey = u.String(), "sk-Secret-123"
	_, err = Prepare(context.Background(), cfg, Env{})
	if err == nil || !strings.Contains(err.Error(), "--api-key") || strings.Contains(err.Error(), "sk-Secret-123") {
		t.Errorf("401: %v", err)
	}
	if _, err := os.Stat(out + results.JournalSuffix); err == nil {
		t.Error("a journal was created for a run that never started")
	}
}

// TestRunKeepsJournalWhenResultsCannotBeWritten: when the final rename fails (here the
// results path became a folder during the run), the error names the journal and the exact
// recover command, the journal is kept, and recover turns it into every record.
func TestRunKeepsJournalWhenResultsCannotBeWritten(t *testing.T) {
	u := vllmtest.Start(t, &vllmtest.Server{})
	c := newTestClient(t, u, nil)
	out := filepath.Join(t.TempDir(), "r.parquet")
	if err := os.Mkdir(out, 0o755); err != nil { // Run itself does no preflight: Prepare does
		t.Fatal(err)
	}
	o := Options{Source: trace.NewSliceSource(uniformTrace(4, time.Millisecond, 4, 3)), Client: c, Prompter: wordPrompter,
		Speedup: 1, Output: out, Grace: time.Second}
	_, err := Run(context.Background(), o)
	j := out + results.JournalSuffix
	if err == nil || !strings.Contains(err.Error(), "llmreplay recover "+j+" -o "+out) {
		t.Fatalf("Run: %v, want the recover command", err)
	}
	fixed := filepath.Join(filepath.Dir(out), "fixed.parquet")
	if _, err := results.ConvertJournal(j, fixed); err != nil {
		t.Fatalf("the journal was not kept whole: %v", err)
	}
	res, _, err := results.ReadFile(fixed)
	if err != nil || len(res) != 4 {
		t.Fatalf("recovered %d records, err %v", len(res), err)
	}
}

// TestPrepareWarnsWhenTheDiskIsShort: with less free space than the estimate, Prepare says so
// (and goes on); with enough, it says nothing.
func TestPrepareWarnsWhenTheDiskIsShort(t *testing.T) {
	u := vllmtest.Start(t, &vllmtest.Server{})
	defer func(f func(string) (uint64, bool)) { diskFree = f }(diskFree)
	for _, c := range []struct {
		free uint64
		warn bool
	}{{4 << 10, true}, {1 << 40, false}} {
		diskFree = func(string) (uint64, bool) { return c.free, true }
		cfg := DefaultConfig()
		cfg.Endpoint, cfg.Output = u.String(), filepath.Join(t.TempDir(), "r.parquet")
		var log strings.Builder
		sess, err := Prepare(context.Background(), cfg, Env{Log: &log})
		if err != nil {
			t.Fatal(err)
		}
		sess.Close()
		// The bundled sample: 523 requests; the estimate is 2·523·(160 + 12·mean output).
		if got := strings.Contains(log.String(), "may need up to") && strings.Contains(log.String(), "523 requests"); got != c.warn {
			t.Errorf("free %d bytes: warned %v, want %v:\n%s", c.free, got, c.warn, log.String())
		}
	}
	if got := estimateBytes(1000, 100); got != 2*1000*(160+1200) {
		t.Errorf("estimateBytes(1000, 100) = %d", got)
	}
}

// ollamaLike answers as Ollama's OpenAI layer does where the length check looks: it
// honours max_tokens alone (max_completion_tokens, min_tokens and ignore_eos are
// ignored), its model stops on its own after eos tokens (0: never, as the tiny test
// model), and with no limit it streams until the client hangs up. status, when set, is
// the answer to every POST, with a message that echoes the Authorization header. The
// requests of the trace (every POST but the preflight's) are counted in trace.
type ollamaLike struct {
	eos    int
	status int
	trace  atomic.Int64
	checks atomic.Int64
}

func (s *ollamaLike) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"tiny"}]}`)
		return
	}
	if r.Header.Get(transport.RequestIDHeader) == wire.PreflightRequestID {
		s.checks.Add(1)
	} else {
		s.trace.Add(1)
	}
	if s.status != 0 {
		w.WriteHeader(s.status)
		fmt.Fprintf(w, `{"error":{"message":"model not found (%s)"}}`, r.Header.Get("Authorization"))
		return
	}
	var b struct {
		MaxTokens *int `json:"max_tokens"`
	}
	json.NewDecoder(r.Body).Decode(&b)
	chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
	responses := strings.HasSuffix(r.URL.Path, "/responses") // as a server that ignores max_output_tokens
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	n := 0
	for ; (b.MaxTokens == nil || n < *b.MaxTokens) && (s.eos == 0 || n < s.eos) && r.Context().Err() == nil; n++ {
		if responses {
			fmt.Fprint(w, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\" w\"}\n\n")
		} else if chat {
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" w\"},\"finish_reason\":null}]}\n\n")
		} else {
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" w\",\"finish_reason\":null}]}\n\n")
		}
		f.Flush()
	}
	if responses {
		fmt.Fprintf(w, "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":17,\"output_tokens\":%d}}}\n\n", n)
		return
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":17,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", n, 17+n)
}

// TestPrepareChecksOutputLength: before the first request of the trace, one short request
// checks that the server honours the backend's length field. A server that ignores
// max_completion_tokens (--backend openai --api chat, against Ollama) stops the run with
// the field, what came back and what to do; with --backend vllm (max_tokens) the same
// server runs, the trace's requests and nothing else reaching it beside the one check. A
// model that stops before the length with a backend that forces it is said on the log,
// and not with one that does not (through the Responses API, vLLM's ignore_eos forces it,
// SGLang's nothing); an error status stops the run with the server's message, without
// the key.
func TestPrepareChecksOutputLength(t *testing.T) {
	for _, tc := range []struct {
		name           string
		api, backend   string
		eos, status    int
		errHas, logHas []string
	}{
		{name: "ignored", api: "chat", backend: "openai",
			errHas: []string{"does not honour max_completion_tokens", "a preflight request for 4 output tokens (max_completion_tokens with --api chat --backend openai, model tiny)",
				"got 32 output chunks and the server was still sending", "give --backend vllm, which sends max_tokens", "none was sent"}},
		{name: "ignored, ends on its own", api: "chat", backend: "openai", eos: 9,
			errHas: []string{"got 9 output tokens (usage.completion_tokens; 9 output chunks)"}},
		{name: "honoured", api: "chat", backend: "vllm"},
		{name: "honoured completions", api: "completions", backend: "openai"},
		{name: "stops early, forced", api: "completions", backend: "vllm", eos: 2,
			logHas: []string{"max_tokens, min_tokens and ignore_eos with --api completions --backend vllm", "got 2: this server does not honour ignore_eos or min_tokens, so output lengths are upper bounds"}},
		{name: "stops early, not forced", api: "chat", backend: "tgi", eos: 2},
		{name: "responses, ignored", api: "responses", backend: "vllm",
			errHas: []string{"does not honour max_output_tokens", "(max_output_tokens and ignore_eos with --api responses --backend vllm, model tiny)", "give --api chat"}},
		{name: "responses, stops early, forced", api: "responses", backend: "vllm", eos: 2,
			logHas: []string{"got 2: this server does not honour ignore_eos, so output lengths are upper bounds"}},
		{name: "responses, stops early, not forced", api: "responses", backend: "sglang", eos: 2},
		{name: "error", api: "chat", backend: "vllm", status: http.StatusNotFound,
			errHas: []string{"failed a preflight request", "HTTP 404: model not found (Bearer [redacted])"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &ollamaLike{eos: tc.eos, status: tc.status}
			u := vllmtest.Start(t, srv)
			reqs := uniformTrace(3, time.Millisecond, 8, 4)
			cfg := DefaultConfig()
			cfg.Endpoint, cfg.Trace, cfg.API, cfg.Backend, cfg.Model, cfg.APIKey = u.String(), writeTrace(t, reqs), tc.api, tc.backend, "tiny", "sk-Secret-123"
			cfg.Output, cfg.Quiet, cfg.Prewarm, cfg.Scrape = filepath.Join(t.TempDir(), "r.parquet"), true, 1, []string{scrape.None}
			var log strings.Builder
			sess, err := Prepare(context.Background(), cfg, Env{Log: &log, ToolVersion: "test"})
			if srv.checks.Load() != 1 {
				t.Errorf("%d length checks, want 1", srv.checks.Load())
			}
			if len(tc.errHas) > 0 {
				if err == nil {
					sess.Close()
					t.Fatalf("Prepare passed, want an error with %q", tc.errHas)
				}
				for _, want := range tc.errHas {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q\nwant %q", err, want)
					}
				}
				if strings.Contains(err.Error(), "sk-Secret-123") || srv.trace.Load() != 0 {
					t.Errorf("the error holds the key, or %d requests of the trace were sent", srv.trace.Load())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			for _, want := range tc.logHas {
				if !strings.Contains(log.String(), want) {
					t.Errorf("log %q\nwant %q", log.String(), want)
				}
			}
			if len(tc.logHas) == 0 && strings.Contains(log.String(), "preflight") {
				t.Errorf("log %q: a notice for a server that did as asked", log.String())
			}
			if _, err := Run(context.Background(), sess.Options); err != nil {
				t.Fatal(err)
			}
			if srv.trace.Load() != 3 || srv.checks.Load() != 1 {
				t.Errorf("the server saw %d requests of the trace and %d checks, want 3 and 1", srv.trace.Load(), srv.checks.Load())
			}
		})
	}
}
