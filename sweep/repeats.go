package sweep

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"
)

// Span is an interval [Lo, Hi] of one figure at a repeated sweep point; NaN ends when the
// figure is undefined (attainment without an SLO).
type Span struct{ Lo, Hi float64 }

// PointSpread is what a repeated sweep point (sweep --repeat N) adds to its row: the
// interval of each figure the knee judges, across the point's repeats.
type PointSpread struct {
	// Method names how the intervals were made (SpreadMethod).
	Method  string
	Repeats int
	Files   []string // the repeats' files, repeat order
	// Sustained output tok/s over the steady-state window; Attainment a fraction (NaN
	// without an SLO); TTFT and TPOT p99 in ms.
	Sustained, Attainment, TTFTP99, TPOTP99 Span
	// OverloadedAny: some repeat was overloaded; OverloadedAll: every one was.
	OverloadedAny, OverloadedAll bool
}

// How a repeated point's intervals are made: SpreadMethod with the repeats' data,
// RangeMethod without (docs/metrics.md, "Sweep").
const (
	SpreadMethod = "the 95% bootstrap interval of the repeats pooled (" + stats.BootstrapIntervalMethod +
		"; requests for attainment and p99s, 1 s windows of each repeat's steady state, circular blocks, for sustained tok/s), widened to the range of the repeats' values"
	RangeMethod = "the range of the repeats' values (min - max)"
)

// SpreadBootstrap is the bootstrap of the repeated points' intervals: the defaults (95%,
// 2000 resamples), a fixed seed, so a sweep's report is the same each time it is made.
var SpreadBootstrap = stats.Bootstrap{Seed: 1}

// NewRepeatedRow returns the row of a repeated point from its repeats' rows (repeat
// order) and, when given, their loaded data (the same order): the row of the median
// repeat by sustained output tok/s (on the agents axis by slowdown p50: medianKey; the
// lower of the middle two for an even count), a row
// of figures measured together, with Spread set to the intervals across all the repeats:
// with data, each figure's SpreadBootstrap interval over the repeats pooled, widened to
// the range of the repeats' values (SpreadMethod); without, the range (RangeMethod).
func NewRepeatedRow(rows []Row, data []*decode.Data) Row {
	sorted := slices.Clone(rows)
	slices.SortStableFunc(sorted, func(a, b Row) int { return cmp.Compare(a.medianKey(), b.medianKey()) })
	row := sorted[(len(sorted)-1)/2]
	sp := &PointSpread{Method: RangeMethod, Repeats: len(rows), OverloadedAll: true}
	span := func(get func(Row) float64) Span {
		s := Span{math.NaN(), math.NaN()}
		for _, r := range rows {
			v := get(r)
			if math.IsNaN(v) {
				continue
			}
			if math.IsNaN(s.Lo) || v < s.Lo {
				s.Lo = v
			}
			if math.IsNaN(s.Hi) || v > s.Hi {
				s.Hi = v
			}
		}
		return s
	}
	sp.Sustained = span(func(r Row) float64 { return r.Point().SustainedTokensPerSecond })
	sp.Attainment = span(func(r Row) float64 { return r.Point().Attainment })
	sp.TTFTP99 = span(func(r Row) float64 { return firstP99(r.Report) })
	sp.TPOTP99 = span(func(r Row) float64 { return r.Report.TPOT.P99 })
	for _, r := range rows {
		sp.Files = append(sp.Files, r.File)
		sp.OverloadedAny = sp.OverloadedAny || r.Report.Flags.Overloaded
		sp.OverloadedAll = sp.OverloadedAll && r.Report.Flags.Overloaded
	}
	if len(data) == len(rows) {
		sp.Method = SpreadMethod
		reps := make([]*analysis.Report, len(rows))
		for i, r := range rows {
			reps[i] = r.Report
		}
		sus, att, ttft, tpot := pooledIntervals(reps, data, SpreadBootstrap, loadText(row.Load))
		sp.Sustained, sp.Attainment = sp.Sustained.hull(sus), sp.Attainment.hull(att)
		sp.TTFTP99, sp.TPOTP99 = sp.TTFTP99.hull(ttft), sp.TPOTP99.hull(tpot)
	}
	row.Spread = sp
	return row
}

