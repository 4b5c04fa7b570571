package sim

import (
	"net/http"
	"strconv"
)

// serveMetrics writes Prometheus text: vLLM's metric names where one exists, so existing
// dashboards work, and llmreplay_sim_* for the model clock and faults.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	var running, waiting int
	var kvUsed int
	var steps, promptTok, genTok int64
	var modelNow, lag float64
	var pcQueries, pcHits, pcEvictions int64
	var pcFree, pcBlocks int
	if s.eng != nil {
		e := s.eng
		e.mu.Lock()
		c := e.core
		running, waiting, kvUsed = len(c.running), c.waitingLen()+len(e.inbox), c.kvUsed
		steps, promptTok, genTok = c.steps, c.promptTokens, c.genTokens
		modelNow, lag = c.now.Seconds(), e.lag.Seconds()
		if p := c.pc; p != nil {
			pcQueries, pcHits, pcEvictions = p.queries, p.hits, p.evictions
			pcFree, pcBlocks = p.nFree, len(p.m)
		}
		e.mu.Unlock()
	} else {
		running = int(s.inflight.Load())
		promptTok, genTok = s.fixedPrompt.Load(), s.fixedGen.Load()
	}
	lbl := `{model_name="` + s.cfg.Model + `"}`
	b := make([]byte, 0, 4096)
	metric := func(name, typ, help, labels string, v float64) {
		b = append(b, "# HELP "+name+" "+help+"\n# TYPE "+name+" "+typ+"\n"...)
		b = append(b, name...)
		b = append(b, labels...)
		b = append(b, ' ')
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
		b = append(b, '\n')
	}
	kvFrac := 0.0
	if s.cfg.KVCacheTokens > 0 {
		kvFrac = float64(kvUsed) / float64(s.cfg.KVCacheTokens)
	}
	metric("vllm:num_requests_running", "gauge", "Requests in the running batch.", lbl, float64(running))
	metric("vllm:num_requests_waiting", "gauge", "Requests waiting for admission.", lbl, float64(waiting))
	metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage, 1 = full.", lbl, kvFrac)
	metric("vllm:prompt_tokens_total", "counter", "Prompt tokens processed (prefilled, or read from the prefix cache).", lbl, float64(promptTok))
	metric("vllm:generation_tokens_total", "counter", "Tokens generated.", lbl, float64(genTok))
	b = append(b, "# HELP vllm:request_success_total Requests finished, by finish reason.\n# TYPE vllm:request_success_total counter\n"...)
	for _, fr := range []struct {
		reason string
		v      int64
	}{{"length", s.finishedLength.Load()}, {"stop", s.finishedStop.Load()}} {
		b = append(b, `vllm:request_success_total{model_name="`+s.cfg.Model+`",finished_reason="`+fr.reason+`"} `...)
		b = strconv.AppendInt(b, fr.v, 10)
		b = append(b, '\n')
	}
	if s.prefix {
		metric("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries: prompt tokens of the requests admitted.", lbl, float64(pcQueries))
		metric("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits: prompt tokens read from the prefix cache instead of prefilled.", lbl, float64(pcHits))
		metric("llmreplay_sim_prefix_cache_blocks", "gauge", "Blocks in the prefix cache, held by running requests or not.", lbl, float64(pcBlocks))
		metric("llmreplay_sim_prefix_cache_free_blocks", "gauge", "Cached blocks no running request holds: they fill free KV space and are evicted LRU when an admission needs it.", lbl, float64(pcFree))
		metric("llmreplay_sim_prefix_cache_evictions_total", "counter", "Cached blocks evicted to make room for admissions.", lbl, float64(pcEvictions))
	}
	if s.reqLog != nil {
		metric("llmreplay_sim_request_log_dropped_total", "counter", "Request-log lines dropped because the writer was behind (or the log closed).", lbl, float64(s.reqLog.dropped.Load()))
	}
	metric("llmreplay_sim_kv_cache_used_tokens", "gauge", "KV-cache tokens in use by admitted requests (their reservations and the cached blocks they hold).", lbl, float64(kvUsed))
	metric("llmreplay_sim_steps_total", "counter", "Engine steps run.", lbl, float64(steps))
	metric("llmreplay_sim_model_time_seconds", "gauge", "The engine's model clock (end of the last step).", lbl, modelNow)
	metric("llmreplay_sim_lag_seconds", "gauge", "How far the engine loop was behind real time at its last step (0 = on time; > 0 means the machine limits the sim).", lbl, lag)
	metric("llmreplay_sim_bad_requests_total", "counter", "Requests answered 4xx for bad input.", lbl, float64(s.badRequests.Load()))
	b = append(b, "# HELP llmreplay_sim_faults_total Faults injected, by kind.\n# TYPE llmreplay_sim_faults_total counter\n"...)
	for i, n := range faultNames {
		b = append(b, `llmreplay_sim_faults_total{model_name="`+s.cfg.Model+`",kind="`+n+`"} `...)
		b = strconv.AppendInt(b, s.faultCount[i].Load(), 10)
		b = append(b, '\n')
	}
	if s.cfg.Fixed {
		const name = "llmreplay_sim_fixed_write_lateness_seconds"
		b = append(b, "# HELP "+name+" How late the fixed profile's writes left the handler, by token (first or later): the sim's own share of a client's TTFT and ITL error.\n# TYPE "+name+" histogram\n"...)
		for i, tok := range []string{"first", "later"} {
			h := &s.fixedLate[i]
			lbls := `model_name="` + s.cfg.Model + `",token="` + tok + `"`
			var cum int64
			for j := range h.counts {
				cum += h.counts[j].Load()
				le := "+Inf"
				if j < len(lateBounds) {
					le = strconv.FormatFloat(lateBounds[j], 'g', -1, 64)
				}
				b = append(b, name+"_bucket{"+lbls+`,le="`+le+`"} `...)
				b = strconv.AppendInt(b, cum, 10)
				b = append(b, '\n')
			}
			b = append(b, name+"_sum{"+lbls+"} "...)
			b = strconv.AppendFloat(b, float64(h.sumNS.Load())/1e9, 'g', -1, 64)
			b = append(b, '\n')
			b = append(b, name+"_count{"+lbls+"} "...)
			b = strconv.AppendInt(b, cum, 10)
			b = append(b, '\n')
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(b)
}
