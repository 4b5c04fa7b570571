package sweep

import (
	"bufio"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/internal/atomicfile"
	"github.com/llmreplay/llmreplay/stats"
)

// Format is the llmreplay.format of sweep.parquet.
const Format = "sweep/v1"

// Row is one load point of a sweep: its results file analysed, and the load it offered.
type Row struct {
	Axis    string // "speedup", "rate" (mean requests/s), "concurrency" or "agents"
	Load    float64
	File    string
	Report  *analysis.Report
	Offered analysis.Offered

	// Spread: a repeated point's intervals across its repeats (NewRepeatedRow); nil
	// for a point run once.
	Spread *PointSpread

	// MaxSlowdown is the agents axis's objective (Config.MaxSlowdown): Point's attainment
	// is then the share of sessions meeting it (SessionAttainment); 0 on the other axes.
	MaxSlowdown float64
}

// NewRow analyses one point's loaded results.
func NewRow(axis string, load float64, file string, d *decode.Data, opts analysis.Options) (Row, error) {
	rep, err := analysis.Analyze(d, opts)
	if err != nil {
		return Row{}, err
	}
	return Row{Axis: axis, Load: load, File: file, Report: rep,
		Offered: analysis.OfferedLoad(d, rep.Throughput.WindowStartS, rep.Throughput.WindowEndS)}, nil
}

// Point is the row as the knee search sees it. Offered and sustained throughput are both
// taken over the steady-state window (output tokens/s; requests/s for a run that is not
// generation, unary.go); attainment is a fraction (NaN without an SLO): on the
// agents axis, of the sessions meeting the slowdown objective (SessionAttainment).
func (r Row) Point() stats.SweepPoint {
	p := stats.SweepPoint{Load: r.Load, OfferedTokensPerSecond: r.Offered.WindowOutputTokensPerS,
		SustainedTokensPerSecond: r.Report.Throughput.SustainedOutputTokensPerS,
		Overloaded:               r.Report.Flags.Overloaded, ClientLimited: r.Report.Flags.ClientLimited,
		Attainment: math.NaN()}
	if math.IsNaN(p.SustainedTokensPerSecond) {
		p.SustainedTokensPerSecond = 0
	}
	if r.unary() { // no output tokens: requests (unary.go)
		r.unaryPoint(&p)
	}
	if r.Axis == Agents {
		p.Attainment = SessionAttainment(r.Report, r.MaxSlowdown)
	} else if g := r.Report.Goodput; g != nil {
		p.Attainment = g.Attainment / 100
	}
	return p
}

// ErrorRate is the share of due requests that failed or were dropped.
func (r Row) ErrorRate() float64 {
	q := r.Report.Requests
	if q.Total == 0 {
		return math.NaN()
	}
	return float64(q.Failed+q.Dropped) / float64(q.Total)
}

// Report is a whole sweep: its points in load order and the knee found among them.
type Report struct {
	Axis    string
	Auto    bool // the points came from stats.SearchKnee, not a given list
	Rows    []Row
	Options stats.KneeOptions
	SLO     analysis.SLO
	// MaxSlowdown: the agents axis's objective (its rows'), 0 for none or another axis.
	MaxSlowdown float64
	// Saturation and SLOLimit bound the knee. For a list sweep they come from stats.BoundsOf over
	// the listed points (the saturation of a concurrency sweep from stats.SaturationOf); for
	// --auto from stats.SearchKnee or stats.SearchConcurrency. On the agents axis the
	// saturation is not judged (agents.go) and SLOLimit is the slowdown objective's.
	Saturation, SLOLimit stats.Bound

	// SaturationBracket and SLOBracket: the bounds at their lowest and highest plausible
	// points given the repeated points' intervals (bracket); nil without repeated points.
	SaturationBracket, SLOBracket *KneeBracket
}

// closed reports whether the sweep's points are closed loops (the concurrency axis): they
// offer no load, so the sweep has no offered or ratio columns, and saturation is where
// doubling the concurrency stops paying (stats.SaturationOf).
func (s *Report) closed() bool { return s.Axis == "concurrency" }

