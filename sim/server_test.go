package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/tokenize"
)

func startSim(t testing.TB, cfg Config) *Running {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	r, err := Start(ctx, "127.0.0.1:0", cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
		cancel()
	})
	return r
}

// result is what a plain client saw of one request.
type result struct {
	status    int
	chunks    []map[string]any // parsed data chunks, in order
	malformed int              // data lines that were not JSON
	done      bool             // saw data: [DONE]
	readErr   error
	body      []byte // non-streaming body
	trailer   http.Header
	text      string
	usage     map[string]any
}

func (r *result) modelNs(t testing.TB, name string) time.Duration {
	t.Helper()
	v, err := strconv.ParseInt(r.trailer.Get(name), 10, 64)
	if err != nil {
		t.Fatalf("trailer %s = %q: %v", name, r.trailer.Get(name), err)
	}
	return time.Duration(v)
}

func post(t testing.TB, c *http.Client, url string, body any) *result {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(TimingHeader, "1")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	res := &result{status: resp.StatusCode}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		res.body, res.readErr = io.ReadAll(resp.Body)
		res.trailer = resp.Trailer
		return res
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	var text strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("non-SSE line %q", line)
		}
		if data == "[DONE]" {
			res.done = true
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(data), &m) != nil {
			res.malformed++
			continue
		}
		res.chunks = append(res.chunks, m)
		if u, ok := m["usage"].(map[string]any); ok {
			res.usage = u
		}
		for _, ch := range m["choices"].([]any) {
			c := ch.(map[string]any)
			if s, ok := c["text"].(string); ok {
				text.WriteString(s)
			}
			if d, ok := c["delta"].(map[string]any); ok {
				if s, ok := d["content"].(string); ok {
					text.WriteString(s)
				}
			}
		}
	}
	res.readErr = sc.Err()
	res.trailer = resp.Trailer
	res.text = text.String()
	return res
}

func ids(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = 1000 + i
	}
	return p
}

