package sweep

import (
	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/stats"
)

// A sweep's reports print their figures as a run's report does (analysis's formats), so
// that a point's numbers read the same in both.
var (
	f1       = analysis.Format1
	f2       = analysis.Format2
	pct      = analysis.FormatPct
	loadText = analysis.FormatLoad
)

func p50(q stats.Quantiles) float64 { return q.P50 }
func p99(q stats.Quantiles) float64 { return q.P99 }
func p90(q stats.Quantiles) float64 { return q.P90 }
