package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/scrape"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// seenRequest is what the recording server saw of one request.
type seenRequest struct {
	requestID, session string
	hasSession         bool
	model              string
}

// recorder serves like vllmtest.Server and records each request's routing headers and model.
type recorder struct {
	srv     vllmtest.Server
	session string   // the session header's name to record
	models  []string // served by /v1/models; nil: vllmtest.Server's
	mu      sync.Mutex
	seen    []seenRequest // the trace's requests
	// preflight are the preflight's length checks (X-Request-Id wire.PreflightRequestID):
	// not the trace's, so not in seen.
	preflight []seenRequest
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" && rc.models != nil {
		var data []map[string]string
		for _, m := range rc.models {
			data = append(data, map[string]string{"id": m, "object": "model"})
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
		return
	}
	if r.URL.Path != "/v1/models" {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var b struct {
			Model string `json:"model"`
		}
		json.Unmarshal(body, &b)
		s := seenRequest{requestID: strings.Join(r.Header.Values(transport.RequestIDHeader), "|"), model: b.Model}
		if rc.session != "" {
			vs := r.Header.Values(rc.session)
			s.session, s.hasSession = strings.Join(vs, "|"), len(vs) > 0
		}
		rc.mu.Lock()
		if s.requestID == wire.PreflightRequestID {
			rc.preflight = append(rc.preflight, s)
		} else {
			rc.seen = append(rc.seen, s)
		}
		rc.mu.Unlock()
	}
	rc.srv.ServeHTTP(w, r)
}

// routedTrace returns n requests every gap: every third has no session, the others are in
// sessions of two; models cycle through "a", "b" and none.
func routedTrace(n int, gap time.Duration) []trace.Request {
	reqs := uniformTrace(n, gap, 4, 2)
	for i := range reqs {
		if i%3 != 2 {
			reqs[i].SessionID, reqs[i].HasSession = int64(7000+i/2), true
		}
		reqs[i].Model = []string{"a", "b", ""}[i%3]
	}
	return reqs
}

// TestRoutingHeaders: with either client, in the open loop (the run id known before the
// preparer starts, or only once the look-ahead is prepared, or for part of the requests)
// and in the closed loop, every request carries X-Request-Id: RUNID-REQUESTID as the
// results file has them, the session header exactly when the trace has a session, with
// its id, and the model Options.Models maps its trace model to (the client's otherwise).
func TestRoutingHeaders(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Options)
	}{
		{"id after look-ahead", nil},
		{"id known at start", func(o *Options) { o.Start = time.Now().Add(20 * time.Millisecond) }},
		{"id known midway", func(o *Options) { o.LookAhead = 3 }},
		{"closed loop", func(o *Options) { o.Speedup, o.Concurrency, o.LookAhead = 0, 2, 3 }},
	}
	for _, hc := range []string{transport.HTTPClientRaw, transport.HTTPClientNetHTTP} {
		for _, tc := range cases {
			t.Run(hc+"/"+tc.name, func(t *testing.T) {
				rec := &recorder{srv: vllmtest.Server{TTFT: time.Millisecond, ITL: time.Millisecond}, session: DefaultSessionHeader}
				c := newTestClient(t, vllmtest.Start(t, rec), func(o *transport.ClientOptions) {
					o.HTTPClient, o.SessionHeader = hc, DefaultSessionHeader
				})
				reqs := routedTrace(12, 2*time.Millisecond)
				_, res, meta := runTrace(t, context.Background(), c, reqs, func(o *Options) {
					o.Models = map[string]string{"a": "served-a"}
					o.Meta.TraceSHA256 = "abc"
					if tc.mod != nil {
						tc.mod(o)
					}
				})
				if len(meta.RunID) != transport.RunIDLen {
					t.Fatalf("run id %q", meta.RunID)
				}
				checkRouted(t, rec, reqs, res, meta.RunID, true)
			})
		}
	}
}