// NewReport orders rows by load and, unless auto bounds are given, finds the bounds
// among the listed points. o's defaults are applied.
func NewReport(axis string, rows []Row, o stats.KneeOptions, auto *stats.KneeResult) *Report {
	o = o.WithDefaults()
	s := &Report{Axis: axis, Rows: append([]Row(nil), rows...), Options: o}
	sort.Slice(s.Rows, func(i, j int) bool { return s.Rows[i].Load < s.Rows[j].Load })
	if len(s.Rows) > 0 {
		s.SLO, s.MaxSlowdown = s.Rows[0].Report.Options.SLO, s.Rows[0].MaxSlowdown
	}
	defer s.bracket()
	if auto != nil {
		s.Auto = true
		s.Saturation, s.SLOLimit = auto.Saturation, auto.SLO
		return s
	}
	pts := make([]stats.SweepPoint, len(s.Rows))
	for i, r := range s.Rows {
		pts[i] = r.Point()
	}
	switch {
	case s.agents(): // not judged (agents.go)
	case s.closed():
		s.Saturation = stats.SaturationOf(pts, o.MinGain)
	default:
		s.Saturation = stats.BoundsOf(pts, func(p stats.SweepPoint) bool { return p.Tracks(o.MinRatio) })
	}
	if s.judged() {
		s.SLOLimit = stats.BoundsOf(pts, func(p stats.SweepPoint) bool { return p.MeetsSLO(o.Attainment) })
	}
	return s
}

// describe says in words what a bound means on this sweep's axis.
func (s *Report) describe(b stats.Bound, what string) string {
	return DescribeBound(b, s.Axis, what, BoundHints{
		Raise:        ", the highest probed: raise the load to find the limit",
		Points:       "the probe budget ran out before the resolution",
		NonMonotonic: "some points above passed or below failed: noisy or non-monotonic, repeat the sweep",
	})
}

// BoundHints are what DescribeBound tells a reader to do about a bound the search left
// open, in the words of the command that searched.
type BoundHints struct {
	Lower        string // after "not reached even at the lowest ...", e.g. " (lower --start)"
	Raise        string // after "at least AXIS LOAD", e.g. ", the highest searched (raise --max)"
	Points       string // why a bracket is wider than the resolution
	NonMonotonic string // after "WARNING: "
	// Load writes a load; nil: a sweep's (four decimals, trailing zeros cut).
	Load func(float64) string
}

// DescribeBound says in words what a bound b of a search on axis means; what names the
// bound. A sweep and a plan (package plan) judge their points alike, so they say the same.
func DescribeBound(b stats.Bound, axis, what string, h BoundHints) string {
	loadText := h.Load
	if loadText == nil {
		loadText = analysis.FormatLoad
	}
	switch {
	case !b.Found && b.LimitedBy == "client":
		return fmt.Sprintf("%s: unknown: the first point was client-limited (the replayer could not keep its schedule), so it says nothing about the endpoint", what)
	case !b.Found:
		return fmt.Sprintf("%s: not reached even at the lowest %s, %s%s", what, axis, loadText(b.Fail), h.Lower)
	case b.LimitedBy == "client":
		return fmt.Sprintf("%s: at least %s %s; above it the replayer was the limit (client-limited), not the endpoint: scale out (--shard) or use a faster client machine", what, axis, loadText(b.Pass))
	case b.LimitedBy == "max" || !b.Bracketed:
		return fmt.Sprintf("%s: at least %s %s%s", what, axis, loadText(b.Pass), h.Raise)
	case b.LimitedBy == "points":
		return fmt.Sprintf("%s: between %s %s and %s (%s)", what, axis, loadText(b.Pass), loadText(b.Fail), h.Points)
	}
	out := fmt.Sprintf("%s: %s %s (fails at %s)", what, axis, loadText(b.Pass), loadText(b.Fail))
	if b.NonMonotonic {
		out += "; WARNING: " + h.NonMonotonic
	}
	return out
}

