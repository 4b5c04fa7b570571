package sim

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/prom"
)

// scrapeSamples scrapes r's /metrics asking for the given Accept header and parses the
// answer with internal/prom, the parser the scraper uses.
func scrapeSamples(t testing.TB, r *Running, accept string) ([]prom.Sample, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", strings.TrimSuffix(r.BaseURL(), "/v1")+"/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", resp.StatusCode)
	}
	s, err := prom.Parse(resp.Body, resp.Header)
	if err != nil {
		t.Fatal(err)
	}
	return s, resp.Header.Get("Content-Type")
}

// sampleValue is the value of the sample called name whose labels include the pairs
// given (name, value, name, value...), and whether there is one.
func sampleValue(ss []prom.Sample, name string, labels ...string) (float64, bool) {
next:
	for i := range ss {
		if ss[i].Name != name {
			continue
		}
		for j := 0; j+1 < len(labels); j += 2 {
			if v, ok := ss[i].Label(labels[j]); !ok || v != labels[j+1] {
				continue next
			}
		}
		return ss[i].Value, true
	}
	return 0, false
}

// TestMetricsFormats: /metrics answers the classic text format by default and OpenMetrics
// when asked (as Prometheus asks; llmreplay's scraper asks for text, prom.Accept), with the same samples, every one
// labelled with the model, under vLLM's names and types.
func TestMetricsFormats(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 100
	r := startSim(t, cfg)
	post(t, http.DefaultClient, r.BaseURL()+"/completions", map[string]any{"prompt": ids(5), "max_tokens": 7})
	text, ctText := scrapeSamples(t, r, "")
	om, ctOM := scrapeSamples(t, r, "application/openmetrics-text;version=1.0.0")
	if !strings.HasPrefix(ctText, "text/plain") || !strings.HasPrefix(ctOM, "application/openmetrics-text") {
		t.Errorf("content types %q and %q, want text/plain and application/openmetrics-text", ctText, ctOM)
	}
	types := map[string]string{}
	for _, s := range text {
		types[s.Name] = s.Type
		if v, _ := s.Label("model_name"); v != "sim-tiny" {
			t.Errorf("%s: model_name %q", s.Name, v)
		}
	}
	for name, typ := range map[string]string{
		"vllm:num_requests_running":       "gauge",
		"vllm:num_requests_waiting":       "gauge",
		"vllm:kv_cache_usage_perc":        "gauge",
		"vllm:num_preemptions_total":      "counter",
		"vllm:prompt_tokens_total":        "counter",
		"vllm:generation_tokens_total":    "counter",
		"vllm:request_success_total":      "counter",
		"vllm:prefix_cache_queries_total": "counter",
		"vllm:prefix_cache_hits_total":    "counter",
		"llmreplay_sim_steps_total":       "counter",
		"llmreplay_sim_faults_total":      "counter",
	} {
		if types[name] != typ {
			t.Errorf("%s: type %q, want %q", name, types[name], typ)
		}
	}
	if v, _ := sampleValue(text, "vllm:generation_tokens_total"); v != 7 {
		t.Errorf("generation tokens %v, want 7", v)
	}
	if v, _ := sampleValue(text, "vllm:request_success_total", "finished_reason", "length"); v != 1 {
		t.Errorf("finished by length %v, want 1", v)
	}
	// The model clock and the lag move between scrapes only while the engine runs; it is idle.
	if len(text) != len(om) {
		t.Fatalf("text has %d samples, OpenMetrics %d", len(text), len(om))
	}
	for i := range text {
		a, b := text[i], om[i]
		if a.Name != b.Name || a.Type != b.Type || a.Value != b.Value || len(a.Labels) != len(b.Labels) {
			t.Errorf("sample %d: text %+v, OpenMetrics %+v", i, a, b)
		}
	}
}