func TestStreamShapes(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 100
	r := startSim(t, cfg)
	c := &http.Client{}
	enc, _ := tokenize.Get(tokenize.CL100kBase)

	// completions, include_usage + continuous_usage_stats
	res := post(t, c, r.BaseURL()+"/completions", map[string]any{
		"model": cfg.Model, "prompt": "The quick brown fox", "max_tokens": 7, "stream": true,
		"stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true}})
	if res.status != 200 || !res.done || res.readErr != nil || len(res.chunks) != 8 {
		t.Fatalf("status %d done %v err %v chunks %d", res.status, res.done, res.readErr, len(res.chunks))
	}
	for i, ch := range res.chunks[:7] {
		u := ch["usage"].(map[string]any)
		if u["completion_tokens"].(float64) != float64(i+1) || u["prompt_tokens"].(float64) != 4 {
			t.Fatalf("chunk %d usage %v", i, u)
		}
		choice := ch["choices"].([]any)[0].(map[string]any)
		fr := choice["finish_reason"]
		if (i < 6 && fr != nil) || (i == 6 && fr != "length") || ch["object"] != "text_completion" {
			t.Fatalf("chunk %d: %v", i, ch)
		}
	}
	last := res.chunks[7]
	if len(last["choices"].([]any)) != 0 || last["usage"].(map[string]any)["total_tokens"].(float64) != 11 {
		t.Fatalf("usage chunk %v", last)
	}
	if n := enc.Count(res.text); n != 7 {
		t.Fatalf("client count of %q = %d, want 7", res.text, n)
	}

	// chat: role chunk first, no usage without stream_options
	res = post(t, c, r.BaseURL()+"/chat/completions", map[string]any{
		"messages":   []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}},
		"max_tokens": 3, "stream": true})
	if len(res.chunks) != 4 || !res.done || res.usage != nil {
		t.Fatalf("chat: %d chunks, done %v, usage %v", len(res.chunks), res.done, res.usage)
	}
	d0 := res.chunks[0]["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)
	if d0["role"] != "assistant" || d0["content"] != "" || res.chunks[0]["object"] != "chat.completion.chunk" {
		t.Fatalf("first chat chunk %v", res.chunks[0])
	}
	if enc.Count(res.text) != 3 {
		t.Fatalf("chat text %q", res.text)
	}
	if _, has := res.chunks[1]["usage"]; has {
		t.Errorf("chat chunk has usage without stream_options: %v", res.chunks[1])
	}
	res = post(t, c, r.BaseURL()+"/completions", map[string]any{"prompt": "x", "max_tokens": 2, "stream": true})
	if u, has := res.chunks[0]["usage"]; !has || u != nil || len(res.chunks) != 2 {
		t.Errorf("completion chunk: want \"usage\":null as vLLM sends, got %v", res.chunks[0])
	}

	// chat prompt count = /tokenize count
	msgs := []map[string]any{{"role": "user", "content": []map[string]any{{"type": "text", "text": "What is 2+2?"}}}}
	res = post(t, c, r.BaseURL()+"/chat/completions", map[string]any{"messages": msgs, "max_tokens": 2})
	var whole struct {
		Choices []struct {
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage usage
	}
	if err := json.Unmarshal(res.body, &whole); err != nil || res.status != 200 {
		t.Fatalf("non-streaming chat: %d %s %v", res.status, res.body, err)
	}
	tok := post(t, c, strings.TrimSuffix(r.BaseURL(), "/v1")+"/tokenize", map[string]any{"messages": msgs})
	var tk struct {
		Count       int   `json:"count"`
		Tokens      []int `json:"tokens"`
		MaxModelLen int   `json:"max_model_len"`
	}
	if err := json.Unmarshal(tok.body, &tk); err != nil {
		t.Fatal(err)
	}
	// ChatML: <|im_start|>user\n CONTENT <|im_end|>\n <|im_start|>assistant\n
	wantPrompt := 1 + enc.Count("user\n") + enc.Count("What is 2+2?") + 2 + 1 + enc.Count("assistant\n")
	if whole.Usage.PromptTokens != wantPrompt || tk.Count != wantPrompt || len(tk.Tokens) != wantPrompt || tk.MaxModelLen != cfg.MaxModelLen {
		t.Fatalf("chat prompt tokens: usage %d, tokenize %d/%d, want %d", whole.Usage.PromptTokens, tk.Count, len(tk.Tokens), wantPrompt)
	}
	if whole.Choices[0].Message.Role != "assistant" || enc.Count(whole.Choices[0].Message.Content) != 2 || whole.Usage.CompletionTokens != 2 || whole.Choices[0].FinishReason != "length" {
		t.Fatalf("non-streaming chat %+v", whole)
	}

	// token-id prompt counts len(ids); default max_tokens 16
	res = post(t, c, r.BaseURL()+"/completions", map[string]any{"prompt": ids(123)})
	if err := json.Unmarshal(res.body, &whole); err != nil || whole.Usage.PromptTokens != 123 || whole.Usage.CompletionTokens != cfg.DefaultMaxTokens {
		t.Fatalf("token-id prompt: %s", res.body)
	}

	// /v1/models
	resp, err := c.Get(r.BaseURL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 1 || models.Data[0].ID != cfg.Model {
		t.Fatalf("models %+v", models)
	}
}

func TestMinTokensIgnoreEOS(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 1000
	cfg.EOSMeanTokens = 5
	r := startSim(t, cfg)
	c := &http.Client{}
	var stops, belowMin int
	for i := range 60 {
		body := map[string]any{"prompt": ids(4), "max_tokens": 50, "min_tokens": 20, "stream": true,
			"stream_options": map[string]any{"include_usage": true}}
		if i%2 == 1 {
			body["ignore_eos"] = true
		}
		res := post(t, c, r.BaseURL()+"/completions", body)
		n := int(res.usage["completion_tokens"].(float64))
		fr := res.chunks[len(res.chunks)-2]["choices"].([]any)[0].(map[string]any)["finish_reason"]
		switch {
		case i%2 == 1 && (n != 50 || fr != "length"):
			t.Fatalf("ignore_eos: %d tokens, finish %v", n, fr)
		case n < 20:
			belowMin++
		case n < 50:
			if fr != "stop" {
				t.Fatalf("%d tokens with finish %v", n, fr)
			}
			stops++
		}
	}
	// mean natural length 5 < min_tokens 20: nearly all stop exactly at 20.
	if belowMin != 0 || stops < 25 {
		t.Fatalf("stops %d, below min %d", stops, belowMin)
	}
}

// TestSingleStreamDecodeRate holds one stream's decode rate, in model time, against
// /sim/info: the prompt and output are chosen so the mean context of the decode steps is
// RefContextTokens (28 + mean(1..199) = 128).
func TestSingleStreamDecodeRate(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 20
	r := startSim(t, cfg)
	in := r.Info()
	const prompt, n = 28, 200
	res := post(t, http.DefaultClient, r.BaseURL()+"/completions", map[string]any{
		"prompt": ids(prompt), "max_tokens": n, "ignore_eos": true, "stream": true})
	if len(res.chunks) != n || !res.done {
		t.Fatalf("%d chunks", len(res.chunks))
	}
	first, last, arrival := res.modelNs(t, TrailerFirst), res.modelNs(t, TrailerLast), res.modelNs(t, TrailerArrival)
	rate := float64(n-1) / (last - first).Seconds()
	if math.Abs(rate/in.SingleStreamTokPerSec-1) > 0.05 {
		t.Errorf("single-stream decode %.1f tok/s, /sim/info says %.1f", rate, in.SingleStreamTokPerSec)
	}
	// Exactly: TTFT is one prefill step, then one decode step per token.
	if got, want := first-arrival, cfg.StepTime(prompt, 0, prompt, AttentionPairs(0, prompt)); got != want {
		t.Errorf("TTFT %v, want one prefill step %v", got, want)
	}
	var want time.Duration
	for k := 1; k < n; k++ {
		want += cfg.DecodeStepTime(1, prompt+k)
	}
	if got := last - first; got != want {
		t.Errorf("decode time %v, want %v", got, want)
	}
	t.Logf("single stream: %.1f tok/s model time, info %.1f", rate, in.SingleStreamTokPerSec)
}

type metricsSample struct {
	model, gen, running, waiting, steps float64
}

func scrape(t testing.TB, url string) metricsSample {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m metricsSample
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", sc.Text(), err)
		}
		switch name[:strings.IndexByte(name+"{", '{')] {
		case "llmreplay_sim_model_time_seconds":
			m.model = v
		case "vllm:generation_tokens_total":
			m.gen = v
		case "vllm:num_requests_running":
			m.running = v
		case "vllm:num_requests_waiting":
			m.waiting = v
		case "llmreplay_sim_steps_total":
			m.steps = v
		}
	}
	return m
}

// TestSaturatedAggregateAndQueueing sends five batches' worth of requests at once. While
// requests are refused admission the batch is full: the aggregate decode rate over that
// time, in model time, must match /sim/info's max decode rate; and TTFT must grow with
// the queue. A machine too busy to send a burst (no queue forms) gets another try; a
// wrong engine fails every try.
func TestSaturatedAggregateAndQueueing(t *testing.T) {
	var errs []string
	for try := range 3 {
		errs = saturatedTry(t)
		if len(errs) == 0 {
			return
		}
		t.Logf("try %d: %s", try+1, strings.Join(errs, "; "))
	}
	t.Error(strings.Join(errs, "\n"))
}

func saturatedTry(t *testing.T) (errs []string) {
	failf := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 2
	// 28 + mean(1..n-1) = 128 = the context at which /sim/info's figures are computed.
	const prompt, n = 28, 200
	r := startSim(t, cfg)
	defer r.Close()
	info := r.Info()
	reqs := 5 * cfg.MaxBatch
	results := make([]*result, reqs)
	var ready, wg sync.WaitGroup
	start := make(chan struct{})
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: reqs}}
	ready.Add(reqs)
	for i := range reqs {
		wg.Go(func() {
			// Warm a keep-alive connection, then fire with the others.
			post(t, c, r.BaseURL()+"/completions", map[string]any{"prompt": ids(1), "max_tokens": 1})
			ready.Done()
			<-start
			results[i] = post(t, c, r.BaseURL()+"/completions", map[string]any{
				"prompt": ids(prompt), "max_tokens": n, "ignore_eos": true, "stream": true})
		})
	}
	ready.Wait()
	close(start)
	wg.Wait()

	type rt struct {
		arrival, queued, admit, last, ttft time.Duration
		ahead                              int
		genAdmit, genLast                  int64
	}
	rts := make([]rt, 0, reqs)
	for _, res := range results {
		if len(res.chunks) != n || !res.done {
			t.Fatalf("%d chunks", len(res.chunks))
		}
		a := res.modelNs(t, TrailerArrival)
		ahead, _ := strconv.Atoi(res.trailer.Get(TrailerAhead))
		rts = append(rts, rt{a, res.modelNs(t, TrailerQueued), res.modelNs(t, TrailerAdmit), res.modelNs(t, TrailerLast), res.modelNs(t, TrailerFirst) - a,
			ahead, int64(res.modelNs(t, TrailerGenAtAdmit)), int64(res.modelNs(t, TrailerGenAtLast))})
	}
	// Requests that arrived during the same step share an arrival time; their order is
	// the engine's inbox order, so break ties by admission.
	sort.Slice(rts, func(i, j int) bool {
		return rts[i].arrival < rts[j].arrival || rts[i].arrival == rts[j].arrival && rts[i].admit < rts[j].admit
	})
	for i := 1; i < len(rts); i++ {
		if rts[i].admit < rts[i-1].admit {
			t.Fatalf("not FCFS: arrival %v admitted %v before arrival %v admitted %v", rts[i].arrival, rts[i].admit, rts[i-1].arrival, rts[i-1].admit)
		}
	}
	maxAhead := 0
	for _, x := range rts {
		maxAhead = max(maxAhead, x.ahead)
	}
	if maxAhead < 2*cfg.MaxBatch {
		failf("the burst queued at most %d requests: the machine did not send it at once", maxAhead)
		return errs
	}

	// A request taken in at step start `queued` and admitted later was refused at every
	// step start in [queued, admit): the batch was full. On the union of those intervals,
	// every admission and every finish is a sample (model time, engine's generated-token
	// counter); the rate between the first and last samples inside the longest stretch is
	// the saturated aggregate, in model time whatever the machine's load.
	sort.Slice(rts, func(i, j int) bool { return rts[i].queued < rts[j].queued })
	var bestFrom, bestTo, from, to time.Duration
	first := true
	for _, x := range rts {
		if x.queued >= x.admit {
			continue
		}
		if first || x.queued > to {
			from, to, first = x.queued, x.admit, false
		} else {
			to = max(to, x.admit)
		}
		if to-from > bestTo-bestFrom {
			bestFrom, bestTo = from, to
		}
	}
	type sample struct {
		at  time.Duration
		gen int64
	}
	var in []sample
	for _, x := range rts {
		for _, s := range []sample{{x.admit, x.genAdmit}, {x.last, x.genLast}} {
			if s.at >= bestFrom && s.at <= bestTo {
				in = append(in, s)
			}
		}
	}
	sort.Slice(in, func(i, j int) bool { return in[i].at < in[j].at })
	step := cfg.DecodeStepTime(cfg.MaxBatch, cfg.RefContextTokens)
	life := time.Duration(n) * step
	if len(in) < 2 || in[len(in)-1].at-in[0].at < life {
		failf("saturated stretch [%v, %v] holds %d samples, under a batch lifetime", bestFrom, bestTo, len(in))
		return errs
	}
	a, b := in[0], in[len(in)-1]
	agg := float64(b.gen-a.gen) / (b.at - a.at).Seconds()
	if math.Abs(agg/info.MaxDecodeTokPerSec-1) > 0.05 {
		failf("saturated aggregate %.0f tok/s (model time) over %v, /sim/info max decode %.0f", agg, b.at-a.at, info.MaxDecodeTokPerSec)
	}
	t.Logf("saturated aggregate %.0f tok/s over %v model time, info %.0f", agg, b.at-a.at, info.MaxDecodeTokPerSec)

	// TTFT grows with the queue. A request with k requests waiting ahead of it needs k+1
	// batch slots to free up, and a slot frees at most once per n steps, each at least
	// StepBase long; and the requests that found the longest queues wait, on average, at
	// least a batch lifetime longer than those that found none.
	var none, long []float64
	for _, x := range rts {
		if lb := time.Duration(x.ahead/cfg.MaxBatch*n) * cfg.StepBase; x.ttft < lb {
			failf("TTFT %v with %d waiting ahead, below the bound %v", x.ttft, x.ahead, lb)
		}
		switch {
		case x.ahead == 0:
			none = append(none, x.ttft.Seconds())
		case x.ahead >= maxAhead-cfg.MaxBatch/2:
			long = append(long, x.ttft.Seconds())
		}
	}
	mean := func(x []float64) float64 {
		s := 0.0
		for _, v := range x {
			s += v
		}
		return s / float64(len(x))
	}
	if len(none) == 0 || mean(long)-mean(none) < life.Seconds() {
		failf("TTFT with no queue %.3fs (%d requests), with ~%d ahead %.3fs (%d): want a rise of at least a batch lifetime %v",
			mean(none), len(none), maxAhead, mean(long), len(long), life)
	}
	return errs
}