// checkRouted checks what rec saw against the trace and the results.
func checkRouted(t *testing.T, rec *recorder, reqs []trace.Request, res []results.Result, runID string, mapped bool) {
	t.Helper()
	if len(res) != len(reqs) || len(rec.seen) != len(reqs) {
		t.Fatalf("%d results, %d requests seen, want %d", len(res), len(rec.seen), len(reqs))
	}
	byID := map[string]seenRequest{}
	for _, s := range rec.seen {
		byID[s.requestID] = s
	}
	for _, r := range res {
		if r.Status != results.StatusOK {
			t.Errorf("request %d: %s %s", r.RequestID, r.Status, r.Error)
		}
		s, ok := byID[fmt.Sprintf("%s-%d", runID, r.RequestID)]
		if !ok {
			t.Errorf("request %d: no request seen with X-Request-Id %s-%d (seen %v)", r.RequestID, runID, r.RequestID, rec.seen)
			continue
		}
		tr := reqs[r.RequestID-100]
		if want := strconv.FormatInt(tr.SessionID, 10); s.hasSession != tr.HasSession || (tr.HasSession && s.session != want) {
			t.Errorf("request %d: session header %v %q, trace session %v %d", r.RequestID, s.hasSession, s.session, tr.HasSession, tr.SessionID)
		}
		want := "m"
		if mapped && tr.Model == "a" {
			want = "served-a"
		}
		if s.model != want {
			t.Errorf("request %d (trace model %q): model %q, want %q", r.RequestID, tr.Model, s.model, want)
		}
	}
}

// TestNoSessionHeader: SessionHeader "" sends no session header; X-Request-Id still goes.
func TestNoSessionHeader(t *testing.T) {
	for _, hc := range []string{transport.HTTPClientRaw, transport.HTTPClientNetHTTP} {
		rec := &recorder{srv: vllmtest.Server{TTFT: time.Millisecond, ITL: time.Millisecond}, session: DefaultSessionHeader}
		c := newTestClient(t, vllmtest.Start(t, rec), func(o *transport.ClientOptions) { o.HTTPClient = hc })
		_, res, meta := runTrace(t, context.Background(), c, routedTrace(6, time.Millisecond), nil)
		for _, s := range rec.seen {
			if s.hasSession {
				t.Errorf("%s: session header sent: %q", hc, s.session)
			}
		}
		if len(res) != 6 || len(rec.seen) != 6 {
			t.Fatalf("%s: %d results, %d seen", hc, len(res), len(rec.seen))
		}
		for i, s := range rec.seen {
			if !strings.HasPrefix(s.requestID, meta.RunID+"-") {
				t.Errorf("%s: request %d: X-Request-Id %q, want %s-ID", hc, i, s.requestID, meta.RunID)
			}
		}
	}
}

// TestRunIDLen: the raw client's heads reserve runIDLen bytes for the run id.
func TestRunIDLen(t *testing.T) {
	for _, n := range []int{1, 4} {
		if id := results.RunID(time.Now().UnixNano(), "abc", n); len(id) != transport.RunIDLen || transport.RunIDLen != len(transport.RunIDPlaceholder) {
			t.Errorf("RunID %q: length %d, runIDLen %d", id, len(id), transport.RunIDLen)
		}
	}
}

// modelServer lists served models and records each request's routing like recorder.
func modelServer(served ...string) *recorder {
	rec := &recorder{srv: vllmtest.Server{TTFT: time.Millisecond, ITL: time.Millisecond}, session: DefaultSessionHeader}
	return rec.withModels(served)
}

func (rc *recorder) withModels(served []string) *recorder {
	rc.models = served
	return rc
}