// TestMetricsKVUsage: whenever requests are running, the KV-cache gauge is exactly their
// reservations (prompt + whole output each, the default admission) over the capacity: one
// scrape is one snapshot of the engine. It falls back to 0 when the engine is idle. Which
// scrapes see how many requests depends on the machine; what each must show does not.
func TestMetricsKVUsage(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.PrefixCache = false
	cfg.TimeScale = 1
	r := startSim(t, cfg)
	const n, prompt, out = 4, 100, 1000 // >= 1 ms steps: each request runs over a second
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			post(t, http.DefaultClient, r.BaseURL()+"/completions", map[string]any{"prompt": ids(prompt), "max_tokens": out, "ignore_eos": true})
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	busy, maxRunning := 0, 0.0
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(5 * time.Millisecond):
			ss, _ := scrapeSamples(t, r, "") // text: expfmt parses OpenMetrics ~1000x slower
			running, _ := sampleValue(ss, "vllm:num_requests_running")
			used, _ := sampleValue(ss, "llmreplay_sim_kv_cache_used_tokens")
			usage, _ := sampleValue(ss, "vllm:kv_cache_usage_perc")
			if want := running * (prompt + out); used != want || usage != want/float64(cfg.KVCacheTokens) {
				t.Errorf("with %v running: KV used %v tokens, usage %v; want %v and %v", running, used, usage, want, want/float64(cfg.KVCacheTokens))
			}
			if running > 0 {
				busy++
				maxRunning = max(maxRunning, running)
			}
		}
	}
	t.Logf("%d scrapes with requests running, at most %v at once", busy, maxRunning)
	if busy == 0 {
		t.Error("no scrape saw a request running")
	}
	idle, _ := scrapeSamples(t, r, "")
	if v, _ := sampleValue(idle, "vllm:kv_cache_usage_perc"); v != 0 {
		t.Errorf("idle: KV usage %v, want 0", v)
	}
	if v, ok := sampleValue(idle, "vllm:num_preemptions_total"); v != 0 || !ok {
		t.Errorf("reserve admission: preemptions %v (exposed %v), want 0", v, ok)
	}
}

// TestMetricsPreemptionsOnDemand: with on-demand KV admission and more requests than the
// cache holds at full length, the KV-cache gauge runs near full, vllm:num_preemptions_total
// counts the preempted requests, every request still gets all its tokens, and the gauge
// is 0 again when idle. The engine's decisions are asserted, not its speed: the eight
// requests are sent at once and each needs hundreds of steps.
func TestMetricsPreemptionsOnDemand(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.KVAdmission = KVOnDemand
	cfg.KVCacheTokens, cfg.MaxModelLen = 2048, 2048
	cfg.TimeScale = 4
	r := startSim(t, cfg)
	const n, prompt, out = 8, 100, 400 // 8 x 500 tokens in a 2048-token cache
	var wg sync.WaitGroup
	got := make([]int, n)
	for i := range n {
		wg.Go(func() {
			res := post(t, http.DefaultClient, r.BaseURL()+"/completions", map[string]any{"prompt": ids(prompt + i), "max_tokens": out, "ignore_eos": true})
			var b struct {
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(res.body, &b); err != nil || res.status != 200 {
				t.Errorf("request %d: HTTP %d, %v", i, res.status, err)
			}
			got[i] = b.Usage.CompletionTokens
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	maxUsage := 0.0
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(10 * time.Millisecond):
			ss, _ := scrapeSamples(t, r, "") // text: expfmt parses OpenMetrics ~1000x slower
			v, _ := sampleValue(ss, "vllm:kv_cache_usage_perc")
			maxUsage = max(maxUsage, v)
		}
	}
	idle, _ := scrapeSamples(t, r, "")
	pre, _ := sampleValue(idle, "vllm:num_preemptions_total")
	usage, _ := sampleValue(idle, "vllm:kv_cache_usage_perc")
	t.Logf("%v preemptions, KV usage max %.3f, idle %v", pre, maxUsage, usage)
	if pre == 0 || usage != 0 {
		t.Errorf("preemptions %v, idle KV usage %v; want > 0 and 0", pre, usage)
	}
	for i, g := range got {
		if g != out {
			t.Errorf("request %d: %d tokens, want %d", i, g, out)
		}
	}
	if maxUsage < 0.9 {
		t.Logf("KV usage peaked at %.3f in the scrapes taken (the machine may have scraped rarely)", maxUsage)
	}
}
