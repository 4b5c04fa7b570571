package sweep

import (
	"fmt"
	"math"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"
)

// A sweep of a run that is not generation (embeddings, rerank: analysis.Report.Unary) has
// no output tokens to judge its knee on: its points track when the requests they complete
// keep up with those they are offered, both per second over the steady-state window (an
// endpoint that keeps up answers, at steady state, the requests it is asked in any window),
// and the run is not overloaded (in flight and latency growing through the window); its SLO
// is a latency objective (--slo e2e=...). Requests, not inputs, are what is compared: a
// request the replayer dropped before it was built may have no inputs recorded, but it was
// offered. The table shows latency and inputs and prompt tokens per second in place of
// TTFT, TPOT and token throughput (docs/metrics.md, "Sweep").

// unary reports whether the row's run is not generation.
func (r Row) unary() bool { return r.Report.Unary != nil }

// unary reports whether the sweep's runs are not generation (its points replay one trace,
// so they are all of one kind).
func (s *Report) unary() bool { return len(s.Rows) > 0 && s.Rows[0].unary() }

// unaryPoint fills p's throughputs of a run that is not generation: requests per second,
// offered and sustained, over the steady-state window.
func (r Row) unaryPoint(p *stats.SweepPoint) {
	p.OfferedTokensPerSecond = r.Offered.WindowRequestsPerS
	p.SustainedTokensPerSecond = r.Report.Unary.SustainedRequestsPerS
	if math.IsNaN(p.SustainedTokensPerSecond) {
		p.SustainedTokensPerSecond = 0
	}
}

// unaryFigure reads a figure of a run that is not generation at a point.
func unaryFigure(get func(*analysis.Unary) float64) func(*Report, Row) float64 {
	return func(_ *Report, r Row) float64 {
		if r.Report.Unary == nil {
			return math.NaN()
		}
		return get(r.Report.Unary)
	}
}

// unaryColumn is a rate of a run that is not generation: in the table and the JSON points
// of a sweep of such runs.
func unaryColumn(head string, width int, json string, format func(float64) string, get func(*analysis.Unary) float64) sweepColumn {
	g := unaryFigure(get)
	return sweepColumn{Head: head, Width: width, Text: onUnary, Cell: cell(g, format), JSON: json, OnJSON: onUnary, Value: value(g)}
}

// writeUnaryText writes the table and knee of a sweep of runs that are not generation.
func (s *Report) writeUnaryText(p func(string, ...any)) {
	s.writePointsTable(p)
	p("\nNot generation (embeddings, rerank): latencies in ms; offered and sustained requests/s, inputs/s and prompt tok/s\nover each point's steady-state window; goodput in req/s.\n")
	if !s.closed() {
		p("%s\n", s.describe(s.Saturation, fmt.Sprintf("saturation (sustained requests/s >= %.0f%% of offered, not overloaded)", s.Options.MinRatio*100)))
		if r := s.rowAt(s.Saturation.Pass); r != nil && s.Saturation.Found {
			u := r.Report.Unary
			p("  sustained there: %s req/s, %s inputs/s, %s prompt tok/s\n", f2(u.SustainedRequestsPerS), f1(u.SustainedInputsPerS), f1(u.SustainedPromptTokensPerS))
		}
	} else {
		p("%s\n", s.describeSaturation())
	}
	if !s.SLO.IsZero() {
		p("%s\n", s.describe(s.SLOLimit, fmt.Sprintf("highest load meeting the SLO at %s attainment", pct(s.Options.Attainment*100))))
	}
}

// firstP99 is the p99 a repeated point's TTFT interval holds: TTFT's, or the latency's of
// a run that is not generation (its response comes whole: its first token is its end).
func firstP99(r *analysis.Report) float64 {
	if r.Unary != nil {
		return r.E2E.P99
	}
	return r.TTFT.P99
}

// completedBins are the ok requests of a run that is not generation by the 10 ms bin their
// response ended in: what a repeated point's sustained interval resamples, as it does
// the output tokens of a run of generations.
func completedBins(d *decode.Data) []float64 {
	var bins []float64
	for i, s := range d.Status {
		if s != decode.StOK {
			continue
		}
		b := int(d.End[i] / decode.BinNS)
		for len(bins) <= b {
			bins = append(bins, 0)
		}
		bins[b]++
	}
	return bins
}
