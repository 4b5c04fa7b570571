package sim

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/sim/pooling"
	"github.com/llmreplay/llmreplay/tokenize"
)

// poolResult is what a client saw of one pooling request.
type poolResult struct {
	status int
	body   []byte
	header http.Header
}

func postPool(t testing.TB, url, body string) poolResult {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(TimingHeader, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return poolResult{resp.StatusCode, b, resp.Header}
}

// modelNs reads one of the pooling response's model-time headers.
func (p poolResult) modelNs(t testing.TB, name string) time.Duration {
	t.Helper()
	v, err := strconv.ParseInt(p.header.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("header %s = %q: %v", name, p.header.Get(name), err)
	}
	return time.Duration(v)
}

// embeddingsResponse is the response's shape as a client decodes it; Embedding is a
// list of floats or a base64 string.
type embeddingsResponse struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Data    []struct {
		Index     int             `json:"index"`
		Object    string          `json:"object"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage map[string]any `json:"usage"`
}

func decodeEmbeddings(t testing.TB, p poolResult) embeddingsResponse {
	t.Helper()
	if p.status != 200 {
		t.Fatalf("HTTP %d: %s", p.status, p.body)
	}
	var r embeddingsResponse
	dec := json.NewDecoder(bytes.NewReader(p.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%v: %s", err, p.body)
	}
	return r
}

// vector decodes one embedding: a JSON list of floats, or base64 of little-endian float32s.
func vector(t testing.TB, raw json.RawMessage) []float32 {
	t.Helper()
	var s string
	if json.Unmarshal(raw, &s) == nil {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b)%4 != 0 {
			t.Fatalf("base64 embedding %q: %v", s, err)
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v
	}
	var v []float32
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("embedding %s: %v", raw, err)
	}
	return v
}

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// TestEmbeddingsUsage: prompt_tokens is the sum over the inputs of what the chat path
// counts for the same prompt (/tokenize's count: cl100k_base for text, the ids for ids),
// in each form input takes, and total_tokens equals it; the response has vLLM's shape,
// one data item per input, indexed in order.
func TestEmbeddingsUsage(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 1000
	r := startSim(t, cfg)
	url := r.BaseURL() + "/embeddings"
	tokURL := strings.TrimSuffix(r.BaseURL(), "/v1") + "/tokenize"
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40)
	chatCount := func(prompt any) int {
		b, _ := json.Marshal(map[string]any{"prompt": prompt})
		res := postPool(t, tokURL, string(b))
		var tk struct{ Count int }
		if err := json.Unmarshal(res.body, &tk); err != nil || res.status != 200 {
			t.Fatalf("/tokenize: %d %s", res.status, res.body)
		}
		return tk.Count
	}
	for _, tc := range []struct {
		name    string
		input   any
		prompts []any // each input as a completions prompt
	}{
		{"string", "Hello, world!", []any{"Hello, world!"}},
		{"strings", []string{"a", "Hello there", long}, []any{"a", "Hello there", long}},
		{"ids", []int{5, 6, 7, 8}, []any{[]int{5, 6, 7, 8}}},
		{"id lists", [][]int{{1}, ids(300), {9, 9}}, []any{[]int{1}, ids(300), []int{9, 9}}},
	} {
		b, _ := json.Marshal(map[string]any{"input": tc.input, "model": cfg.Model})
		res := decodeEmbeddings(t, postPool(t, url, string(b)))
		want := 0
		for _, p := range tc.prompts {
			want += chatCount(p)
		}
		if s, ok := tc.input.(string); ok && want != enc.Count(s) {
			t.Errorf("%s: /tokenize says %d, cl100k_base %d", tc.name, want, enc.Count(s))
		}
		u := res.Usage
		if u["prompt_tokens"] != float64(want) || u["total_tokens"] != float64(want) || u["completion_tokens"] != 0.0 || len(u) != 4 {
			t.Errorf("%s: usage %v, want prompt_tokens = total_tokens = %d, completion_tokens 0, prompt_tokens_details null", tc.name, u, want)
		}
		if !strings.HasPrefix(res.ID, "embd-") || res.Object != "list" || res.Model != cfg.Model || res.Created == 0 || len(res.Data) != len(tc.prompts) {
			t.Errorf("%s: head %s %s %s %d, %d items", tc.name, res.ID, res.Object, res.Model, res.Created, len(res.Data))
		}
		for i, d := range res.Data {
			if d.Index != i || d.Object != "embedding" {
				t.Errorf("%s: item %d: index %d object %q", tc.name, i, d.Index, d.Object)
			}
		}
	}
}

// TestEmbeddingsVectors: both encodings carry the same float32 vector of the profile's
// size and unit norm; the vector depends on the input alone (the same on another server,
// different for another input, and in a batch as alone); dimensions gives the leading
// components renormalized.
func TestEmbeddingsVectors(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 1000
	a, b := startSim(t, cfg), startSim(t, cfg)
	get := func(r *Running, body string) [][]float32 {
		res := decodeEmbeddings(t, postPool(t, r.BaseURL()+"/embeddings", body))
		var out [][]float32
		for _, d := range res.Data {
			out = append(out, vector(t, d.Embedding))
		}
		return out
	}
	fl := append(get(a, `{"input":["alpha","beta"]}`), get(a, `{"input":[1,2,3]}`)...)
	b64 := append(get(a, `{"input":["alpha","beta"],"encoding_format":"base64"}`), get(a, `{"input":[[1,2,3]],"encoding_format":"base64"}`)...)
	other := get(b, `{"input":"beta"}`)
	for i := range fl {
		if len(fl[i]) != cfg.EmbeddingDim || !slices.Equal(fl[i], b64[i]) {
			t.Errorf("input %d: %d floats, base64 equal: %v", i, len(fl[i]), slices.Equal(fl[i], b64[i]))
		}
		if n := norm(fl[i]); math.Abs(n-1) > 1e-6 {
			t.Errorf("input %d: norm %v", i, n)
		}
	}
	if !slices.Equal(fl[1], other[0]) {
		t.Error("beta: another server, alone, gave another vector")
	}
	if slices.Equal(fl[0], fl[1]) || slices.Equal(fl[0], fl[2]) {
		t.Error("distinct inputs gave the same vector")
	}
	for _, d := range []int{1, 8, cfg.EmbeddingDim} {
		v := get(a, `{"input":"alpha","dimensions":`+strconv.Itoa(d)+`}`)[0]
		if len(v) != d || math.Abs(norm(v)-1) > 1e-6 {
			t.Errorf("dimensions %d: length %d norm %v", d, len(v), norm(v))
			continue
		}
		n := norm(fl[0][:d])
		for i := range d {
			if math.Abs(float64(v[i])-float64(fl[0][i])/n) > 1e-6 {
				t.Errorf("dimensions %d: component %d is %v, want the full vector's %v renormalized", d, i, v[i], float64(fl[0][i])/n)
				break
			}
		}
	}
	if v := get(a, `{"input":"alpha","dimensions":100000}`)[0]; len(v) != cfg.EmbeddingDim {
		t.Errorf("dimensions over the model's: %d components, want the full %d (vLLM's slice)", len(v), cfg.EmbeddingDim)
	}
}

// TestPoolingBadRequests: vLLM's statuses and error shape for the inputs it refuses, each
// naming the field, counted as bad requests.
func TestPoolingBadRequests(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 1000
	r := startSim(t, cfg)
	emb := r.BaseURL() + "/embeddings"
	rr := strings.TrimSuffix(r.BaseURL(), "/v1") + "/rerank"
	over, _ := json.Marshal(map[string]any{"input": [][]int{{1}, ids(cfg.MaxModelLen + 1)}})
	longDoc, _ := json.Marshal(map[string]any{"query": "q", "documents": []string{"a", strings.Repeat(" the", cfg.MaxModelLen)}})
	cases := []struct{ url, body, param, msg string }{
		{emb, ``, "", "invalid JSON"},
		{emb, `{"input":"a"} x`, "", "trailing"},
		{emb, `{}`, "input", "required"},
		{emb, `{"input":null}`, "input", "required"},
		{emb, `{"input":[]}`, "input", "at least one prompt"},
		{emb, `{"input":""}`, "input", "cannot be empty"},
		{emb, `{"input":["a",""]}`, "input", "input 1 has no tokens"},
		{emb, `{"input":[[]]}`, "input", "cannot be empty"},
		{emb, `{"input":5}`, "input", "not a number"},
		{emb, `{"input":{"text":"a"}}`, "input", "not an object"},
		{emb, `{"input":["a",[1]]}`, "input", "all of one kind"},
		{emb, `{"input":["a",1]}`, "input", "all of one kind"},
		{emb, `{"input":[1,"a"]}`, "input", "all of one kind"},
		{emb, `{"input":[1.5]}`, "input", "all of one kind"},
		{emb, `{"input":[null]}`, "input", "all of one kind"},
		{emb, `{"input":[1,null]}`, "input", "all of one kind"},
		{emb, `{"input":["a",null]}`, "input", "all of one kind"},
		{emb, `{"input":[[1],null]}`, "input", "all of one kind"},
		{emb, `{"input":[-1]}`, "input", "out of range"},
		{emb, `{"input":[[100277]]}`, "input", "out of range"},
		{emb, string(over), "input", "maximum context length is 8192 tokens. However, you requested 8193 tokens in the input for embedding generation"},
		{emb, `{"input":"a","encoding_format":"int8"}`, "encoding_format", "want float or base64"},
		{emb, `{"input":"a","dimensions":0}`, "dimensions", "Dimensions must be greater than 0"},
		{emb, `{"input":"a","dimensions":"8"}`, "", "invalid JSON"},
		{emb, `{"input":"a","model":5}`, "", "invalid JSON"},
		{emb, `{"messages":[{"role":"user","content":"a"}]}`, "messages", "not messages"},
		{emb, `{"input":"a","truncate_prompt_tokens":5}`, "truncate_prompt_tokens", "not simulated"},
		{rr, `{"documents":["a"]}`, "query", "query is required"},
		{rr, `{"query":5,"documents":["a"]}`, "query", "query is required"},
		{rr, `{"query":"q"}`, "documents", "list of strings"},
		{rr, `{"query":"q","documents":"a"}`, "documents", "list of strings"},
		{rr, `{"query":"q","documents":[1]}`, "documents", "list of strings"},
		{rr, `{"query":"q","documents":["a",null]}`, "documents", "list of strings"},
		{rr, `{"query":null,"documents":["a"]}`, "query", "query is required"},
		{rr, `{"query":"q","documents":[]}`, "documents", "At least one text_pair element must be given"},
		{rr, `{"query":"q","documents":["a",""],"top_n":"2"}`, "", "invalid JSON"},
		{rr, string(longDoc), "documents", "you requested 8193 tokens in the input for score"},
	}
	for _, tc := range cases {
		res := postPool(t, tc.url, tc.body)
		var e errorBody
		if err := json.Unmarshal(res.body, &e); err != nil || res.status != 400 || e.Error.Code != 400 || e.Error.Type != "BadRequestError" || !strings.Contains(e.Error.Message, tc.msg) {
			t.Errorf("%s %.60s: status %d body %s, want 400 saying %q", tc.url[strings.LastIndex(tc.url, "/"):], tc.body, res.status, res.body, tc.msg)
			continue
		}
		if got := ""; e.Error.Param != nil {
			if got = *e.Error.Param; got != tc.param {
				t.Errorf("%.60s: param %q, want %q", tc.body, got, tc.param)
			}
		} else if tc.param != "" {
			t.Errorf("%.60s: no param, want %q", tc.body, tc.param)
		}
	}
	for _, u := range []string{emb, rr} {
		if res := postPool(t, u, `{"model":"other","input":"a","query":"q","documents":["a"]}`); res.status != 404 {
			t.Errorf("%s: unknown model: %d %s", u, res.status, res.body)
		}
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 405 {
			t.Errorf("GET %s: %d", u, resp.StatusCode)
		}
	}
	ss, _ := scrapeSamples(t, r, "")
	if v, _ := sampleValue(ss, "llmreplay_sim_bad_requests_total"); v != float64(len(cases)+2) {
		t.Errorf("bad requests counted %v, want %d (the 400s and the GETs)", v, len(cases)+2)
	}
}

// TestRerank: every path vLLM serves answers vLLM's shape: the documents' indices sorted
// by relevance_score, highest first, cut to top_n, each with its document; usage counts
// the query with each document; the scores are the same on every call and server.
func TestRerank(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 1000
	r := startSim(t, cfg)
	base := strings.TrimSuffix(r.BaseURL(), "/v1")
	enc, _ := tokenize.Get(tokenize.CL100kBase)
	query := "Which city is the capital of France?"
	docs := []string{"Paris is the capital of France.", "Berlin", "The Eiffel Tower is in Paris.", "bananas are yellow", "x"}
	want := 0
	for _, d := range docs {
		want += enc.Count(query) + enc.Count(d)
	}
	type result struct {
		Index    int `json:"index"`
		Document struct {
			Text       string `json:"text"`
			MultiModal any    `json:"multi_modal"`
		} `json:"document"`
		Score float64 `json:"relevance_score"`
	}
	var first []result
	for _, tc := range []struct {
		path string
		topN int
		n    int
	}{{"/rerank", 0, 5}, {"/v1/rerank", 3, 3}, {"/v2/rerank", 9, 5}, {"/rerank", -1, 5}} {
		b, _ := json.Marshal(map[string]any{"model": cfg.Model, "query": query, "documents": docs, "top_n": tc.topN})
		res := postPool(t, base+tc.path, string(b))
		var resp struct {
			ID      string         `json:"id"`
			Model   string         `json:"model"`
			Usage   map[string]any `json:"usage"`
			Results []result       `json:"results"`
		}
		dec := json.NewDecoder(bytes.NewReader(res.body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&resp); err != nil || res.status != 200 {
			t.Fatalf("%s: %d %v %s", tc.path, res.status, err, res.body)
		}
		if !strings.HasPrefix(resp.ID, "rerank-") || resp.Model != cfg.Model || len(resp.Usage) != 2 ||
			resp.Usage["prompt_tokens"] != float64(want) || resp.Usage["total_tokens"] != float64(want) {
			t.Errorf("%s: id %s model %s usage %v, want prompt_tokens = total_tokens = %d", tc.path, resp.ID, resp.Model, resp.Usage, want)
		}
		if len(resp.Results) != tc.n {
			t.Fatalf("%s top_n %d: %d results, want %d", tc.path, tc.topN, len(resp.Results), tc.n)
		}
		seen := map[int]bool{}
		for k, x := range resp.Results {
			if x.Index < 0 || x.Index >= len(docs) || seen[x.Index] || x.Document.Text != docs[x.Index] || x.Document.MultiModal != nil || x.Score < 0 || x.Score >= 1 {
				t.Errorf("%s: result %d: %+v", tc.path, k, x)
			}
			seen[x.Index] = true
			if k > 0 && x.Score > resp.Results[k-1].Score {
				t.Errorf("%s: result %d scores %v above the one before it (%v)", tc.path, k, x.Score, resp.Results[k-1].Score)
			}
		}
		if first == nil {
			first = resp.Results
		} else if !slices.Equal(resp.Results, first[:tc.n]) {
			t.Errorf("%s: results %v, want the first call's %v", tc.path, resp.Results, first[:tc.n])
		}
	}
	if first[0].Score == first[len(first)-1].Score {
		t.Error("every document scored the same")
	}
}

// TestPoolingLatencyHTTP: a request on an idle engine takes exactly the steps the model
// schedules for its inputs: three inputs of 2,000 token ids under tiny's pooling budget
// of 4,096 are two steps: the first prefills the first two and 96 tokens of the third
// (chunked), the second the third's other 1,904 tokens, which attend over its first 96.
// The fixed profile answers FixedTTFT after the arrival.
func TestPoolingLatencyHTTP(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 100
	r := startSim(t, cfg)
	b, _ := json.Marshal(map[string]any{"input": [][]int{ids(2000), ids(2000), ids(2000)}})
	res := postPool(t, r.BaseURL()+"/embeddings", string(b))
	if res.status != 200 {
		t.Fatalf("%d %s", res.status, res.body)
	}
	pairs0 := 2*AttentionPairs(0, 2000) + AttentionPairs(0, 96)
	want := cfg.StepTime(4096, 0, 4096, pairs0) + cfg.StepTime(1904, 0, 2000, AttentionPairs(96, 1904))
	arrival, admit, done := res.modelNs(t, HeaderPoolArrival), res.modelNs(t, HeaderPoolAdmit), res.modelNs(t, HeaderPoolDone)
	if admit != arrival || done-arrival != want || res.header.Get(HeaderPoolAhead) != "0" {
		t.Errorf("arrival %v admit %v latency %v ahead %s, want admitted at once and %v", arrival, admit, done-arrival, res.header.Get(HeaderPoolAhead), want)
	}

	fx, _ := Profile("fixed")
	fx.FixedTTFT = 7 * time.Millisecond
	fr := startSim(t, fx)
	for _, u := range []string{fr.BaseURL() + "/embeddings", strings.TrimSuffix(fr.BaseURL(), "/v1") + "/rerank"} {
		res := postPool(t, u, `{"input":["a","b"],"query":"q","documents":["a","b"]}`)
		if res.status != 200 {
			t.Fatalf("fixed %s: %d %s", u, res.status, res.body)
		}
		if d := res.modelNs(t, HeaderPoolDone) - res.modelNs(t, HeaderPoolArrival); d != fx.FixedTTFT {
			t.Errorf("fixed %s: latency %v, want %v", u, d, fx.FixedTTFT)
		}
	}
}

// runSched drives a pooling scheduler as the engine loop does, with cfg's step model and
// limits: inputs of tokens each arriving every gap of model time (the queue takes each at
// the first step start at or after its arrival; an idle engine waits for the next). It
// returns them when all are done, and each step's duration, and fails a step over the
// token budget.
func runSched(t *testing.T, cfg *Config, n, tokens int, gap time.Duration) (seqs []*pooling.Seq, steps []time.Duration) {
	t.Helper()
	step := func(prefill, context int, pairs int64) time.Duration {
		if prefill > cfg.PoolMaxBatchedTokens {
			t.Fatalf("a step prefilled %d tokens, over the budget %d", prefill, cfg.PoolMaxBatchedTokens)
		}
		return cfg.poolStep(prefill, context, pairs)
	}
	c := pooling.NewCore(step, cfg.poolLimits())
	seqs = make([]*pooling.Seq, n)
	for i := range seqs {
		seqs[i] = &pooling.Seq{Tokens: tokens}
	}
	next := 0
	for next < n || !c.Idle() {
		if c.Idle() {
			c.Advance(time.Duration(next) * gap)
		}
		for next < n && time.Duration(next)*gap <= c.Now() {
			c.Enqueue(seqs[next], time.Duration(next)*gap)
			next++
		}
		d := c.Step()
		if d == 0 {
			t.Fatal("step made no progress")
		}
		steps = append(steps, d)
	}
	return seqs, steps
}

// TestPoolingPairs: the pooling scheduler counts attention pairs as the generation
// engine does.
func TestPoolingPairs(t *testing.T) {
	for _, c := range [][2]int{{0, 0}, {0, 1}, {0, 512}, {96, 1904}, {100000, 8192}} {
		if a, b := pooling.Pairs(c[0], c[1]), AttentionPairs(c[0], c[1]); a != b {
			t.Errorf("Pairs%v = %d, AttentionPairs %d", c, a, b)
		}
	}
}

// TestPoolCoreSchedule: a burst of inputs is served in FIFO batches that fill the token
// budget: with 256-token inputs and a budget of 4,096 every step takes 16 whole inputs
// and lasts T = StepTime(4096, 0, 4096, 16 pairs(0, 256)), so input i waits (i/16) T in
// the queue and is done at (i/16 + 1) T, and the engine's rate is the budget over T;
// PoolMaxBatch = 4 makes the steps of 4 inputs instead.
func TestPoolCoreSchedule(t *testing.T) {
	cfg, _ := Profile("tiny")
	const L, n = 256, 100
	for _, maxBatch := range []int{16, 4} {
		cfg.PoolMaxBatch = maxBatch
		per := min(cfg.PoolMaxBatchedTokens/L, maxBatch)
		T := cfg.StepTime(per*L, 0, per*L, int64(per)*AttentionPairs(0, L))
		seqs, steps := runSched(t, &cfg, n, L, 0)
		if len(steps) != (n+per-1)/per {
			t.Errorf("max batch %d: %d steps, want %d", maxBatch, len(steps), (n+per-1)/per)
		}
		for i, s := range seqs {
			k := time.Duration(i / per)
			wantDone := (k + 1) * T
			if i >= n/per*per { // the last, partial batch
				last := n - n/per*per
				wantDone = k*T + cfg.StepTime(last*L, 0, last*L, int64(last)*AttentionPairs(0, L))
			}
			if s.Admit-s.Arrival != k*T || s.Done != wantDone {
				t.Errorf("max batch %d: input %d: queued %v, done %v; want %v, %v", maxBatch, i, s.Admit-s.Arrival, s.Done, k*T, wantDone)
				break
			}
		}
		full := seqs[n/per*per-1].Done
		if rate, want := float64(n/per*per*L)/full.Seconds(), float64(per*L)/T.Seconds(); math.Abs(rate-want) > 1e-9*want {
			t.Errorf("max batch %d: %.1f tok/s over the full steps, want %.1f", maxBatch, rate, want)
		}
	}
}

// TestPoolCoreKnee: under open-loop arrivals the engine serves the offered load while it
// can and then saturates at the budget's rate, B / T(B), with latency growing past it:
// below the knee every input is alone in its step (done exactly one single-input step
// after its arrival); past it the steps are full and the backlog, and with it the
// latency, grows with every arrival.
func TestPoolCoreKnee(t *testing.T) {
	cfg, _ := Profile("tiny")
	const L, n = 512, 400
	per := cfg.PoolMaxBatchedTokens / L
	T := cfg.StepTime(per*L, 0, per*L, int64(per)*AttentionPairs(0, L))
	capRate := float64(per*L) / T.Seconds() // tokens per model second
	single := cfg.StepTime(L, 0, L, AttentionPairs(0, L))

	// Below the knee: an input every step and a bit.
	seqs, _ := runSched(t, &cfg, n, L, single+time.Microsecond)
	for i, s := range seqs {
		if s.Done-s.Arrival != single {
			t.Fatalf("light load: input %d took %v, want one step, %v", i, s.Done-s.Arrival, single)
		}
	}
	// Past the knee: inputs offered at twice the capacity.
	gap := time.Duration(float64(L) / (2 * capRate) * 1e9)
	seqs, steps := runSched(t, &cfg, n, L, gap)
	span := seqs[n-1].Done - seqs[0].Arrival
	rate := float64(n*L) / span.Seconds()
	if rate > capRate*(1+1e-9) || rate < 0.95*capRate {
		t.Errorf("overload: %.0f tok/s, want the cap %.0f (within the ramp's 5%%)", rate, capRate)
	}
	full := 0
	for _, d := range steps {
		if d == T {
			full++
		}
	}
	if full < len(steps)-5 {
		t.Errorf("overload: %d of %d steps were full", full, len(steps))
	}
	lat := func(i int) time.Duration { return seqs[i].Done - seqs[i].Arrival }
	if !(lat(n/4) < lat(n/2) && lat(n/2) < lat(n-1)) || lat(n-1) < 10*single {
		t.Errorf("overload: latencies %v, %v, %v do not grow", lat(n/4), lat(n/2), lat(n-1))
	}
}

// TestPoolingMetrics: the pooling inputs are vLLM's engine requests on /metrics: their
// prompt tokens, their successes (finished_reason stop), one e2e latency each, and
// running and waiting while they run (PoolMaxBatch 1: one runs, one waits).
func TestPoolingMetrics(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 1000
	r := startSim(t, cfg)
	if res := postPool(t, r.BaseURL()+"/embeddings", `{"input":[[1,2,3],[4,5]]}`); res.status != 200 {
		t.Fatalf("%d %s", res.status, res.body)
	}
	res := postPool(t, strings.TrimSuffix(r.BaseURL(), "/v1")+"/rerank", `{"query":"a b","documents":["c","d e f"]}`)
	if res.status != 200 {
		t.Fatal(res.status)
	}
	ss, _ := scrapeSamples(t, r, "")
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"vllm:prompt_tokens_total", nil, 5 + 3 + 5},
		{"vllm:request_success_total", []string{"finished_reason", "stop"}, 4},
		{"vllm:generation_tokens_total", nil, 0},
		{"vllm:e2e_request_latency_seconds_count", nil, 4},
		{"vllm:num_requests_running", nil, 0},
		{"vllm:num_requests_waiting", nil, 0},
	} {
		if v, ok := sampleValue(ss, c.name, c.labels...); !ok || v != c.want {
			t.Errorf("%s%v = %v (%v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}
	if v, _ := sampleValue(ss, "llmreplay_sim_pooling_steps_total"); v < 2 {
		t.Errorf("pooling steps %v, want at least one per request", v)
	}

	// A generation request is observed too: its arrival to its last token.
	gr := startSim(t, cfg)
	g := post(t, http.DefaultClient, gr.BaseURL()+"/completions", `{"prompt":"Hi","max_tokens":3}`)
	if g.status != 200 {
		t.Fatalf("completion: %d %s", g.status, g.body)
	}
	ss, _ = scrapeSamples(t, gr, "")
	lat := (g.modelNs(t, TrailerLast) - g.modelNs(t, TrailerArrival)).Seconds()
	if n, _ := sampleValue(ss, "vllm:e2e_request_latency_seconds_count"); n != 1 {
		t.Errorf("generation: e2e count %v, want 1", n)
	}
	if sum, _ := sampleValue(ss, "vllm:e2e_request_latency_seconds_sum"); math.Abs(sum-lat) > 1e-9 {
		t.Errorf("generation: e2e sum %v, want the request's %v", sum, lat)
	}

	// Slow model time (a step of ~1 ms lasts 10 s of real time): scrape while the first
	// input runs and the second waits, then leave.
	slow, _ := Profile("tiny")
	slow.TimeScale, slow.PoolMaxBatch = 1e-4, 1
	sr := startSim(t, slow)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sr.BaseURL()+"/embeddings", strings.NewReader(`{"input":[[1],[2]]}`))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		ss, _ := scrapeSamples(t, sr, "")
		run, _ := sampleValue(ss, "vllm:num_requests_running")
		wait, _ := sampleValue(ss, "vllm:num_requests_waiting")
		if run == 1 && wait == 1 {
			break
		}
		if run+wait > 2 || time.Now().After(deadline) {
			t.Fatalf("running %v waiting %v, want 1 and 1", run, wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
}

// TestPoolingInfo: /sim/info's pooling figures are what the scheduler does, for every
// engine profile: one input of ref_input_tokens alone takes single_input_ms, and a
// burst runs in steps of full_step_inputs inputs, each full_step_ms long.
func TestPoolingInfo(t *testing.T) {
	for _, name := range Profiles() {
		cfg, _ := Profile(name)
		if cfg.Fixed {
			if Analyze(cfg).Pooling != nil {
				t.Errorf("%s: pooling figures for the fixed profile", name)
			}
			continue
		}
		in := Analyze(cfg).Pooling
		ref := cfg.RefContextTokens
		one, _ := runSched(t, &cfg, 1, ref, 0)
		if ms := one[0].Done.Seconds() * 1e3; ms != in.SingleInputMs {
			t.Errorf("%s: one input took %v ms, info says %v", name, ms, in.SingleInputMs)
		}
		seqs, steps := runSched(t, &cfg, 3*in.FullStepInputs, ref, 0)
		if len(steps) != 3 || steps[0].Seconds()*1e3 != in.FullStepMs || steps[2] != steps[0] {
			t.Errorf("%s: steps %v, info says 3 of %v ms", name, steps, in.FullStepMs)
		}
		if rate := float64(len(seqs)*ref) / seqs[len(seqs)-1].Done.Seconds(); math.Abs(rate-in.MaxTokPerSec) > 1e-9*rate {
			t.Errorf("%s: burst at %v tok/s, info says %v", name, rate, in.MaxTokPerSec)
		}
	}
}

// TestPoolingRequestID: the pooling endpoints echo X-Request-Id as the generation ones
// do, on an answer and on an error.
func TestPoolingRequestID(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 1000
	r := startSim(t, cfg)
	for _, body := range []string{`{"input":"a"}`, `{"input":[]}`} {
		req, _ := http.NewRequest(http.MethodPost, r.BaseURL()+"/embeddings", strings.NewReader(body))
		req.Header.Set(RequestIDHeader, "run-7")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get(RequestIDHeader); got != "run-7" {
			t.Errorf("%s: %s %q, want run-7", body, RequestIDHeader, got)
		}
	}
}

// TestPoolingConcurrentHTTP: 32 clients in closed loop against the real-time engine.
// Every answer is ok, no input is faster than alone on an idle engine, the engine never
// beats the budget's rate (/sim/info's max_tok_per_sec at this input length), and
// /metrics agrees with the answers: prompt tokens with their usage, successes and the
// e2e histogram's count and sum with their inputs and their headers' latencies.
func TestPoolingConcurrentHTTP(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 20
	const L = 128
	cfg.RefContextTokens = L
	r := startSim(t, cfg)
	body, _ := json.Marshal(map[string]any{"input": [][]int{ids(L)}})
	type answer struct {
		arrival, admit, done time.Duration
		tokens               int
	}
	const clients, each = 32, 8
	answers := make(chan answer, clients*each)
	errs := make(chan string, clients*each)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range each {
				res := postPool(t, r.BaseURL()+"/embeddings", string(body))
				var e embeddingsResponse
				if res.status != 200 || json.Unmarshal(res.body, &e) != nil {
					errs <- fmt.Sprintf("%d %s", res.status, res.body)
					continue
				}
				answers <- answer{res.modelNs(t, HeaderPoolArrival), res.modelNs(t, HeaderPoolAdmit), res.modelNs(t, HeaderPoolDone), int(e.Usage["prompt_tokens"].(float64))}
			}
		})
	}
	wg.Wait()
	close(answers)
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	var tokens int
	var sum float64
	first, last := time.Duration(math.MaxInt64), time.Duration(0)
	alone := cfg.PoolPrefillTime(L)
	for a := range answers {
		tokens += a.tokens
		sum += (a.done - a.arrival).Seconds()
		first, last = min(first, a.admit), max(last, a.done)
		if a.done-a.arrival < alone || a.admit < a.arrival {
			t.Errorf("arrival %v admit %v done %v: faster than alone (%v)", a.arrival, a.admit, a.done, alone)
		}
	}
	if rate, capRate := float64(tokens)/(last-first).Seconds(), Analyze(cfg).Pooling.MaxTokPerSec; rate > capRate*(1+1e-9) {
		t.Errorf("%.0f tok/s, over the budget's %.0f", rate, capRate)
	}
	ss, _ := scrapeSamples(t, r, "")
	for _, c := range []struct {
		name string
		want float64
	}{
		{"vllm:prompt_tokens_total", float64(tokens)},
		{"vllm:e2e_request_latency_seconds_count", clients * each},
	} {
		if v, _ := sampleValue(ss, c.name); v != c.want {
			t.Errorf("%s = %v, want %v", c.name, v, c.want)
		}
	}
	if v, _ := sampleValue(ss, "vllm:request_success_total", "finished_reason", "stop"); v != clients*each {
		t.Errorf("successes %v, want %d", v, clients*each)
	}
	if v, _ := sampleValue(ss, "vllm:e2e_request_latency_seconds_sum"); math.Abs(v-sum) > 1e-9*sum {
		t.Errorf("e2e sum %v, want the answers' %v", v, sum)
	}
}
