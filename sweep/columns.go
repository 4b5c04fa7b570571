package sweep

import (
	"fmt"
	"math"
	"strings"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/stats"
)

// The sweep's points are one list of columns (sweepColumns): the text table and the JSON
// points read it, on the open-loop axes and the concurrency axis alike, so that a column
// is added once. The columns that are headline figures take their values from the figures'
// declaration (figures.go).

// sweepAxes says on which axes a column shows: open loop (speedup, rate), closed loop
// (concurrency), both, or the agents axis (agent sessions started together).
type sweepAxes uint8

const (
	onOpen sweepAxes = 1 << iota
	onClosed
	onAgents
	// onUnary: a sweep of runs that are not generation (embeddings, rerank; unary.go), on
	// the open- or closed-loop axes.
	onUnary
	onBoth = onOpen | onClosed
	onAll  = onBoth | onAgents | onUnary
)

// sweepColumn is one column of a sweep's points. Text: Head over Width characters (Width 0:
// the last, unpadded column) on the Text axes, each point's Cell. JSON: the path (dot-
// separated: "ttft_ms.p50") on the JSON axes, each point's Value (nil leaves the key out).
type sweepColumn struct {
	Head  string
	Width int
	Text  sweepAxes
	Cell  func(s *Report, r Row) string

	JSON   string
	OnJSON sweepAxes
	Value  func(s *Report, r Row) any
}

// sweepFigure reads the declared figure key's value from a point's report.
func sweepFigure(key string) func(*Report, Row) float64 {
	get := analysis.FigureFloat(key)
	return func(_ *Report, r Row) float64 { return get(r.Report) }
}

// sweepQuantile is a declared distribution's percentile p (P50 or P99) at a point.
func sweepQuantile(key string, p func(stats.Quantiles) float64) func(*Report, Row) float64 {
	get := analysis.FigureQuantile(key, p)
	return func(_ *Report, r Row) float64 { return get(r.Report) }
}

// cell and value adapt a float getter to a text cell (formatted by format) and a JSON
// number (null when undefined).
func cell(get func(*Report, Row) float64, format func(float64) string) func(*Report, Row) string {
	return func(s *Report, r Row) string { return format(get(s, r)) }
}

func value(get func(*Report, Row) float64) func(*Report, Row) any {
	return func(s *Report, r Row) any { return analysis.Num(get(s, r)) }
}

// figureColumn is a headline figure's column: its declared key as the JSON key, on both
// axes in JSON, in the text on the axes given.
func figureColumn(key, head string, width int, text sweepAxes, format func(float64) string) sweepColumn {
	get := sweepFigure(key)
	return sweepColumn{Head: head, Width: width, Text: text, Cell: cell(get, format), JSON: key, OnJSON: onBoth, Value: value(get)}
}

// latencyColumn is a percentile of a declared latency distribution: "TTFT p99" in the
// text, ttft_ms.p99 in the JSON.
// on names the axes beyond both that the column shows on (text and JSON alike).
func latencyColumn(key, name, pn string, p func(stats.Quantiles) float64, text bool, on sweepAxes) sweepColumn {
	get := sweepQuantile(key, p)
	c := sweepColumn{Head: name + " " + pn, Width: 9, Cell: cell(get, f1), JSON: key + "_ms." + pn, OnJSON: onBoth | on, Value: value(get)}
	if text {
		c.Text = onBoth | on
	}
	return c
}

// also adds the axes on to where a column shows, text and JSON.
func also(c sweepColumn, on sweepAxes) sweepColumn {
	if c.Text != 0 {
		c.Text |= on
	}
	if c.OnJSON != 0 {
		c.OnJSON |= on
	}
	return c
}

// onlyOn shows a column on the axes on alone, text and JSON.
func onlyOn(c sweepColumn, on sweepAxes) sweepColumn {
	c.Text, c.OnJSON = on, on
	return c
}

// sweepGoodput and sweepAttainment: without an SLO NaN, which an open-loop point's JSON
// writes as 0 and a closed-loop point's as null (as they always have).
func sweepGoodput(_ *Report, r Row) float64 { good, _ := goodputOf(r.Report); return good }

func sweepAttainment(_ *Report, r Row) float64 { _, att := goodputOf(r.Report); return att }

func zeroOnOpen(get func(*Report, Row) float64, scale float64) func(*Report, Row) any {
	return func(s *Report, r Row) any {
		if !s.closed() && r.Report.Goodput == nil {
			return analysis.Num(0)
		}
		return analysis.Num(get(s, r) * scale)
	}
}