// rowAt returns the row at load l, or nil.
func (s *Report) rowAt(l float64) *Row {
	for i := range s.Rows {
		if s.Rows[i].Load == l {
			return &s.Rows[i]
		}
	}
	return nil
}

// WriteText writes the sweep table and its knee.
func (s *Report) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }
	how := "listed points"
	switch {
	case s.Auto && s.closed():
		how = fmt.Sprintf("search: doublings, the SLO bound bisected to %.0f%% or adjacent concurrencies", s.Options.Resolution*100)
	case s.Auto:
		how = fmt.Sprintf("search to %.0f%% resolution", s.Options.Resolution*100)
	}
	p("sweep over %s: %d points (%s)", s.Axis, len(s.Rows), how)
	if !s.SLO.IsZero() {
		p(", SLO %s at %s attainment", s.SLO.String(), pct(s.Options.Attainment*100))
	}
	if s.agents() {
		if s.judged() {
			p(", objective %s", s.objectiveText())
		}
		p("\n\n")
		s.writeAgentsText(p)
		s.writeServerText(p)
		s.writeSpreadText(p)
		return bw.Flush()
	}
	if s.unary() {
		p("\n\n")
		s.writeUnaryText(p)
		s.writeServerText(p)
		s.writeSpreadText(p)
		return bw.Flush()
	}
	if s.closed() {
		p("\n\n")
		s.writeClosedText(p)
		s.writeServerText(p)
		s.writeSpreadText(p)
		return bw.Flush()
	}
	p("\n\n")
	s.writePointsTable(p)
	p("\nLatencies in ms; offered and sustained over each point's steady-state window; goodput in req/s.\n")
	if s.Axis != "concurrency" {
		p("%s\n", s.describe(s.Saturation, fmt.Sprintf("saturation (sustained >= %.0f%% of offered, not overloaded)", s.Options.MinRatio*100)))
		if r := s.rowAt(s.Saturation.Pass); r != nil && s.Saturation.Found {
			p("  sustained there: %s output tok/s\n", f1(r.Point().SustainedTokensPerSecond))
		}
	}
	if !s.SLO.IsZero() {
		p("%s\n", s.describe(s.SLOLimit, fmt.Sprintf("highest load meeting the SLO at %s attainment", pct(s.Options.Attainment*100))))
	}
	s.writeServerText(p)
	s.writeSpreadText(p)
	return bw.Flush()
}

// flagNames names the report's flags that matter at a sweep point: client-limited,
// overloaded and, when buffered is asked for, a buffered stream.
func flagNames(rep *analysis.Report, buffered bool) []string {
	var flags []string
	if rep.Flags.ClientLimited {
		flags = append(flags, "client-limited")
	}
	if rep.Flags.Overloaded {
		flags = append(flags, "overloaded")
	}
	if buffered && rep.Flags.Buffered {
		flags = append(flags, "buffered")
	}
	if rep.Flags.PromptOffTarget {
		flags = append(flags, "prompt-off")
	}
	return flags
}

func pointFlags(rep *analysis.Report) string { return strings.Join(flagNames(rep, true), ",") }

// goodputOf returns a row's goodput (req/s) and attainment (percent), NaN without an SLO.
func goodputOf(rep *analysis.Report) (good, att float64) {
	if g := rep.Goodput; g != nil {
		return g.RequestsPerS, g.Attainment
	}
	return math.NaN(), math.NaN()
}

// writeClosedText writes a closed-loop sweep's table: no offered load, per-user speed.
func (s *Report) writeClosedText(p func(string, ...any)) {
	s.writePointsTable(p)
	p("\nClosed loop: each point keeps its concurrency's requests in flight, so it offers no load of its own.\n")
	p("out tok/s over the whole run, sustained over each point's steady-state window; user mean and p50: of each ok\n")
	p("request's output tokens / (E2E - TTFT), tok/s per user; 1/TPOT p50: of (output tokens - 1) / (E2E - TTFT);\n")
	p("latencies in ms; goodput in req/s.\n")
	p("%s\n", s.describeSaturation())
	if r := s.rowAt(s.Saturation.Pass); r != nil && s.Saturation.Found {
		p("  sustained there: %s output tok/s, %s tok/s per user (mean)\n", f1(r.Point().SustainedTokensPerSecond), f1(r.Report.PerUser.TokensPerS.Mean))
	}
	if !s.SLO.IsZero() {
		p("%s\n", s.describe(s.SLOLimit, fmt.Sprintf("highest concurrency meeting the SLO at %s attainment", pct(s.Options.Attainment*100))))
	}
}