func TestFixedProfileModelTimes(t *testing.T) {
	cfg, _ := Profile("fixed")
	cfg.TimeScale = 50
	r := startSim(t, cfg)
	res := post(t, http.DefaultClient, r.BaseURL()+"/chat/completions", map[string]any{
		"messages": []map[string]any{{"role": "user", "content": "hi"}}, "max_tokens": 10, "stream": true})
	if len(res.chunks) != 11 || !res.done {
		t.Fatalf("%d chunks", len(res.chunks))
	}
	a, f, l := res.modelNs(t, TrailerArrival), res.modelNs(t, TrailerFirst), res.modelNs(t, TrailerLast)
	if f-a != cfg.FixedTTFT || l-f != 9*cfg.FixedITL {
		t.Fatalf("ttft %v decode %v", f-a, l-f)
	}
	// /metrics counts each write's lateness: exactly one first write, and up to 9 later
	// ones. How many later writes there are is the machine's, not the model's: at time
	// scale 50 the whole decode takes 1.8 ms, and a handler that wakes late writes every
	// token that is due in one write, so 0 later writes is as right as 9 (the test failed
	// under load asserting at least one). TestFixedWriteLatenessHistogram checks the
	// counting itself, with lateness values it chooses.
	first, later, b := fixedWriteCounts(t, r)
	if first != 1 || later < 0 || later > 9 || !strings.Contains(b, `token="later",le="+Inf"`) {
		t.Errorf("write-lateness histogram: %d first, %d later writes, want 1 and 0..9:\n%s", first, later, b)
	}
}

