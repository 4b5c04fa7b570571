package sim

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsHandler serves /metrics from a registry of this Server's own (never the global
// default registry: tests run many sims in one process), holding one collector that reads
// the engine's state under its lock at scrape time. promhttp negotiates the format: the
// classic text format, or OpenMetrics when the scraper asks for it.
func (s *Server) metricsHandler() http.Handler {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newSimCollector(s))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// simCollector exposes the sim's state under vLLM's metric names where one exists, so
// existing dashboards and analyze's server section read it as they read vLLM, and
// llmreplay_sim_* for the model clock, the prefix cache's internals and faults. Every
// metric carries the label model_name, as vLLM's do.
type simCollector struct {
	s *Server

	running, waiting, kvUsage, kvUsed, preemptions *prometheus.Desc
	promptTok, genTok, success                     *prometheus.Desc
	pcQueries, pcHits, pcBlocks, pcFree, pcEvict   *prometheus.Desc // prefix cache on
	logDropped                                     *prometheus.Desc // request log on
	steps, modelTime, lag, badRequests, faults     *prometheus.Desc
	e2e, poolSteps                                 *prometheus.Desc // pooling.go
	fixedLate, fixedStreams                        *prometheus.Desc // fixed profile
}

func newSimCollector(s *Server) *simCollector {
	model := prometheus.Labels{"model_name": s.cfg.Model}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, model)
	}
	c := &simCollector{
		s:           s,
		running:     d("vllm:num_requests_running", "Requests in the running batch."),
		waiting:     d("vllm:num_requests_waiting", "Requests waiting for admission."),
		kvUsage:     d("vllm:kv_cache_usage_perc", "KV-cache usage, 1 = full: the used KV tokens (llmreplay_sim_kv_cache_used_tokens) over the capacity."),
		preemptions: d("vllm:num_preemptions_total", "Running requests preempted to free KV cache (their KV is dropped and recomputed when they are admitted again). Only the on-demand KV admission preempts."),
		promptTok:   d("vllm:prompt_tokens_total", "Prompt tokens processed (prefilled, or read from the prefix cache)."),
		genTok:      d("vllm:generation_tokens_total", "Tokens generated."),
		success:     d("vllm:request_success_total", "Requests finished, by finish reason.", "finished_reason"),
		kvUsed:      d("llmreplay_sim_kv_cache_used_tokens", "KV-cache tokens in use by admitted requests (their reservations and the cached blocks they hold)."),
		steps:       d("llmreplay_sim_steps_total", "Engine steps run."),
		modelTime:   d("llmreplay_sim_model_time_seconds", "The engine's model clock (end of the last step)."),
		lag:         d("llmreplay_sim_lag_seconds", "How far the engine loop was behind real time at its last step (0 = on time; > 0 means the machine limits the sim)."),
		badRequests: d("llmreplay_sim_bad_requests_total", "Requests answered 4xx for bad input."),
		faults:      d("llmreplay_sim_faults_total", "Faults injected, by kind.", "kind"),
		e2e:         d("vllm:e2e_request_latency_seconds", "End-to-end latency of finished requests in model seconds: arrival to the step that finished them (each input of an embeddings or rerank request counts, as in vLLM)."),
		poolSteps:   d("llmreplay_sim_pooling_steps_total", "Steps of the pooling engine (embeddings and rerank)."),
	}
	if s.prefix {
		c.pcQueries = d("vllm:prefix_cache_queries_total", "Prefix cache queries: prompt tokens of the requests admitted.")
		c.pcHits = d("vllm:prefix_cache_hits_total", "Prefix cache hits: prompt tokens read from the prefix cache instead of prefilled.")
		c.pcBlocks = d("llmreplay_sim_prefix_cache_blocks", "Blocks in the prefix cache, held by running requests or not.")
		c.pcFree = d("llmreplay_sim_prefix_cache_free_blocks", "Cached blocks no running request holds: they fill free KV space and are evicted LRU when an admission needs it.")
		c.pcEvict = d("llmreplay_sim_prefix_cache_evictions_total", "Cached blocks evicted to make room for admissions.")
	}
	if s.reqLog != nil {
		c.logDropped = d("llmreplay_sim_request_log_dropped_total", "Request-log lines dropped because the writer was behind (or the log closed).")
	}
	if s.cfg.Fixed {
		c.fixedLate = d("llmreplay_sim_fixed_write_lateness_seconds", "How late the fixed profile's writes left the handler, by token (first or later): the sim's own share of a client's TTFT and ITL error.", "token")
		c.fixedStreams = d("llmreplay_sim_fixed_precise_streams_total", "Fixed-profile streams written by the precise writer (a deadline thread writing each chunk to the socket), and of those the ones handed back to their handler because a write did not complete at once (a slow reader).", "outcome")
	}
	return c
}

