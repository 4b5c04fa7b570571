package sweep

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/stats"
)

// The server figures of a sweep's points (docs/metrics.md, "Server metrics"): at each load,
// what the engine said over the point's steady-state window, so that the knee is explained
// (the KV cache full, the queue growing, preemptions starting) as well as located.

// svJSON is a point's server figures in the sweep's JSON.
type svJSON struct {
	KVUsageMean    analysis.Num `json:"kv_cache_usage_mean"`
	KVUsageMax     analysis.Num `json:"kv_cache_usage_max"`
	RunningMean    analysis.Num `json:"running_requests_mean"`
	WaitingMean    analysis.Num `json:"waiting_requests_mean"`
	WaitingMax     analysis.Num `json:"waiting_requests_max"`
	Preemptions    analysis.Num `json:"preemptions"`
	PrefixCacheHit analysis.Num `json:"prefix_cache_hit_rate"`
	GPUUtilMean    analysis.Num `json:"gpu_utilization_pct_mean"`
	ScrapeFailures int64        `json:"scrape_failures"`
}

func sweepServerOf(rep *analysis.Report) *svJSON {
	s := rep.Server
	if s == nil {
		return nil
	}
	var fail int64
	for _, src := range s.Sources {
		fail += src.Failures
	}
	return &svJSON{KVUsageMean: analysis.Num(s.KVUsage.Mean), KVUsageMax: analysis.Num(s.KVUsage.Max), RunningMean: analysis.Num(s.Running.Mean),
		WaitingMean: analysis.Num(s.Waiting.Mean), WaitingMax: analysis.Num(s.Waiting.Max), Preemptions: analysis.Num(s.Preemptions),
		PrefixCacheHit: analysis.Num(s.PrefixHitRate), GPUUtilMean: analysis.Num(s.GPUUtil.Mean), ScrapeFailures: fail}
}

// hasServer reports whether any point scraped.
func (s *Report) hasServer() bool {
	for _, r := range s.Rows {
		if r.Report.Server != nil {
			return true
		}
	}
	return false
}

// writeServerText writes the server table below the points' table, when any point scraped.
func (s *Report) writeServerText(p func(string, ...any)) {
	if !s.hasServer() {
		return
	}
	p("\nServer at each point (scraped, over its steady-state window)\n")
	p("%11s %9s %9s %9s %9s %9s %11s %9s %9s %8s\n", s.Axis, "KV mean", "KV max", "running", "waiting", "wait max", "preemptions", "prefix", "GPU util", "failed")
	for _, r := range s.Rows {
		v := r.Report.Server
		if v == nil {
			p("%11s %9s\n", loadText(r.Load), "-")
			continue
		}
		var fail int64
		for _, src := range v.Sources {
			fail += src.Failures
		}
		pre := "-"
		if !math.IsNaN(v.Preemptions) {
			pre = strconv.FormatFloat(v.Preemptions, 'f', -1, 64)
		}
		p("%11s %9s %9s %9s %9s %9s %11s %9s %9s %8d\n", loadText(r.Load), pct(100*v.KVUsage.Mean), pct(100*v.KVUsage.Max),
			f1(v.Running.Mean), f1(v.Waiting.Mean), f1(v.Waiting.Max), pre, pct(100*v.PrefixHitRate), f1(v.GPUUtil.Mean), fail)
	}
	p("KV-cache usage, prefix-cache hit rate in %%; running and waiting in requests; preemptions: the counter's increase; GPU utilisation in %%; failed: failed scrapes.\n")
	for _, k := range []struct {
		b    stats.Bound
		what string
	}{{s.Saturation, "saturation"}, {s.SLOLimit, "SLO limit"}} {
		if line := s.explainBound(k.b, k.what); line != "" {
			p("%s\n", line)
		}
	}
}

// explainBound says what the engine did at a bound's passing and failing points: the KV
// cache filling, the queue growing and preemptions starting explain a knee. Empty when the
// bound was not found or neither point scraped.
func (s *Report) explainBound(b stats.Bound, what string) string {
	if !b.Found {
		return ""
	}
	at := func(load float64, verdict string) string {
		r := s.rowAt(load)
		if r == nil || r.Report.Server == nil {
			return ""
		}
		v := r.Report.Server
		pre := "no preemption counter"
		if !math.IsNaN(v.Preemptions) {
			pre = strconv.FormatFloat(v.Preemptions, 'f', -1, 64) + " preemptions"
		}
		return fmt.Sprintf("at %s %s (%s): KV cache %s mean, %s max; %s waiting (mean), %s max; %s",
			s.Axis, loadText(load), verdict, pct(100*v.KVUsage.Mean), pct(100*v.KVUsage.Max), f1(v.Waiting.Mean), f1(v.Waiting.Max), pre)
	}
	var parts []string
	if a := at(b.Pass, "passes"); a != "" {
		parts = append(parts, a)
	}
	if b.Bracketed {
		if a := at(b.Fail, "fails"); a != "" {
			parts = append(parts, a)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "  engine at the " + what + ": " + strings.Join(parts, "; ")
}

// serverPlots is the sweep page's server panel: the engine's KV-cache usage (mean, max) and
// waiting requests (mean) against load, on the latency plot's axis; none when no point
// scraped.
func (s *Report) serverPlots() []*analysis.Plot {
	if !s.hasServer() {
		return nil
	}
	var kvMean, kvMax, wait [][2]float64
	for _, r := range s.Rows {
		v := r.Report.Server
		if v == nil {
			continue
		}
		kvMean = append(kvMean, [2]float64{r.Load, 100 * v.KVUsage.Mean})
		kvMax = append(kvMax, [2]float64{r.Load, 100 * v.KVUsage.Max})
		wait = append(wait, [2]float64{r.Load, v.Waiting.Mean})
	}
	minL, maxL := s.Rows[0].Load, s.Rows[len(s.Rows)-1].Load
	logX := maxL/minL >= 8
	var out []*analysis.Plot
	if hasFinite(kvMean) {
		kp := analysis.NewPlot("plot-sweep-kv", "Engine KV-cache usage vs load (scraped)", s.Axis, "%", minL, maxL, logX, 0, 105, false)
		kp.Line(kvMean, "s1")
		kp.Line(kvMax, "s3")
		kp.Dots(kvMean, "dot")
		kp.Legend([2]string{"s1", "mean"}, [2]string{"s3", "max"})
		out = append(out, kp)
	}
	if hasFinite(wait) {
		wp := analysis.NewPlot("plot-sweep-waiting", "Engine waiting requests vs load (scraped, mean)", s.Axis, "requests", minL, maxL, logX, 0, analysis.MaxOf(wait, 1)*1.1, false)
		wp.Line(wait, "s3")
		wp.Dots(wait, "dot")
		out = append(out, wp)
	}
	return out
}

func hasFinite(pts [][2]float64) bool {
	for _, q := range pts {
		if !math.IsNaN(q[1]) && !math.IsInf(q[1], 0) {
			return true
		}
	}
	return false
}