// fixedWriteCounts reads the fixed profile's write-lateness counts from /metrics.
func fixedWriteCounts(t *testing.T, r *Running) (first, later int, text string) {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(r.BaseURL(), "/v1") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	first, later = -1, -1
	for _, l := range strings.Split(string(b), "\n") {
		const p = `llmreplay_sim_fixed_write_lateness_seconds_count{model_name="sim-fixed",token=`
		if v, ok := strings.CutPrefix(l, p+`"first"} `); ok {
			first, _ = strconv.Atoi(v)
		}
		if v, ok := strings.CutPrefix(l, p+`"later"} `); ok {
			later, _ = strconv.Atoi(v)
		}
	}
	return first, later, string(b)
}

// TestFixedWriteLatenessHistogram: the write-lateness histogram puts each observation in
// its bucket and serves cumulative buckets, sum and count, with values the test chooses
// (no timers involved).
func TestFixedWriteLatenessHistogram(t *testing.T) {
	cfg, _ := Profile("fixed")
	r := startSim(t, cfg)
	r.srv.fixedLate[0].observe(-time.Millisecond) // early counts as 0
	for _, d := range []time.Duration{40 * time.Microsecond, 2 * time.Millisecond, 2 * time.Millisecond, 3 * time.Second} {
		r.srv.fixedLate[1].observe(d)
	}
	first, later, b := fixedWriteCounts(t, r)
	if first != 1 || later != 4 {
		t.Fatalf("counts %d first, %d later, want 1 and 4:\n%s", first, later, b)
	}
	const p = `llmreplay_sim_fixed_write_lateness_seconds`
	for _, want := range []string{
		p + `_bucket{model_name="sim-fixed",token="first",le="5e-05"} 1`,
		p + `_sum{model_name="sim-fixed",token="first"} 0`,
		p + `_bucket{model_name="sim-fixed",token="later",le="5e-05"} 1`,
		p + `_bucket{model_name="sim-fixed",token="later",le="0.0015"} 1`,
		p + `_bucket{model_name="sim-fixed",token="later",le="0.002"} 3`,
		p + `_bucket{model_name="sim-fixed",token="later",le="1"} 3`,
		p + `_bucket{model_name="sim-fixed",token="later",le="+Inf"} 4`,
		p + `_sum{model_name="sim-fixed",token="later"} 3.00404`,
	} {
		if !strings.Contains(b, want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, b)
		}
	}
}

