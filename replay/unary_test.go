package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/duckdbtest"
	"github.com/llmreplay/llmreplay/internal/vllmtest"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/scrape"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

func TestSplitTokens(t *testing.T) {
	for _, tc := range []struct {
		total, n int
		want     []int
	}{
		{10, 3, []int{4, 3, 3}}, {9, 3, []int{3, 3, 3}}, {3, 3, []int{1, 1, 1}}, {11, 4, []int{3, 3, 3, 2}}, {5, 1, []int{5}},
	} {
		if got, err := SplitTokens(nil, tc.total, tc.n); err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("SplitTokens(%d, %d) = %v, %v; want %v", tc.total, tc.n, got, err, tc.want)
		}
	}
	if _, err := SplitTokens(nil, 2, 3); err == nil {
		t.Error("2 tokens made 3 inputs")
	}
}

// unaryServer answers embeddings and rerank requests as the references shape them (OpenAI's
// embeddings list with base64 embeddings; vLLM's RerankResponse), after decoding each body
// to the reference's request and counting its inputs' tokens with the run's encoding. Its
// usage counts those tokens plus one a input, as an engine that puts a BOS before each
// does (Ollama's tiny model does).
type unaryServer struct {
	enc    *tokenize.Encoding
	mu     sync.Mutex
	bodies map[int64]unaryBody // by request id (X-Request-Id: RUNID-ID)
}

// unaryBody is one request as the server read it: its inputs' token counts (rerank: the
// query's first), and the fields it carried.
type unaryBody struct {
	lens   []int
	fields []string
	format string
}

func (s *unaryServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
		return
	}
	var raw map[string]json.RawMessage
	var b struct {
		Model     string   `json:"model"`
		Input     []string `json:"input"`
		Format    string   `json:"encoding_format"`
		Query     *string  `json:"query"`
		Documents []string `json:"documents"`
	}
	if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, 400)
		return
	}
	all, _ := json.Marshal(raw)
	json.Unmarshal(all, &b)
	var got unaryBody
	for k := range raw {
		got.fields = append(got.fields, k)
	}
	slices.Sort(got.fields)
	texts := b.Input
	if r.URL.Path == "/v1/rerank" && b.Query != nil {
		texts = append([]string{*b.Query}, b.Documents...)
	}
	total := 0
	for _, in := range texts {
		n := s.enc.Count(in)
		got.lens = append(got.lens, n)
		total += n + 1
	}
	got.format = b.Format
	id, _ := strconv.ParseInt(r.Header.Get("X-Request-Id")[strings.LastIndexByte(r.Header.Get("X-Request-Id"), '-')+1:], 10, 64)
	s.mu.Lock()
	if s.bodies == nil {
		s.bodies = map[int64]unaryBody{}
	}
	s.bodies[id] = got
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	var sb strings.Builder
	if r.URL.Path == "/v1/rerank" {
		fmt.Fprintf(&sb, `{"id":"rerank-1","model":%q,"usage":{"total_tokens":%d},"results":[`, b.Model, total)
		for i := range b.Documents {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"index":%d,"document":{"text":"d"},"relevance_score":0.5}`, i)
		}
		sb.WriteString(`]}`)
	} else {
		sb.WriteString(`{"object":"list","data":[`)
		for i := range b.Input {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"object":"embedding","embedding":"AACAPwAAAEA=","index":%d}`, i)
		}
		fmt.Fprintf(&sb, `],"model":%q,"usage":{"prompt_tokens":%d,"total_tokens":%d}}`, b.Model, total, total)
	}
	w.Write([]byte(sb.String()))
}

// unaryConfig is a replay of reqs against u with api and inputs.
func unaryConfig(t *testing.T, u fmt.Stringer, reqs []trace.Request, api string, inputs int) Config {
	cfg := DefaultConfig()
	cfg.Endpoint, cfg.Trace, cfg.API, cfg.Model, cfg.Inputs = u.String(), writeTrace(t, reqs), api, "m", inputs
	cfg.Output, cfg.Quiet, cfg.Prewarm, cfg.Scrape = filepath.Join(t.TempDir(), "r.parquet"), true, 1, []string{scrape.None}
	return cfg
}