// writeTrace writes reqs to a trace file.
func writeTrace(t *testing.T, reqs []trace.Request) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.parquet")
	w, err := trace.Create(path, trace.Meta{Source: "synth"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPrepareModels: Prepare's choice of each request's model (--model-map, the model
// column as is when all of it is served, else --model with a notice) reaches the wire,
// with either client; bad --model-map values are config errors naming the flag, before any
// request is sent.
func TestPrepareModels(t *testing.T) {
	type tc struct {
		name     string
		served   []string
		trace    []string // models of the trace's requests, in a cycle
		model    string   // --model
		modelMap string
		want     []string // model sent per trace model, in the same cycle
		notice   string
		errHas   string
	}
	cases := []tc{
		{name: "all served", served: []string{"base", "lora-1", "lora-2"}, trace: []string{"lora-1", "lora-2", ""},
			want: []string{"lora-1", "lora-2", "base"}, notice: "each request goes to its trace model (2 models, all served"},
		{name: "one unserved", served: []string{"base", "lora-1"}, trace: []string{"lora-1", "gpt-4", ""},
			want: []string{"base", "base", "base"}, notice: `model column is not used ("gpt-4" not served`},
		{name: "explicit --model", served: []string{"base", "lora-1"}, trace: []string{"lora-1", ""}, model: "lora-1",
			want: []string{"lora-1", "lora-1"}, notice: "--model lora-1: every request goes to it"},
		{name: "no model column", served: []string{"base", "lora-1"}, trace: []string{""},
			want: []string{"base"}},
		{name: "mapped", served: []string{"base", "lora-1", "lora-2"}, trace: []string{"gpt-4", "gpt-3.5", ""},
			modelMap: "gpt-4=lora-2, gpt-3.5=lora-1,unused=base", want: []string{"lora-2", "lora-1", "base"},
			notice: "the trace's 2 models are sent as --model-map maps them"},
		{name: "mapped to unserved", served: []string{"base", "lora-1"}, trace: []string{"gpt-4"},
			modelMap: "gpt-4=lora-9", errHas: `--model-map gpt-4=lora-9: ` /* + endpoint */},
		{name: "unmapped", served: []string{"base", "lora-1"}, trace: []string{"gpt-4", "gpt-3.5"},
			modelMap: "gpt-4=lora-1", errHas: `--model-map: no mapping for the trace's "gpt-3.5" (2 requests)`},
		{name: "map without a column", served: []string{"base"}, trace: []string{""},
			modelMap: "gpt-4=base", errHas: "--model-map: the trace has no model column"},
		// Ollama lists "tiny:latest" and accepts "tiny": the column and the map name it
		// either way, and the request carries the listed name.
		{name: "column without the listed tag", served: []string{"tiny:latest"}, trace: []string{"tiny", ""},
			want: []string{"tiny:latest", "tiny:latest"}, notice: "each request goes to its trace model (1 models, all served"},
		{name: "column with a tag the list drops", served: []string{"base", "tiny"}, trace: []string{"tiny:latest", ""},
			want: []string{"tiny", "base"}, notice: "each request goes to its trace model (1 models, all served"},
		{name: "column with another tag", served: []string{"tiny:latest"}, trace: []string{"tiny:q4", ""},
			want: []string{"tiny:latest", "tiny:latest"}, notice: `model column is not used ("tiny:q4" not served`},
		{name: "mapped without the listed tag", served: []string{"base", "tiny:latest"}, trace: []string{"gpt-4", ""},
			modelMap: "gpt-4=tiny", want: []string{"tiny:latest", "base"}, notice: "the trace's 1 models are sent as --model-map maps them"},
		{name: "mapped to another tag", served: []string{"tiny:latest"}, trace: []string{"gpt-4"},
			modelMap: "gpt-4=tiny:q4", errHas: `--model-map gpt-4=tiny:q4: `},
		{name: "malformed", served: []string{"base"}, trace: []string{"gpt-4"},
			modelMap: "gpt-4:base", errHas: `--model-map "gpt-4:base": want TRACE=SERVED`},
	}
	for _, hc := range []string{transport.HTTPClientRaw, transport.HTTPClientNetHTTP} {
		for _, c := range cases {
			t.Run(hc+"/"+c.name, func(t *testing.T) {
				rec := modelServer(c.served...)
				u := vllmtest.Start(t, rec)
				reqs := uniformTrace(2*len(c.trace), time.Millisecond, 4, 2)
				for i := range reqs {
					reqs[i].Model = c.trace[i%len(c.trace)]
				}
				cfg := DefaultConfig()
				cfg.Endpoint, cfg.Trace, cfg.HTTPClient = u.String(), writeTrace(t, reqs), hc
				cfg.Model, cfg.ModelMap = c.model, c.modelMap
				cfg.Output, cfg.Quiet, cfg.Prewarm = filepath.Join(t.TempDir(), "r.parquet"), true, 1
				cfg.Scrape = []string{scrape.None} // the server counts every request it sees
				var log bytes.Buffer
				sess, err := Prepare(context.Background(), cfg, Env{Log: &log, ToolVersion: "test"})
				if c.errHas != "" {
					if err == nil || !IsConfigError(err) || !strings.Contains(err.Error(), c.errHas) {
						t.Fatalf("Prepare: %v, want a config error with %q", err, c.errHas)
					}
					rec.mu.Lock()
					defer rec.mu.Unlock()
					if len(rec.seen) != 0 {
						t.Errorf("%d requests sent before the error", len(rec.seen))
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer sess.Close()
				if c.notice == "" && strings.Contains(log.String(), "model") {
					t.Errorf("unexpected notice %q", log.String())
				}
				if !strings.Contains(log.String(), c.notice) || strings.Count(log.String(), "\n") > 1 {
					t.Errorf("notice %q, want one line with %q", log.String(), c.notice)
				}
				if _, err := Run(context.Background(), sess.Options); err != nil {
					t.Fatal(err)
				}
				res, _, err := results.ReadFile(cfg.Output)
				if err != nil {
					t.Fatal(err)
				}
				if len(res) != len(reqs) || len(rec.seen) != len(reqs) {
					t.Fatalf("%d results, %d seen, want %d", len(res), len(rec.seen), len(reqs))
				}
				// The preflight's one request goes to the run's model: --model, else the
				// first served.
				if want := cmp.Or(c.model, c.served[0]); len(rec.preflight) != 1 || rec.preflight[0].model != want {
					t.Errorf("preflight requests %+v, want one to %s", rec.preflight, want)
				}
				got := map[string]string{}
				for _, s := range rec.seen {
					id, _ := strconv.Atoi(s.requestID[strings.LastIndexByte(s.requestID, '-')+1:])
					got[reqs[id-100].Model] = s.model
				}
				for i, m := range c.trace {
					if got[m] != c.want[i] {
						t.Errorf("trace model %q sent as %q, want %q", m, got[m], c.want[i])
					}
				}
			})
		}
	}
}

// TestRouteFlagErrors: bad --session-header and --header values are config errors naming
// the flag, found by Config.Validate (before anything is opened or sent).
func TestRouteFlagErrors(t *testing.T) {
	cases := []struct {
		mod    func(*Config)
		errHas string
	}{
		{func(c *Config) { c.SessionHeader = "X Session" }, `--session-header "X Session": not a valid HTTP header name`},
		{func(c *Config) { c.SessionHeader = "x-request-id" }, `--session-header "x-request-id": llmreplay sets X-Request-Id itself`},
		{func(c *Config) { c.SessionHeader = "Content-Length" }, "llmreplay sets Content-Length itself"},
		{func(c *Config) { c.Headers = []string{"X-Request-Id: mine"} }, "--header X-Request-Id: llmreplay sends X-Request-Id"},
		{func(c *Config) { c.Headers = []string{"x-session-id: s"} }, "--header X-Session-Id: it is the session header"},
		{func(c *Config) { c.ModelMap = "a=b,a=c" }, `--model-map: "a" is mapped twice`},
		{func(c *Config) { c.ModelMap = "a=" }, `--model-map "a=": want TRACE=SERVED`},
	}
	for _, tc := range cases {
		cfg := DefaultConfig()
		tc.mod(&cfg)
		if err := cfg.Validate(); err == nil || !IsConfigError(err) || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("Validate: %v, want a config error with %q", err, tc.errHas)
		}
	}
	cfg := DefaultConfig()
	cfg.SessionHeader, cfg.Headers = "", []string{"X-Session-ID: s"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("--session-header '' with --header X-Session-ID: %v", err)
	}
}

// BenchmarkRequestHead: the raw client's per-request head as the preparer builds it, with
// none of the routing headers (the bytes the head had before them), with X-Request-Id,
// with the session header too, and built before the run id is known then completed at
// dispatch (dispatcher.withRunID: one copy over the placeholder).
func BenchmarkRequestHead(b *testing.B) {
	if !transport.RawBuilt {
		b.Skip("the raw client is built for linux only")
	}
	u, _ := wire.BaseURL("http://127.0.0.1:8000/v1")
	c, err := transport.NewClient(transport.ClientOptions{BaseURL: u, API: wire.APICompletions, Backend: wire.BackendVLLM, Model: "m",
		HTTPClient: transport.HTTPClientRaw, MaxInflight: 64, SessionHeader: DefaultSessionHeader})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	t := c.Transport()
	body := make([]byte, 4567)
	r := &dispatcher{runID: "48ab9150de323e0d"}
	for _, bc := range []struct {
		name               string
		runID              string
		session, unknownID bool
	}{{"none", "", false, false}, {"request-id", r.runID, false, false}, {"request-id+session", r.runID, true, false}, {"placeholder+dispatch", "", false, true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				req := &request{Request: transport.Request{ID: int64(1_000_000 + i), RunID: bc.runID, Session: int64(i), HasSession: bc.session, Body: body}}
				t.Prepare(&req.Request, bc.unknownID)
				if bc.unknownID {
					r.withRunID(req)
				}
			}
		})
	}
}

// BenchmarkTraceModels: Prepare's pass over a trace's model column (the whole reader, every
// column), per row, on 100,000 rows of 4 models with prefix blocks.
func BenchmarkTraceModels(b *testing.B) {
	path := filepath.Join(b.TempDir(), "t.parquet")
	w, err := trace.Create(path, trace.Meta{Source: "synth", BlockTokens: 16})
	if err != nil {
		b.Fatal(err)
	}
	const n = 100_000
	for i := range n {
		r := trace.Request{ID: int64(i), Arrival: time.Duration(i) * time.Millisecond, PromptTokens: 512, OutputTokens: 100,
			Model: []string{"a", "b", "c", "d"}[i%4], SessionID: int64(i / 3), HasSession: true, PrefixBlocks: []int64{1, 2, int64(i)}}
		if err := w.Write(r); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		src, err := trace.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		counts, _, err := traceModels(src, 0)
		src.Close()
		if err != nil || len(counts) != 4 {
			b.Fatal(err, counts)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/row")
}

// TestPrepareSessionHeader: --session-header reaches the wire through Prepare, with the
// run id of a run whose start is given (--start-at: every head built with the id).
func TestPrepareSessionHeader(t *testing.T) {
	rec := &recorder{srv: vllmtest.Server{TTFT: time.Millisecond, ITL: time.Millisecond}, session: "X-Affinity"}
	u := vllmtest.Start(t, rec)
	reqs := routedTrace(6, time.Millisecond)
	for i := range reqs {
		reqs[i].Model = ""
	}
	cfg := DefaultConfig()
	cfg.Endpoint, cfg.Trace, cfg.Model, cfg.SessionHeader = u.String(), writeTrace(t, reqs), "m", "X-Affinity"
	cfg.StartAt = strconv.FormatFloat(float64(time.Now().Add(300*time.Millisecond).UnixNano())/1e9, 'f', 6, 64)
	cfg.Output, cfg.Quiet, cfg.Prewarm = filepath.Join(t.TempDir(), "r.parquet"), true, 1
	cfg.Scrape = []string{scrape.None} // the server counts every request it sees
	sess, err := Prepare(context.Background(), cfg, Env{ToolVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if _, err := Run(context.Background(), sess.Options); err != nil {
		t.Fatal(err)
	}
	res, meta, err := results.ReadFile(cfg.Output)
	if err != nil {
		t.Fatal(err)
	}
	checkRouted(t, rec, reqs, res, meta.RunID, false)
}