func TestBadRequests(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 1000
	r := startSim(t, cfg)
	comp, chat := r.BaseURL()+"/completions", r.BaseURL()+"/chat/completions"
	tokURL := strings.TrimSuffix(r.BaseURL(), "/v1") + "/tokenize"
	for _, tc := range []struct{ url, body, param string }{
		{comp, ``, ""},
		{comp, `{`, ""},
		{comp, `{"prompt":"a"} x`, ""},
		{comp, `[]`, ""},
		{comp, `{}`, "prompt"},
		{comp, `{"prompt":null}`, "prompt"},
		{comp, `{"prompt":""}`, "prompt"},
		{comp, `{"prompt":[]}`, "prompt"},
		{comp, `{"prompt":5}`, "prompt"},
		{comp, `{"prompt":[-1]}`, "prompt"},
		{comp, `{"prompt":[100277]}`, "prompt"},
		{comp, `{"prompt":[1.5]}`, "prompt"},
		{comp, `{"prompt":["a","b"]}`, "prompt"},
		{comp, `{"prompt":[[1],[2]]}`, "prompt"},
		{comp, `{"prompt":"a","max_tokens":0}`, "max_tokens"},
		{comp, `{"prompt":"a","max_tokens":-3}`, "max_tokens"},
		{comp, `{"prompt":"a","max_tokens":2.5}`, ""},
		{comp, `{"prompt":"a","max_tokens":"10"}`, ""},
		{comp, `{"prompt":"a","max_completion_tokens":0}`, "max_completion_tokens"},
		{comp, `{"prompt":"a","max_tokens":5,"max_completion_tokens":6}`, "max_tokens"},
		{comp, `{"prompt":"a","max_tokens":100000}`, "max_tokens"},
		{comp, `{"prompt":"a","min_tokens":-1}`, "min_tokens"},
		{comp, `{"prompt":"a","max_tokens":5,"min_tokens":6}`, "min_tokens"},
		{comp, `{"prompt":"a","min_tokens":17}`, "min_tokens"},
		{comp, `{"prompt":"a","n":2}`, "n"},
		{comp, `{"prompt":"a","stream":"yes"}`, ""},
		{comp, `{"prompt":"a","stream_options":{"include_usage":true}}`, "stream_options"},
		{comp, `{"prompt":"a","messages":[{"role":"user","content":"x"}]}`, "messages"},
		{chat, `{}`, "messages"},
		{chat, `{"messages":[]}`, "messages"},
		{chat, `{"messages":"hi"}`, "messages"},
		{chat, `{"messages":[{"content":"x"}]}`, "messages"},
		{chat, `{"messages":[{"role":"wizard","content":"x"}]}`, "messages"},
		{chat, `{"messages":[{"role":"user"}]}`, "messages"},
		{chat, `{"messages":[{"role":"user","content":5}]}`, "messages"},
		{chat, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "messages"},
		{chat, `{"messages":[{"role":"user","content":"x"}],"prompt":"y"}`, "prompt"},
		{tokURL, `{"prompt":""}`, "prompt"},
		{tokURL, `{"messages":[]}`, "messages"},
		{tokURL, `nope`, ""},
	} {
		res := post(t, http.DefaultClient, tc.url, tc.body)
		var e errorBody
		if err := json.Unmarshal(res.body, &e); err != nil || res.status != 400 || e.Error.Code != 400 || e.Error.Message == "" || e.Error.Type == "" {
			t.Errorf("%s %s: status %d body %s", tc.url[strings.LastIndex(tc.url, "/"):], tc.body, res.status, res.body)
			continue
		}
		if tc.param != "" && (e.Error.Param == nil || *e.Error.Param != tc.param) {
			t.Errorf("%s: param %v, want %s (%s)", tc.body, e.Error.Param, tc.param, e.Error.Message)
		}
	}
	res := post(t, http.DefaultClient, comp, `{"model":"other","prompt":"a"}`)
	if res.status != 404 {
		t.Errorf("unknown model: %d", res.status)
	}
	resp, err := http.Get(comp)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("GET completions: %d", resp.StatusCode)
	}
}