// sweepColumns are the sweep's point columns, in order.
var sweepColumns = []sweepColumn{
	{Width: 10, Text: onOpen | onUnary, Cell: loadCell},
	{Width: 11, Text: onClosed | onAgents, Cell: loadCell, JSON: "load", OnJSON: onAll, Value: func(_ *Report, r Row) any { return r.Load }},
	{JSON: "file", OnJSON: onAll, Value: func(_ *Report, r Row) any { return r.File }},
	agentSessionsColumn,
	agentIncompleteColumn,
	agentColumn("agent_makespan", p50, "makespan_s.p50", "mkspan p50", f1),
	agentColumn("agent_makespan", p90, "makespan_s.p90", "mkspan p90", f1),
	agentColumn("agent_recorded_makespan", p50, "recorded_makespan_s.p50", "rec p50", f1),
	agentColumn("agent_slowdown", p50, "slowdown.p50", "slow p50", f2),
	agentColumn("agent_slowdown", p90, "slowdown.p90", "slow p90", f2),
	{Head: "attain", Width: 7, Text: onAgents, Cell: func(_ *Report, r Row) string { return pct(100 * r.Point().Attainment) },
		JSON: "session_attainment", OnJSON: onAgents, Value: func(_ *Report, r Row) any { return analysis.Num(r.Point().Attainment) }},
	agentScalarColumn("agent_cache_hit_rate", "cache.hit_rate", "cache", 6, func(v float64) string { return pct(100 * v) }),
	agentScalarColumn("agent_peak_calls_in_flight", "peak_calls_in_flight", "peak", 5, func(v float64) string { return fmt.Sprintf("%.0f", v) }),
	{Head: "offer r/s", Width: 10, Text: onOpen | onUnary, Cell: func(_ *Report, r Row) string { return f2(r.Offered.WindowRequestsPerS) },
		JSON: "offered_requests_per_s", OnJSON: onOpen | onUnary, Value: func(_ *Report, r Row) any { return analysis.Num(r.Offered.WindowRequestsPerS) }},
	{Head: "offer tok/s", Width: 11, Text: onOpen, Cell: func(_ *Report, r Row) string { return f1(r.Point().OfferedTokensPerSecond) },
		JSON: "offered_output_tokens_per_s", OnJSON: onOpen, Value: func(_ *Report, r Row) any { return analysis.Num(r.Point().OfferedTokensPerSecond) }},
	figureColumn("requests_per_s", "req/s", 8, onClosed, f2),
	also(figureColumn("output_tokens_per_s", "out tok/s", 10, onClosed, f1), onAgents),
	// The open loop's table prints the knee's sustained throughput (0 when undefined).
	{Head: "sustain t/s", Width: 11, Text: onOpen, Cell: func(_ *Report, r Row) string { return f1(r.Point().SustainedTokensPerSecond) }},
	figureColumn("sustained_output_tokens_per_s", "sustain t/s", 11, onClosed, f1),
	unaryColumn("sustain r/s", 11, "sustained_requests_per_s", f2, func(u *analysis.Unary) float64 { return u.SustainedRequestsPerS }),
	{Head: "ratio", Width: 6, Text: onOpen | onUnary, Cell: func(_ *Report, r Row) string {
		pt, ratio := r.Point(), math.NaN()
		if pt.OfferedTokensPerSecond > 0 {
			ratio = pt.SustainedTokensPerSecond / pt.OfferedTokensPerSecond
		}
		return f2(ratio)
	}},
	{Head: "user mean", Width: 10, Text: onClosed, Cell: func(_ *Report, r Row) string { return f1(r.Report.PerUser.TokensPerS.Mean) },
		JSON: "per_user", OnJSON: onClosed, Value: func(_ *Report, r Row) any {
			return analysis.PerUserJSON(r.Report.PerUser)
		}},
	{Head: "user p50", Width: 10, Text: onClosed, Cell: func(_ *Report, r Row) string { return f1(r.Report.PerUser.TokensPerS.P50) }},
	{Head: "1/TPOT p50", Width: 10, Text: onClosed, Cell: func(_ *Report, r Row) string { return f1(r.Report.PerUser.InvTPOT.P50) }},
	unaryColumn("sustain in/s", 12, "sustained_inputs_per_s", f1, func(u *analysis.Unary) float64 { return u.SustainedInputsPerS }),
	unaryColumn("sustain t/s", 11, "sustained_prompt_tokens_per_s", f1, func(u *analysis.Unary) float64 { return u.SustainedPromptTokensPerS }),
	onlyOn(latencyColumn("latency", "lat", "p50", p50, true, 0), onUnary),
	onlyOn(latencyColumn("latency", "lat", "p99", p99, true, 0), onUnary),
	latencyColumn("ttft", "TTFT", "p50", p50, true, onAgents),
	latencyColumn("ttft", "TTFT", "p99", p99, true, onAgents),
	latencyColumn("tpot", "TPOT", "p50", p50, true, 0),
	latencyColumn("tpot", "TPOT", "p99", p99, true, 0),
	latencyColumn("e2e", "E2E", "p50", p50, false, 0),
	latencyColumn("e2e", "E2E", "p99", p99, true, 0),
	{Head: "goodput", Width: 8, Text: onBoth | onUnary, Cell: cell(sweepGoodput, f2), JSON: "goodput_requests_per_s", OnJSON: onBoth | onUnary, Value: zeroOnOpen(sweepGoodput, 1)},
	{Head: "attain", Width: 7, Text: onBoth | onUnary, Cell: cell(sweepAttainment, pct), JSON: "attainment", OnJSON: onBoth | onUnary, Value: zeroOnOpen(sweepAttainment, 1.0/100)},
	{Head: "errors", Width: 7, Text: onAll, Cell: func(_ *Report, r Row) string { return pct(100 * r.ErrorRate()) },
		JSON: "error_rate", OnJSON: onAll, Value: func(_ *Report, r Row) any { return analysis.Num(r.ErrorRate()) }},
	{JSON: "client_limited", OnJSON: onAll, Value: func(_ *Report, r Row) any { return r.Report.Flags.ClientLimited }},
	{JSON: "overloaded", OnJSON: onAll, Value: func(_ *Report, r Row) any { return r.Report.Flags.Overloaded }},
	{Head: "flags", Text: onAll, Cell: func(_ *Report, r Row) string { return pointFlags(r.Report) }},
	{JSON: "server", OnJSON: onAll, Value: func(_ *Report, r Row) any {
		if v := sweepServerOf(r.Report); v != nil { // absent when the point scraped nothing
			return v
		}
		return nil
	}},
	{JSON: "intervals", OnJSON: onAll, Value: func(_ *Report, r Row) any {
		if v := spreadOf(r.Spread); v != nil { // a repeated point's
			return v
		}
		return nil
	}},
}