// describeSaturation says in words where a closed-loop sweep saturates (stats.SaturationOf).
func (s *Report) describeSaturation() string {
	b := s.Saturation
	unit := "sustained output tok/s"
	if len(s.Rows) > 0 && s.Rows[0].unary() {
		unit = "sustained requests/s" // a run that is not generation: its knee is judged on requests
	}
	what := fmt.Sprintf("saturation (doubling the concurrency adds < %s %s)", pct(s.Options.MinGain*100), unit)
	top, trusted := 0.0, 0
	for _, r := range s.Rows {
		if !r.Report.Flags.ClientLimited {
			top, trusted = r.Load, trusted+1
		}
	}
	switch {
	case b.Found:
		out := fmt.Sprintf("%s: concurrency %s (%s -> %s: %s per doubling)", what, loadText(b.Pass), loadText(b.Pass), loadText(b.Fail), pct(100*s.gainAt(b)))
		if b.NonMonotonic {
			out += "; WARNING: throughput grew again above it: noisy or non-monotonic, repeat the sweep"
		}
		return out
	case trusted == 0 && b.LimitedBy == "client":
		return fmt.Sprintf("%s: unknown: every point was client-limited (the replayer could not keep its workers busy), so they say nothing about the endpoint", what)
	case b.LimitedBy == "client":
		return fmt.Sprintf("%s: not reached up to concurrency %s; above it the replayer was the limit (client-limited), not the endpoint: scale out (--shard) or use a faster client machine", what, loadText(top))
	case trusted < 2:
		return fmt.Sprintf("%s: unknown: it takes two points that are not client-limited", what)
	case b.LimitedBy == "points":
		return fmt.Sprintf("%s: not reached up to concurrency %s when the probe budget (--max-points) ran out", what, loadText(top))
	}
	return fmt.Sprintf("%s: not reached: throughput still grew at concurrency %s, the highest probed: raise the concurrency to find it", what, loadText(top))
}

// gainAt is the gain per doubling between a found saturation bound's two points.
func (s *Report) gainAt(b stats.Bound) float64 {
	lo, hi := s.rowAt(b.Pass), s.rowAt(b.Fail)
	if lo == nil || hi == nil {
		return math.NaN()
	}
	return stats.GainPerDoubling(b.Pass, lo.Point().SustainedTokensPerSecond, b.Fail, hi.Point().SustainedTokensPerSecond)
}

// reportJSON is the --json shape of a sweep (docs/metrics.md, "Sweep").
type reportJSON struct {
	Axis        string            `json:"axis"`
	Auto        bool              `json:"auto"`
	SLO         string            `json:"slo"`
	Attainment  float64           `json:"attainment_target"`
	MinRatio    *float64          `json:"min_ratio,omitempty"`    // open loop only
	MinGain     *float64          `json:"min_gain,omitempty"`     // closed loop only
	Saturation  *BoundJSON        `json:"saturation"`             // null on the agents axis: not judged
	MaxSlowdown *float64          `json:"max_slowdown,omitempty"` // agents axis only
	SLOLimit    *BoundJSON        `json:"slo_limit"`
	Points      []analysis.Object `json:"points"` // sweepColumns' JSON columns on the sweep's axis
	Notes       []string          `json:"notes"`

	// The knee brackets of a sweep with repeated points (docs/metrics.md, "Sweep").
	SaturationBracket *bracketJSON `json:"saturation_bracket,omitempty"`
	SLOLimitBracket   *bracketJSON `json:"slo_limit_bracket,omitempty"`
}

