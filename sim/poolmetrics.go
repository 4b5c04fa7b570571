package sim

import (
	"sync/atomic"
	"time"
)

// e2eBounds are vLLM's buckets for vllm:e2e_request_latency_seconds, in seconds
// (request_latency_buckets in vllm/v1/metrics/loggers.py).
var e2eBounds = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
	40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}

// e2eHist counts requests' end-to-end latencies (model time: arrival to the end of the
// step that finished them) in e2eBounds' buckets, in constant memory. vLLM observes
// every finished engine request, generation or pooling; so does the sim (a pooling
// request's inputs each count, as each is an engine request in vLLM).
type e2eHist struct {
	counts [22]atomic.Int64 // len(e2eBounds) + the +Inf bucket
	sumNS  atomic.Int64
}

func (h *e2eHist) observe(d time.Duration) {
	d = max(d, 0)
	i := 0
	for i < len(e2eBounds) && d.Seconds() > e2eBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.sumNS.Add(int64(d))
}

// snapshot returns the histogram as Prometheus wants it: the count, the sum in seconds
// and the cumulative count at each bound.
func (h *e2eHist) snapshot() (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(e2eBounds))
	for j, le := range e2eBounds {
		count += uint64(h.counts[j].Load())
		buckets[le] = count
	}
	count += uint64(h.counts[len(e2eBounds)].Load())
	return count, float64(h.sumNS.Load()) / 1e9, buckets
}

// poolCounts reads the pooling side's figures for /metrics: inputs running and waiting,
// prompt tokens prefilled, inputs finished, and the pooling engine's steps.
func (s *Server) poolCounts() (running, waiting int, prompt, done, steps int64) {
	if s.pool == nil {
		return int(s.poolInflight.Load()), 0, s.fixedPoolPrompt.Load(), s.poolFixedDone.Load(), 0
	}
	st := s.pool.Stats()
	return st.Running, st.Waiting, st.PromptTokens, st.Done, st.Steps
}