// TestUnaryReplay: an embeddings replay (and a rerank one) through either client sends each
// row as one request whose inputs are the reference's shape with lengths that add up to
// the row's prompt tokens, split as evenly as can be (the query first for rerank), counted
// with the run's encoding; its records are ok with the inputs sent, the server's usage, no
// chunks and no output; DuckDB reads them so.
func TestUnaryReplay(t *testing.T) {
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		t.Fatal(err)
	}
	reqs := uniformTrace(5, time.Millisecond, 0, 9)
	for i, p := range []int32{40, 41, 4, 100, 37} {
		reqs[i].PromptTokens = p
	}
	for _, tc := range []struct {
		api     string
		client  string
		inputs  int
		query   int
		wantFmt string
		conc    int // closed loop workers; 0: open loop
	}{
		{"embeddings", transport.HTTPClientRaw, 4, 0, "base64", 0},
		{"embeddings", transport.HTTPClientNetHTTP, 4, 0, "base64", 0},
		{"embeddings", transport.HTTPClientRaw, 2, 0, "base64", 2},
		{"rerank", transport.HTTPClientRaw, 3, 1, "", 0},
		{"rerank", transport.HTTPClientNetHTTP, 2, 1, "", 0},
	} {
		if tc.client == transport.HTTPClientRaw && !transport.RawBuilt {
			continue
		}
		t.Run(fmt.Sprintf("%s %s %d", tc.api, tc.client, tc.conc), func(t *testing.T) {
			srv := &unaryServer{enc: enc}
			u := vllmtest.Start(t, srv)
			cfg := unaryConfig(t, u, reqs, tc.api, tc.inputs)
			cfg.HTTPClient = tc.client
			if tc.conc > 0 {
				cfg.Concurrency, cfg.ConcurrencySet = tc.conc, true
			}
			if tc.query > 0 {
				cfg.QueryTokens = tc.query
			}
			var log strings.Builder
			sess, err := Prepare(context.Background(), cfg, Env{Log: &log, ToolVersion: "test"})
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			if !strings.Contains(log.String(), "asks for no output, so there is no output length to check") {
				t.Errorf("log %q says nothing of the output check", log.String())
			}
			if _, err := Run(context.Background(), sess.Options); err != nil {
				t.Fatal(err)
			}
			res, meta, err := results.ReadFile(cfg.Output)
			if err != nil {
				t.Fatal(err)
			}
			if meta.Flags["inputs"] != fmt.Sprint(tc.inputs) {
				t.Errorf("run flags %v", meta.Flags)
			}
			// The server saw the rows in order: each body's lengths are the split.
			wantFields := []string{"encoding_format", "input", "model"}
			if tc.api == "rerank" {
				wantFields = []string{"documents", "model", "query"}
			}
			if len(srv.bodies) != len(reqs) {
				t.Fatalf("%d requests, want %d", len(srv.bodies), len(reqs))
			}
			for i, r := range reqs {
				b := srv.bodies[r.ID]
				want, _ := inputLengths(nil, r.PromptTokens, tc.inputs, tc.query)
				if !slices.Equal(b.lens, want) || !slices.Equal(b.fields, wantFields) || b.format != tc.wantFmt {
					t.Errorf("request %d: inputs of %v tokens, fields %v, format %q; want %v, %v, %q", i, b.lens, b.fields, b.format, want, wantFields, tc.wantFmt)
				}
			}
			if len(res) != len(reqs) {
				t.Fatalf("%d records", len(res))
			}
			for i, r := range res {
				want := r.PromptTokens + int32(tc.inputs) + int32(min(tc.query, 1))
				if r.Status != results.StatusOK || r.Inputs != int32(tc.inputs) || r.PromptTokensServer != want || r.PromptTokens != reqs[r.RequestID-100].PromptTokens ||
					r.FirstTokenNS != results.Null || len(r.ChunkNS) != 0 || len(r.ChunkTokens) != 0 || r.OutputTokens != results.Null ||
					r.OutputTokensTarget != 0 || r.EndNS <= r.SentNS || r.HTTPStatus != 200 {
					t.Errorf("record %d: %+v; want ok with %d inputs, prompt_tokens_server %d, no chunks or output", i, r, tc.inputs, want)
				}
			}
			if tc.api != "embeddings" || tc.client != transport.HTTPClientRaw || tc.conc > 0 {
				return
			}
			rows := duckdbtest.Rows(t, fmt.Sprintf(`SELECT count(*)::INT AS n, count(*) FILTER (status = 'ok')::INT AS ok,
				sum(inputs)::INT AS inputs, count(first_token_ns)::INT AS first, count(output_tokens)::INT AS output,
				sum(len(chunk_ns))::INT AS chunks, sum(prompt_tokens_server)::INT AS server, min(end_ns - sent_ns) > 0 AS latency
				FROM '%s'`, cfg.Output))
			if rows == nil {
				return
			}
			w := map[string]any{"n": 5.0, "ok": 5.0, "inputs": 20.0, "first": 0.0, "output": 0.0, "chunks": 0.0, "server": 242.0, "latency": true}
			for k, v := range w {
				if rows[0][k] != v {
					t.Errorf("DuckDB: %s = %v, want %v", k, rows[0][k], v)
				}
			}
		})
	}
}