// BoundJSON is a stats.Bound as --json writes it (a sweep's and a plan's): a load not
// found is null.
type BoundJSON struct {
	Found        bool         `json:"found"`
	Bracketed    bool         `json:"bracketed"`
	PassLoad     analysis.Num `json:"pass_load"`
	FailLoad     analysis.Num `json:"fail_load"`
	LimitedBy    string       `json:"limited_by"`
	NonMonotonic bool         `json:"non_monotonic"`
	// GainPerDoubling: a closed-loop saturation's gain from pass_load to fail_load.
	GainPerDoubling *analysis.Num `json:"gain_per_doubling,omitempty"`
	Summary         string        `json:"summary"`
}

func (s *Report) boundJSON(b stats.Bound, what string) BoundJSON {
	return NewBoundJSON(b, s.describe(b, what))
}

// NewBoundJSON is b as --json writes it, with summary, its words.
func NewBoundJSON(b stats.Bound, summary string) BoundJSON {
	j := BoundJSON{Found: b.Found, Bracketed: b.Bracketed, LimitedBy: b.LimitedBy, NonMonotonic: b.NonMonotonic,
		Summary: summary, PassLoad: analysis.Num(math.NaN()), FailLoad: analysis.Num(math.NaN())}
	if b.Found {
		j.PassLoad = analysis.Num(b.Pass)
	}
	if b.Bracketed {
		j.FailLoad = analysis.Num(b.Fail)
	}
	return j
}