func (c *simCollector) descs() []*prometheus.Desc {
	all := []*prometheus.Desc{c.running, c.waiting, c.kvUsage, c.preemptions, c.promptTok, c.genTok, c.success,
		c.pcQueries, c.pcHits, c.pcBlocks, c.pcFree, c.pcEvict, c.logDropped,
		c.kvUsed, c.steps, c.modelTime, c.lag, c.badRequests, c.faults, c.fixedLate, c.fixedStreams, c.e2e, c.poolSteps}
	out := all[:0]
	for _, d := range all {
		if d != nil {
			out = append(out, d)
		}
	}
	return out
}

// Describe sends the descriptors of the metrics this Server exposes.
func (c *simCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

// Collect reads one consistent snapshot of the engine under its lock, then sends it.
func (c *simCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	var running, waiting, kvUsed int
	var steps, promptTok, genTok, preempted int64
	var modelNow, lag float64
	var pcQueries, pcHits, pcEvictions int64
	var pcFree, pcBlocks int
	if s.eng != nil {
		e := s.eng
		e.mu.Lock()
		k := e.core
		running, waiting, kvUsed = len(k.running), k.waitingLen()+len(e.inbox), k.kvUsed
		steps, promptTok, genTok, preempted = k.steps, k.promptTokens, k.genTokens, k.preemptions
		modelNow, lag = k.now.Seconds(), e.lag.Seconds()
		if p := k.pc; p != nil {
			pcQueries, pcHits, pcEvictions = p.queries, p.hits, p.evictions
			pcFree, pcBlocks = p.nFree, len(p.m)
		}
		e.mu.Unlock()
	} else {
		running = int(s.inflight.Load())
		promptTok, genTok = s.fixedPrompt.Load(), s.fixedGen.Load()
	}
	// The pooling engine's inputs are engine requests as vLLM counts them: running,
	// waiting, their prompt tokens, and finished with reason stop.
	pRunning, pWaiting, pPrompt, pDone, pSteps := s.poolCounts()
	running, waiting, promptTok = running+pRunning, waiting+pWaiting, promptTok+pPrompt
	kvFrac := 0.0
	if s.cfg.KVCacheTokens > 0 {
		kvFrac = float64(kvUsed) / float64(s.cfg.KVCacheTokens)
	}
	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	counter := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, lv...)
	}
	gauge(c.running, float64(running))
	gauge(c.waiting, float64(waiting))
	gauge(c.kvUsage, kvFrac)
	counter(c.preemptions, float64(preempted))
	counter(c.promptTok, float64(promptTok))
	counter(c.genTok, float64(genTok))
	counter(c.success, float64(s.finishedLength.Load()), "length")
	counter(c.success, float64(s.finishedStop.Load()+pDone), "stop")
	if s.prefix {
		counter(c.pcQueries, float64(pcQueries))
		counter(c.pcHits, float64(pcHits))
		gauge(c.pcBlocks, float64(pcBlocks))
		gauge(c.pcFree, float64(pcFree))
		counter(c.pcEvict, float64(pcEvictions))
	}
	if s.reqLog != nil {
		counter(c.logDropped, float64(s.reqLog.dropped.Load()))
	}
	gauge(c.kvUsed, float64(kvUsed))
	counter(c.steps, float64(steps))
	gauge(c.modelTime, modelNow)
	gauge(c.lag, lag)
	counter(c.badRequests, float64(s.badRequests.Load()))
	n, sum, buckets := s.e2e.snapshot()
	ch <- prometheus.MustNewConstHistogram(c.e2e, n, sum, buckets)
	counter(c.poolSteps, float64(pSteps))
	for i, n := range faultNames {
		counter(c.faults, float64(s.faultCount[i].Load()), n)
	}
	if s.cfg.Fixed {
		for i, tok := range []string{"first", "later"} {
			h := &s.fixedLate[i]
			buckets := make(map[float64]uint64, len(lateBounds))
			var cum uint64
			for j, le := range lateBounds {
				cum += uint64(h.counts[j].Load())
				buckets[le] = cum
			}
			cum += uint64(h.counts[len(lateBounds)].Load())
			ch <- prometheus.MustNewConstHistogram(c.fixedLate, cum, float64(h.sumNS.Load())/1e9, buckets, tok)
		}
		counter(c.fixedStreams, float64(s.fixedPrecise.Load()), "all")
		counter(c.fixedStreams, float64(s.fixedFallbacks.Load()), "fallback")
	}
}