func loadCell(_ *Report, r Row) string { return loadText(r.Load) }

// axes is the sweep's axis as a column mask.
func (s *Report) axes() sweepAxes {
	if s.agents() {
		return onAgents
	}
	if s.unary() {
		return onUnary
	}
	if s.closed() {
		return onClosed
	}
	return onOpen
}

// tableLine is one line of the points' table: the cells of the text columns on this axis.
func (s *Report) tableLine(cells func(c *sweepColumn) string) string {
	var b strings.Builder
	first := true
	for i := range sweepColumns {
		c := &sweepColumns[i]
		if c.Text&s.axes() == 0 {
			continue
		}
		switch {
		case first:
			fmt.Fprintf(&b, "%*s", c.Width, cells(c))
		case c.Width == 0:
			b.WriteString("  " + cells(c))
		default:
			fmt.Fprintf(&b, " %*s", c.Width, cells(c))
		}
		first = false
	}
	return b.String()
}

// writePointsTable writes the points' table: a header line and a line per point.
func (s *Report) writePointsTable(p func(string, ...any)) {
	p("%s\n", s.tableLine(func(c *sweepColumn) string {
		if c.Head == "" {
			return s.Axis
		}
		return c.Head
	}))
	for _, r := range s.Rows {
		p("%s\n", s.tableLine(func(c *sweepColumn) string { return c.Cell(s, r) }))
	}
}

// pointJSON is a point's JSON object: the JSON columns on this axis.
func (s *Report) pointJSON(r Row) analysis.Object {
	o := analysis.Object{}
	for i := range sweepColumns {
		c := &sweepColumns[i]
		if c.OnJSON&s.axes() == 0 {
			continue
		}
		v := c.Value(s, r)
		if v == nil {
			continue
		}
		o.SetPath(c.JSON, v)
	}
	return o
}