// WriteJSON writes the sweep as one JSON object.
func (s *Report) WriteJSON(w io.Writer) error {
	out := reportJSON{Axis: s.Axis, Auto: s.Auto, SLO: s.SLO.String(), Attainment: s.Options.Attainment,
		Points: []analysis.Object{}, Notes: []string{}}
	sat := s.boundJSON(s.Saturation, "saturation")
	switch {
	case s.agents():
		out.MaxSlowdown = &s.MaxSlowdown
	case s.closed():
		out.MinGain = &s.Options.MinGain
		out.Saturation = &sat
		out.Saturation.Summary = s.describeSaturation()
		if s.Saturation.Found {
			g := analysis.Num(s.gainAt(s.Saturation))
			out.Saturation.GainPerDoubling = &g
		}
	default:
		out.MinRatio = &s.Options.MinRatio
		out.Saturation = &sat
	}
	if s.judged() {
		what := "SLO limit"
		if s.agents() {
			what = "highest agents count meeting " + s.objectiveText()
		}
		b := s.boundJSON(s.SLOLimit, what)
		out.SLOLimit = &b
	}
	for _, r := range s.Rows {
		if r.Report.Flags.ClientLimited {
			out.Notes = append(out.Notes, fmt.Sprintf("%s %s was client-limited: its figures are the replayer's limit, not the endpoint's", s.Axis, loadText(r.Load)))
		}
		out.Points = append(out.Points, s.pointJSON(r))
	}
	out.SaturationBracket, out.SLOLimitBracket = s.bracketJSON(s.SaturationBracket, "saturation"), s.bracketJSON(s.SLOBracket, "SLO limit")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// WriteParquet writes sweep.parquet: one row per point, the axis and offered load (not on
// the concurrency axis: a closed loop offers none) followed by the point's summary columns
// (the same names as summary.parquet).
func (s *Report) WriteParquet(path string) error {
	if len(s.Rows) == 0 {
		return fmt.Errorf("sweep: write %s: the sweep has no points", path)
	}
	rows := make([][]analysis.Column, len(s.Rows))
	for i, r := range s.Rows {
		cs := []analysis.Column{analysis.NewColumn("axis", s.Axis), analysis.NewColumn("load", r.Load), analysis.NewColumn("results_file", r.File)}
		if s.agents() {
			cs = append(cs, analysis.NewColumn("max_slowdown", s.MaxSlowdown), analysis.NewColumn("session_attainment", r.Point().Attainment))
		} else if !s.closed() {
			cs = append(cs, analysis.NewColumn("offered_requests_per_s", r.Offered.WindowRequestsPerS), analysis.NewColumn("offered_output_tokens_per_s", r.Offered.WindowOutputTokensPerS))
		}
		cs = append(cs, analysis.NewColumn("error_rate", r.ErrorRate()))
		if s.repeated() {
			cs = append(cs, spreadCols(r.Spread)...)
		}
		rows[i] = append(cs, r.Report.SummaryColumns()...)
	}
	return analysis.WriteColumns(path, Format, rows)
}

// WriteHTML writes a self-contained page: throughput against offered load and latency
// against load, the knee marked, and the table.
func (s *Report) WriteHTML(w io.Writer) error {
	var text strings.Builder
	if err := s.WriteText(&text); err != nil {
		return err
	}
	var off, sus, ttft50, ttft99, tpot99 [][2]float64
	maxX, maxY, maxLat := 0.0, 0.0, 0.0
	for _, r := range s.Rows {
		pt := r.Point()
		x := pt.OfferedTokensPerSecond
		off = append(off, [2]float64{x, pt.OfferedTokensPerSecond})
		sus = append(sus, [2]float64{x, pt.SustainedTokensPerSecond})
		first := r.Report.TTFT
		if r.unary() { // no first token: the latency
			first = r.Report.E2E
		}
		ttft50 = append(ttft50, [2]float64{r.Load, first.P50})
		ttft99 = append(ttft99, [2]float64{r.Load, first.P99})
		tpot99 = append(tpot99, [2]float64{r.Load, r.Report.TPOT.P99})
		maxX = math.Max(maxX, x)
		maxY = math.Max(maxY, math.Max(pt.OfferedTokensPerSecond, pt.SustainedTokensPerSecond))
		for _, v := range []float64{first.P99, r.Report.TPOT.P99} {
			if !math.IsNaN(v) {
				maxLat = math.Max(maxLat, v)
			}
		}
	}
	var plots []*analysis.Plot
	switch {
	case s.agents():
		plots = s.agentPlots()
	case s.closed() && !s.unary():
		plots = s.closedPlots()
	case s.closed():
	default:
		title, xl, yl := "Sustained vs offered output throughput", "offered output tok/s", "output tok/s"
		if s.unary() {
			title, xl, yl = "Sustained vs offered requests/s", "offered req/s", "req/s"
		}
		tp := analysis.NewPlot("plot-sweep-throughput", title, xl, yl, 0, maxX*1.05, false, 0, maxY*1.1, false)
		tp.Line(off, "ref")
		tp.Line(sus, "s1")
		tp.Dots(sus, "dot")
		if r := s.rowAt(s.Saturation.Pass); r != nil && s.Saturation.Found {
			tp.VLine(r.Point().OfferedTokensPerSecond, "slo", "knee: "+s.Axis+" "+loadText(r.Load))
		}
		tp.Legend([2]string{"s1", "sustained"}, [2]string{"ref", "offered (y = x)"})
		plots = append(plots, tp)
	}
	minL, maxL := s.Rows[0].Load, s.Rows[len(s.Rows)-1].Load
	lp := analysis.NewPlot("plot-sweep-latency", "Latency vs load", s.Axis, "ms", minL, maxL, maxL/minL >= 8, 0, maxLat*1.1, false)
	lp.Line(ttft50, "s1")
	lp.Line(ttft99, "s3")
	if !s.agents() && !s.unary() { // the agents axis's table has no TPOT: its question is the sessions'
		lp.Line(tpot99, "s2")
	}
	lp.Dots(ttft99, "dot")
	if s.Saturation.Found && !s.closed() {
		lp.VLine(s.Saturation.Pass, "ref", "saturation")
	}
	if s.judged() && s.SLOLimit.Found {
		lp.VLine(s.SLOLimit.Pass, "slo", "SLO limit")
	}
	switch {
	case s.unary():
		lp.Legend([2]string{"s1", "latency p50"}, [2]string{"s3", "latency p99"})
	case s.agents():
		lp.Legend([2]string{"s1", "TTFT p50"}, [2]string{"s3", "TTFT p99"})
	default:
		lp.Legend([2]string{"s1", "TTFT p50"}, [2]string{"s3", "TTFT p99"}, [2]string{"s2", "TPOT p99"})
	}
	plots = append(append(plots, lp), s.serverPlots()...)
	bw := bufio.NewWriter(w)
	err := sweepTemplate.Execute(bw, sweepPage{Title: "llmreplay sweep", Style: analysis.PageStyle, Script: analysis.PageScript, Axis: s.Axis, Plots: plots, Text: text.String()})
	if err != nil {
		return fmt.Errorf("sweep: html: %w", err)
	}
	return bw.Flush()
}

// sweepPage is what sweepTemplate reads.
type sweepPage struct {
	Title  string
	Style  template.CSS
	Script template.JS
	Axis   string
	Plots  []*analysis.Plot
	Text   string
}

var sweepTemplate = analysis.PageTemplate(`<h1>llmreplay sweep over {{.Axis}}</h1>
<div class="grid-2">
{{range $i, $p := .Plots}}{{if $i}}{{"\n"}}{{end}}{{template "svg" $p}}{{end}}
</div>
<h2>Points</h2><pre>{{.Text}}</pre>
`)

// closedPlots are a closed-loop sweep's plots against concurrency on a log axis: output
// throughput (overall and sustained) with the knee marked, and per-user speed.
func (s *Report) closedPlots() []*analysis.Plot {
	var all, sus, mean, p50, inv [][2]float64
	for _, r := range s.Rows {
		t, u := r.Report.Throughput, r.Report.PerUser
		all = append(all, [2]float64{r.Load, t.OutputTokensPerS})
		sus = append(sus, [2]float64{r.Load, t.SustainedOutputTokensPerS})
		mean = append(mean, [2]float64{r.Load, u.TokensPerS.Mean})
		p50 = append(p50, [2]float64{r.Load, u.TokensPerS.P50})
		inv = append(inv, [2]float64{r.Load, u.InvTPOT.P50})
	}
	// Room on the right for the knee's label when the knee is one of the last points.
	lo, hi := s.Rows[0].Load, s.Rows[len(s.Rows)-1].Load*1.5
	maxT := math.Max(analysis.MaxOf(all, 1), analysis.MaxOf(sus, 1))
	tp := analysis.NewPlot("plot-sweep-throughput", "Output throughput vs concurrency", "concurrency (log scale)", "output tok/s", lo, hi, true, 0, maxT*1.1, false)
	tp.Line(all, "s2")
	tp.Line(sus, "s1")
	tp.Dots(sus, "dot")
	if s.Saturation.Found {
		tp.VLine(s.Saturation.Pass, "slo", "knee: concurrency "+loadText(s.Saturation.Pass))
	}
	tp.Legend([2]string{"s1", "sustained"}, [2]string{"s2", "overall"})
	maxU := math.Max(analysis.MaxOf(mean, 1), math.Max(analysis.MaxOf(p50, 1), analysis.MaxOf(inv, 1)))
	up := analysis.NewPlot("plot-sweep-per-user", "Per-user speed vs concurrency", "concurrency (log scale)", "tok/s per user", lo, hi, true, 0, maxU*1.1, false)
	up.Line(mean, "s1")
	up.Line(p50, "s3")
	up.Line(inv, "s2")
	up.Dots(mean, "dot")
	if s.Saturation.Found {
		up.VLine(s.Saturation.Pass, "ref", "") // unlabelled: the legend sits there; the throughput plot names it
	}
	up.Legend([2]string{"s1", "tokens/(E2E-TTFT) mean"}, [2]string{"s3", "tokens/(E2E-TTFT) p50"}, [2]string{"s2", "1/TPOT p50"})
	return []*analysis.Plot{tp, up}
}

// WriteHTMLFile writes the sweep page to path through a temporary file.
func (s *Report) WriteHTMLFile(path string) error {
	if err := atomicfile.Write(path, s.WriteHTML); err != nil {
		return fmt.Errorf("sweep: write %s: %w", path, err)
	}
	return nil
}