// TestUnaryRefused: a row too short for its inputs stops the run before anything is sent,
// naming the row; conversations, agents, --calibrate and generation-only combinations are
// refused before any file or the network is touched.
func TestUnaryRefused(t *testing.T) {
	srv := &unaryServer{}
	u := vllmtest.Start(t, srv)
	reqs := uniformTrace(3, time.Millisecond, 40, 9)
	reqs[2].PromptTokens = 3
	for _, tc := range []struct {
		api    string
		inputs int
		want   string
	}{
		{"embeddings", 4, "row 3 (request_id 102): prompt_tokens 3 is fewer than --inputs 4 inputs of a token or more"},
		{"rerank", 2, "row 3 (request_id 102): prompt_tokens 3 is fewer than the --query-tokens 32 query and --inputs 2 documents"},
	} {
		cfg := unaryConfig(t, u, reqs, tc.api, tc.inputs)
		sess, err := Prepare(context.Background(), cfg, Env{Log: &strings.Builder{}, ToolVersion: "test"})
		if err == nil {
			sess.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "t.parquet") {
			t.Errorf("%s: %v, want an error with %q", tc.api, err, tc.want)
		}
	}
	if len(srv.bodies) != 0 {
		t.Errorf("%d requests sent", len(srv.bodies))
	}
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.API, c.Sessions = "embeddings", SessionsSequential }, "--api embeddings: a request is one batch of inputs, not a conversation's turn"},
		{func(c *Config) { c.API, c.AgentSessions = "rerank", 2 }, "--api rerank: a request is one batch of inputs"},
		{func(c *Config) { c.API, c.Calibrate = "embeddings", true }, "--calibrate: measures a generation API's prompt template"},
		{func(c *Config) { c.API, c.Inputs = "embeddings", 0 }, "--inputs 0: must be at least 1"},
		{func(c *Config) { c.API, c.QueryTokens = "embeddings", 8 }, "--query-tokens 8: only with --api rerank"},
		{func(c *Config) { c.API, c.Inputs = "chat", 2 }, "--inputs 2: only with --api embeddings or rerank"},
		{func(c *Config) { c.API, c.QueryTokens = "rerank", 0 }, "--query-tokens 0: must be at least 1"},
	} {
		cfg := DefaultConfig()
		tc.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) || !IsConfigError(err) {
			t.Errorf("%+v: %v, want a config error with %q", tc.want, err, tc.want)
		}
	}
	// A trace of tool definitions is a generation's.
	tools := uniformTrace(2, time.Millisecond, 40, 9)
	tools[0].ToolTokens, tools[0].HasToolTokens = 10, true
	cfg := unaryConfig(t, u, tools, "embeddings", 2)
	if sess, err := Prepare(context.Background(), cfg, Env{Log: &strings.Builder{}, ToolVersion: "test"}); err == nil || !strings.Contains(err.Error(), "has tool_tokens") {
		if err == nil {
			sess.Close()
		}
		t.Errorf("a trace with tool_tokens: %v", err)
	}
	if _, ok := wire.Lookup(wire.APIEmbeddings); !ok {
		t.Error("embeddings not registered")
	}
}
