package sim

import (
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
// when asked (as Prometheus and llmreplay's scraper ask), with the same samples, every one
// labelled with the model, under vLLM's names and types.
func TestMetricsFormats(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 100
	r := startSim(t, cfg)
	post(t, http.DefaultClient, r.BaseURL()+"/completions", map[string]any{"prompt": ids(5), "max_tokens": 7})
	text, ctText := scrapeSamples(t, r, "")
	om, ctOM := scrapeSamples(t, r, prom.Accept)
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

// TestMetricsKVUsage: with requests running the KV-cache gauge is exactly their
// reservations (prompt + whole output each, the default admission) over the capacity, and
// it falls back to 0 when the engine is idle.
func TestMetricsKVUsage(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.PrefixCache = false
	cfg.TimeScale = 1
	r := startSim(t, cfg)
	const n, prompt, out = 4, 100, 400 // ~1.5 ms steps: each request runs ~0.6 s
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			post(t, http.DefaultClient, r.BaseURL()+"/completions", map[string]any{"prompt": ids(prompt), "max_tokens": out, "ignore_eos": true})
		})
	}
	var busy []prom.Sample
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ss, _ := scrapeSamples(t, r, prom.Accept)
		if v, _ := sampleValue(ss, "vllm:num_requests_running"); v == n {
			busy = ss
			break
		}
	}
	if busy == nil {
		t.Fatal("never saw all requests running")
	}
	used, _ := sampleValue(busy, "llmreplay_sim_kv_cache_used_tokens")
	usage, _ := sampleValue(busy, "vllm:kv_cache_usage_perc")
	if want := float64(n * (prompt + out)); used != want || usage != want/float64(cfg.KVCacheTokens) {
		t.Errorf("with %d running: KV used %v tokens, usage %v; want %v and %v", n, used, usage, want, want/float64(cfg.KVCacheTokens))
	}
	wg.Wait()
	idle, _ := scrapeSamples(t, r, "")
	if v, _ := sampleValue(idle, "vllm:kv_cache_usage_perc"); v != 0 {
		t.Errorf("idle: KV usage %v, want 0", v)
	}
	if v, ok := sampleValue(idle, "vllm:num_preemptions_total"); v != 0 || !ok {
		t.Errorf("reserve admission: preemptions %v (exposed %v), want 0", v, ok)
	}
}