// medianKey orders a point's repeats for NewRepeatedRow: by sustained output tok/s, and
// on the agents axis by the slowdown's p50 (a repeat without one last), the figure that
// axis judges: its throughput says little (agents.go).
func (r Row) medianKey() float64 {
	if r.Axis != Agents {
		return r.Point().SustainedTokensPerSecond
	}
	if v := agentQuantile("agent_slowdown", p50)(nil, r); !math.IsNaN(v) {
		return v
	}
	return math.Inf(1)
}

// hull is the smallest span holding s and the interval c (s when c is undefined).
func (s Span) hull(c stats.CI) Span {
	if !c.Valid() {
		return s
	}
	if math.IsNaN(s.Lo) {
		return Span{c.Lo, c.Hi}
	}
	return Span{math.Min(s.Lo, c.Lo), math.Max(s.Hi, c.Hi)}
}

// KneeBracket is a bound of the knee (saturation or SLO limit) at its lowest and highest
// plausible point given the repeated points' intervals (docs/metrics.md, "Sweep"): Low is
// the bound found when every point is judged at the pessimistic end of its intervals, High
// at the optimistic end.
type KneeBracket struct {
	Low, High stats.Bound
}

// repeated reports whether some row has intervals.
func (s *Report) repeated() bool {
	for _, r := range s.Rows {
		if r.Spread != nil {
			return true
		}
	}
	return false
}

// bracket sets the knee brackets of a sweep with repeated points. At the pessimistic end a
// point's sustained throughput and attainment are their intervals' Lo and it is overloaded
// when some repeat was; at the optimistic end Hi, and overloaded when every repeat was. On
// the concurrency axis the gain between two points is at its least from the first's Hi to
// the second's Lo (the earliest plausible saturation) and at its most from Lo to Hi.
func (s *Report) bracket() {
	if !s.repeated() {
		return
	}
	o := s.Options
	lo, hi := make([]stats.SweepPoint, len(s.Rows)), make([]stats.SweepPoint, len(s.Rows))
	for i, r := range s.Rows {
		p := r.Point()
		lo[i], hi[i] = p, p
		if sp := r.Spread; sp != nil {
			lo[i].SustainedTokensPerSecond, hi[i].SustainedTokensPerSecond = sp.Sustained.Lo, sp.Sustained.Hi
			lo[i].Attainment, hi[i].Attainment = sp.Attainment.Lo, sp.Attainment.Hi
			lo[i].Overloaded, hi[i].Overloaded = sp.OverloadedAny, sp.OverloadedAll
		}
	}
	switch {
	case s.agents(): // saturation not judged (agents.go)
	case s.closed():
		gain := func(a, b []stats.SweepPoint) func(i, j int) float64 {
			return func(i, j int) float64 {
				return stats.GainPerDoubling(s.Rows[i].Load, a[i].SustainedTokensPerSecond, s.Rows[j].Load, b[j].SustainedTokensPerSecond)
			}
		}
		pts := make([]stats.SweepPoint, len(s.Rows))
		for i, r := range s.Rows {
			pts[i] = r.Point()
		}
		s.SaturationBracket = &KneeBracket{Low: stats.SaturationBy(pts, o.MinGain, gain(hi, lo)), High: stats.SaturationBy(pts, o.MinGain, gain(lo, hi))}
	default:
		tracks := func(p stats.SweepPoint) bool { return p.Tracks(o.MinRatio) }
		s.SaturationBracket = &KneeBracket{Low: stats.BoundsOf(lo, tracks), High: stats.BoundsOf(hi, tracks)}
	}
	if s.judged() {
		meets := func(p stats.SweepPoint) bool { return p.MeetsSLO(o.Attainment) }
		s.SLOBracket = &KneeBracket{Low: stats.BoundsOf(lo, meets), High: stats.BoundsOf(hi, meets)}
	}
}