// TestFaults checks each fault is seen by a plain client exactly as the seeded plan says,
// at its configured rate within a 4-sigma binomial bound, and the same on a second run.
func TestFaults(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 1000
	for _, f := range []string{"429=0.1", "500=0.05", "503=0.05", "disconnect=0.1", "malformed=0.1", "stall=0.1:5ms", "slow-first-byte=0.1:5ms"} {
		if err := ParseFault(f, &cfg.Faults); err != nil {
			t.Fatal(err)
		}
	}
	const reqs = 500
	runOnce := func() []string {
		r := startSim(t, cfg)
		outcomes := make([]string, reqs)
		c := &http.Client{}
		for i := range reqs {
			res := post(t, c, r.BaseURL()+"/completions", map[string]any{"prompt": ids(3), "max_tokens": 8, "stream": true})
			var o []string
			if res.status != 200 {
				o = append(o, strconv.Itoa(res.status))
			}
			if res.status == 200 && !res.done {
				o = append(o, "disconnect")
			}
			if res.malformed > 0 {
				o = append(o, "malformed")
			}
			outcomes[i] = strings.Join(o, "+")
			p := r.Server().makePlan(uint64(i), 8, 0, false)
			var want []string
			if p.status != 0 {
				want = append(want, strconv.Itoa(p.status))
			} else {
				if p.disconnectAt >= 0 {
					want = append(want, "disconnect")
				}
				if p.malformedAt >= 0 && (p.disconnectAt < 0 || p.malformedAt < p.disconnectAt) {
					want = append(want, "malformed")
				}
			}
			if w := strings.Join(want, "+"); w != outcomes[i] {
				t.Fatalf("request %d: saw %q, plan says %q", i, outcomes[i], w)
			}
		}
		return outcomes
	}
	first := runOnce()
	count := map[string]int{}
	ok := 0
	for _, o := range first {
		if o == "" || !strings.HasPrefix(o, "4") && !strings.HasPrefix(o, "5") {
			ok++
		}
		for _, k := range strings.Split(o, "+") {
			count[k]++
		}
	}
	check := func(kind string, got, n int, p float64) {
		mean, sd := float64(n)*p, math.Sqrt(float64(n)*p*(1-p))
		if math.Abs(float64(got)-mean) > 4*sd {
			t.Errorf("%s: %d of %d, want %.1f +- %.1f", kind, got, n, mean, 4*sd)
		}
	}
	check("429", count["429"], reqs, 0.1)
	check("500", count["500"], reqs, 0.05)
	check("503", count["503"], reqs, 0.05)
	check("disconnect", count["disconnect"], ok, 0.1)
	second := runOnce()
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Error("faults differ between two runs with the same seed")
	}
}

