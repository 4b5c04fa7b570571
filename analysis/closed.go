package analysis

import (
	"fmt"
	"math"
	"time"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// ClosedBasis is the JSON path of the figure a closed-loop run's client-limited decision
// judges (closed_loop.client_limited_basis); an open-loop run's is schedule_lateness_ms.
const ClosedBasis = "closed_loop.steady_state.schedule_lateness_ms"

// closedLoop fills r.Closed when every run pooled in d is closed-loop (--concurrency):
// the first wave (requests scheduled no later than the last worker's start), its send
// duration and lateness, and the lateness of the steady state after it. Shards of one run
// sum their workers; the largest ramp-up is taken.
func (r *Report) closedLoop(d *decode.Data) {
	if len(d.Runs) == 0 {
		return
	}
	c := &ClosedLoop{}
	var rampNS int64
	closed := 0
	for _, m := range d.Runs {
		if m.Mode == results.ModeClosed {
			closed++
			c.Concurrency += m.Concurrency
			rampNS = max(rampNS, m.RampUpNS)
		}
	}
	switch closed {
	case 0:
		return
	case len(d.Runs):
	default:
		r.warnf("open-loop and closed-loop runs pooled (--allow-mixed): reported as open loop, with no first wave")
		return
	}
	c.RampUpS = float64(rampNS) / 1e9
	last := results.LastWorkerStart(c.Concurrency, time.Duration(rampNS))
	var first, steady []float64
	sentMax := int64(math.MinInt64)
	for i, s := range d.Scheduled {
		sent := d.Sent[i]
		if s <= last {
			c.FirstWaveRequests++
			if sent != decode.Null64 {
				first = append(first, float64(sent-s)/1e6)
				sentMax = max(sentMax, sent)
			}
			continue
		}
		if sent != decode.Null64 {
			steady = append(steady, float64(sent-s)/1e6)
		}
	}
	c.FirstWaveSendS = math.NaN()
	if sentMax != math.MinInt64 {
		c.FirstWaveSendS = float64(sentMax) / 1e9
	}
	c.FirstWaveLateness, c.SteadyLateness = stats.Summarize(first), stats.Summarize(steady)
	if c.FirstWaveRequests == 0 && len(d.Scheduled) > 0 {
		r.warnf("closed loop: no request scheduled by the last worker's start (%.3f s), so no first wave: the file does not follow the closed loop's schedule contract (a replayer older than it?), and every request's lateness is judged", float64(last)/1e9)
	}
	r.Closed = c
}

// basis says what a client-limited decision judged, for the text line and the warning:
// empty for an open-loop run (every sent request's lateness).
func (r *Report) basis() string {
	c := r.Closed
	if c == nil {
		return ""
	}
	if c.FirstWaveRequests == 0 {
		return "closed loop: every request, no first wave found"
	}
	return fmt.Sprintf("closed loop: steady state after the first wave of %d requests, sent in %s ms", c.FirstWaveRequests, f1(c.FirstWaveSendS*1e3))
}