// describeBracket says in words where a bracketed bound lies.
func (s *Report) describeBracket(b *KneeBracket, what string) string {
	end := func(x stats.Bound) string {
		switch {
		case !x.Found && x.LimitedBy == "client":
			return "unknown (the first point was client-limited)"
		case !x.Found && x.LimitedBy == "max": // a closed loop's saturation: still growing
			return "not reached up to the highest " + s.Axis
		case !x.Found:
			return "not reached even at the lowest " + s.Axis
		case x.LimitedBy == "client":
			return fmt.Sprintf("%s %s at least (client-limited above)", s.Axis, loadText(x.Pass))
		case !x.Bracketed:
			return fmt.Sprintf("%s %s at least (the highest probed)", s.Axis, loadText(x.Pass))
		}
		return fmt.Sprintf("%s %s", s.Axis, loadText(x.Pass))
	}
	lo, hi := end(b.Low), end(b.High)
	if lo == hi {
		return fmt.Sprintf("%s given the repeats' intervals: %s at both ends", what, lo)
	}
	return fmt.Sprintf("%s given the repeats' intervals: %s (pessimistic end) to %s (optimistic end)", what, lo, hi)
}

// writeSpreadText writes a repeated sweep's intervals and knee brackets, under its table.
func (s *Report) writeSpreadText(p func(string, ...any)) {
	if !s.repeated() {
		return
	}
	n, method := 0, ""
	for _, r := range s.Rows {
		if r.Spread != nil {
			n, method = max(n, r.Spread.Repeats), r.Spread.Method
		}
	}
	by := "sustained tok/s"
	if s.agents() {
		by = "slowdown p50"
	}
	p("\nRepeated points (%d repeats; each row above is the point's median repeat by %s).\nIntervals: %s.\n", n, by, method)
	p("%11s %8s %21s %17s %21s %21s  %s\n", s.Axis, "repeats", "sustain t/s", "attain", "TTFT p99", "TPOT p99", "overloaded")
	for _, r := range s.Rows {
		sp := r.Spread
		if sp == nil {
			p("%11s %8s\n", loadText(r.Load), "1")
			continue
		}
		p("%11s %8d %21s %17s %21s %21s  %s\n", loadText(r.Load), sp.Repeats,
			f1(sp.Sustained.Lo)+" - "+f1(sp.Sustained.Hi), pct(100*sp.Attainment.Lo)+" - "+pct(100*sp.Attainment.Hi),
			f1(sp.TTFTP99.Lo)+" - "+f1(sp.TTFTP99.Hi), f1(sp.TPOTP99.Lo)+" - "+f1(sp.TPOTP99.Hi), sp.overloaded())
	}
	if b := s.SaturationBracket; b != nil {
		p("%s\n", s.describeBracket(b, "saturation"))
	}
	if b := s.SLOBracket; b != nil {
		p("%s\n", s.describeBracket(b, "SLO limit"))
	}
}

// spreadJSON is a repeated point's "intervals" key; bracketJSON a knee bracket.
type spreadJSON struct {
	Method     string          `json:"method"`
	Repeats    int             `json:"repeats"`
	Files      []string        `json:"files"`
	Sustained  [2]analysis.Num `json:"sustained_output_tokens_per_s"`
	Attainment [2]analysis.Num `json:"attainment"`
	TTFTP99    [2]analysis.Num `json:"ttft_p99_ms"`
	TPOTP99    [2]analysis.Num `json:"tpot_p99_ms"`
	// Overloaded: "no", "some" or "all" of the repeats.
	Overloaded string `json:"overloaded"`
}

type bracketJSON struct {
	Low     BoundJSON `json:"low"`
	High    BoundJSON `json:"high"`
	Summary string    `json:"summary"`
}

// overloaded says how many of the repeats were overloaded: "no", "some" or "all".
func (sp *PointSpread) overloaded() string {
	switch {
	case sp.OverloadedAll:
		return "all"
	case sp.OverloadedAny:
		return "some"
	}
	return "no"
}

func spreadOf(sp *PointSpread) *spreadJSON {
	if sp == nil {
		return nil
	}
	sj := func(s Span) [2]analysis.Num { return [2]analysis.Num{analysis.Num(s.Lo), analysis.Num(s.Hi)} }
	return &spreadJSON{Method: sp.Method, Repeats: sp.Repeats, Files: sp.Files, Sustained: sj(sp.Sustained), Attainment: sj(sp.Attainment),
		TTFTP99: sj(sp.TTFTP99), TPOTP99: sj(sp.TPOTP99), Overloaded: sp.overloaded()}
}

func (s *Report) bracketJSON(b *KneeBracket, what string) *bracketJSON {
	if b == nil {
		return nil
	}
	return &bracketJSON{Low: s.boundJSON(b.Low, what+" (low)"), High: s.boundJSON(b.High, what+" (high)"), Summary: s.describeBracket(b, what)}
}