// TestStallAndSlowFirstByteReal checks the two timing faults in real time with generous
// lower bounds only (a busy machine can only make them longer).
func TestStallAndSlowFirstByteReal(t *testing.T) {
	cfg, _ := Profile("fixed")
	cfg.FixedTTFT, cfg.FixedITL = 0, time.Millisecond
	cfg.Faults = Faults{Stall: 1, StallFor: 80 * time.Millisecond, SlowFirstByte: 1, SlowFirstByteFor: 80 * time.Millisecond}
	r := startSim(t, cfg)
	start := time.Now()
	res := post(t, http.DefaultClient, r.BaseURL()+"/completions", map[string]any{"prompt": "x", "max_tokens": 5, "stream": true})
	if el := time.Since(start); el < 160*time.Millisecond || len(res.chunks) != 5 || !res.done {
		t.Fatalf("took %v with %d chunks", el, len(res.chunks))
	}
}

func TestCloseEndsStreams(t *testing.T) {
	cfg, _ := Profile("fixed")
	cfg.FixedTTFT, cfg.FixedITL = 0, time.Second
	r := startSim(t, cfg)
	resp, err := http.Post(r.BaseURL()+"/completions", "application/json",
		strings.NewReader(`{"prompt":"x","max_tokens":100,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first line %q: %v", line, err)
	}
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	rest, _ := io.ReadAll(br) // ends when the server ends the stream
	if strings.Contains(string(rest), "[DONE]") {
		t.Fatal("stream finished with [DONE] after Close")
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
}

func TestWordsAreSingleTokens(t *testing.T) {
	enc, _ := tokenize.Get(tokenize.CL100kBase)
	var all strings.Builder
	for _, w := range words {
		if enc.Count(w) != 1 {
			t.Errorf("%q is %d tokens", w, enc.Count(w))
		}
		all.WriteString(w)
	}
	if enc.Count(all.String()) != len(words) {
		t.Errorf("concatenation is %d tokens, want %d", enc.Count(all.String()), len(words))
	}
}

func FuzzParseGenRequest(f *testing.F) {
	for _, s := range []string{`{"prompt":"a","max_tokens":3}`, `{"prompt":[1,2]}`, `{"prompt":[[1]]}`, `{"prompt":["x"]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]}`, `{"stream":true,"stream_options":{}}`, `{`,
		`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":"x"}],"tools":[{"name":"t","input_schema":{}}]}`,
		`{"input":[{"role":"user","content":[{"type":"input_text","text":"x"}]}],"instructions":"i","max_output_tokens":3,"tools":[{"type":"function","name":"t"}]}`,
		`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"t","description":"d"}}]}`} {
		for api := range uint8(4) {
			f.Add([]byte(s), api)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, a uint8) {
		api := apiKind(a % 4)
		p, err := parseGenRequest(body, api)
		if err != nil {
			if _, ok := err.(*apiError); !ok {
				t.Fatalf("error %T is not an apiError", err)
			}
			return
		}
		if p.api != api || p.maxTokens == 0 || p.maxTokens < -1 || p.minTokens < 0 || (p.maxTokens > 0 && p.minTokens > p.maxTokens) {
			t.Fatalf("accepted bad limits %+v", p)
		}
		if api != apiCompletions && len(p.prompt.messages) == 0 || api == apiCompletions && p.prompt.text == "" && len(p.prompt.ids) == 0 {
			t.Fatalf("accepted empty prompt %+v", p.prompt)
		}
		if api == apiMessages && p.maxTokens < 1 {
			t.Fatalf("accepted a Messages request without max_tokens: %+v", p)
		}
	})
}

func TestMetrics(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 100
	cfg.Faults.Status503 = 1
	r := startSim(t, cfg)
	post(t, http.DefaultClient, r.BaseURL()+"/completions", map[string]any{"prompt": "x"})
	post(t, http.DefaultClient, r.BaseURL()+"/completions", `{"prompt":""}`)
	resp, err := http.Get(strings.TrimSuffix(r.BaseURL(), "/v1") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	for _, want := range []string{
		`vllm:num_requests_running{model_name="sim-tiny"} 0`,
		`vllm:num_requests_waiting{model_name="sim-tiny"} 0`,
		"# TYPE vllm:kv_cache_usage_perc gauge",
		`llmreplay_sim_faults_total{kind="503",model_name="sim-tiny"} 1`,
		`llmreplay_sim_bad_requests_total{model_name="sim-tiny"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, text)
		}
	}
	cfg.Faults.Status503 = 0
	r = startSim(t, cfg)
	post(t, http.DefaultClient, r.BaseURL()+"/completions", map[string]any{"prompt": ids(5), "max_tokens": 7})
	m := scrape(t, strings.TrimSuffix(r.BaseURL(), "/v1")+"/metrics")
	if m.gen != 7 || m.steps != 7 || m.model <= 0 {
		t.Errorf("after one 7-token request: %+v, want 7 tokens in 7 steps", m)
	}
}