// spreadCols are a repeated sweep's sweep.parquet columns: each interval's ends (null for
// a point that was not repeated) and the repeat count.
func spreadCols(sp *PointSpread) []analysis.Column {
	if sp == nil {
		sp = &PointSpread{Sustained: Span{math.NaN(), math.NaN()}, Attainment: Span{math.NaN(), math.NaN()},
			TTFTP99: Span{math.NaN(), math.NaN()}, TPOTP99: Span{math.NaN(), math.NaN()}, Repeats: 1}
	}
	return []analysis.Column{analysis.NewColumn("repeats", int64(sp.Repeats)),
		analysis.NewColumn("sustained_output_tokens_per_s_lo", sp.Sustained.Lo), analysis.NewColumn("sustained_output_tokens_per_s_hi", sp.Sustained.Hi),
		analysis.NewColumn("attainment_lo", sp.Attainment.Lo), analysis.NewColumn("attainment_hi", sp.Attainment.Hi),
		analysis.NewColumn("ttft_ms_p99_lo", sp.TTFTP99.Lo), analysis.NewColumn("ttft_ms_p99_hi", sp.TTFTP99.Hi),
		analysis.NewColumn("tpot_ms_p99_lo", sp.TPOTP99.Lo), analysis.NewColumn("tpot_ms_p99_hi", sp.TPOTP99.Hi)}
}

// pooledIntervals bootstraps the figures of a repeated sweep point over its repeats pooled,
// from each repeat's report and loaded data (the same order): TTFT and TPOT p99 over every
// ok request's (QuantileSorted), attainment over every non-canceled request (Proportion of
// the good ones; NoCI without an SLO), and sustained output tok/s over the 1 s windows of
// every repeat's steady-state window, in repeat order (BlockMean, the block length by
// BlockLength; a partial last second is left out). Each figure draws from its own stream,
// named by the load.
func pooledIntervals(reps []*analysis.Report, data []*decode.Data, b stats.Bootstrap, load string) (sus, att, ttft, tpot stats.CI) {
	b = b.WithDefaults()
	var ttfts, tpots, series []float64
	var good, den int64
	const perSecond = int64(1e9 / decode.BinNS)
	for k, d := range data {
		rep := reps[k]
		for i, st := range d.Status {
			if st != decode.StOK {
				continue
			}
			if rep.Unary != nil { // not streamed: its first token is its end (unary.go)
				ttfts = append(ttfts, d.E2EMS(i))
				continue
			}
			ttfts = append(ttfts, d.TTFTMS(i))
			if v := d.TPOTMS(i); !math.IsNaN(v) {
				tpots = append(tpots, v)
			}
		}
		if g := rep.Goodput; g != nil {
			good += g.Good
			den += rep.Requests.Total - rep.Requests.Canceled
		}
		t := rep.Throughput
		if math.IsNaN(t.WindowStartS) || math.IsNaN(t.WindowEndS) {
			continue
		}
		from, to := int64(math.Round(t.WindowStartS*1e9/float64(decode.BinNS))), int64(math.Round(t.WindowEndS*1e9/float64(decode.BinNS)))
		bins := d.TokenBins
		if rep.Unary != nil {
			bins = completedBins(d)
		}
		for s := from; s+perSecond <= to && s+perSecond <= int64(len(bins)); s += perSecond {
			var sum float64
			for _, v := range bins[s : s+perSecond] {
				sum += v
			}
			series = append(series, sum)
		}
	}
	slices.Sort(ttfts)
	slices.Sort(tpots)
	conf := b.Confidence
	ttft = b.QuantileSorted(ttfts, 0.99, "sweep "+load+" ttft p99").CI(conf)
	tpot = b.QuantileSorted(tpots, 0.99, "sweep "+load+" tpot p99").CI(conf)
	att = stats.NoCI()
	if reps[0].Goodput != nil {
		att = b.Proportion(good, den, "sweep "+load+" attainment").CI(conf)
	}
	sus = stats.NoCI()
	if len(series) >= 2 {
		sus = b.BlockMean(series, stats.BlockLength(series, 1), "sweep "+load+" sustained").CI(conf)
		sus.Lo = max(sus.Lo, 0) // a rate; the few-blocks widening may reach below 0
	}
	return sus, att, ttft, tpot
}
