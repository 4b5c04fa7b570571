package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmreplay/llmreplay/analysis"

	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/stats"
	"github.com/llmreplay/llmreplay/sweep"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/twin"
)

// Report is a plan with what it was made from, as `llmreplay plan` prints it.
type Report struct {
	*Plan
	Trace      string
	Requests   int
	MeanRate   float64 // the trace's own mean request rate (trace.MeanRate)
	Profile    string
	Fitted     bool // the profile carries a fit
	FitRuns    int  // runs its fit read, HeldOut of them only predicted
	HeldOut    int
	Error      []FigureError // TwinError of the profile's fit
	NoPrefixes bool          // the trace's prefix sharing was not modelled (Trace.PrefixBlocks)
	// FitMaxTokensPerS is the most sustained output tok/s any run of the fit measured
	// (fitted on or held out), NaN without a fit: above it the twin predicts a load it was
	// neither fitted nor checked on.
	FitMaxTokensPerS float64
	span             time.Duration // the trace's
}

// beyondFit reports whether the twin predicts more throughput at p than its fit ever saw.
func (r *Report) beyondFit(p *Point) bool {
	return r.FitMaxTokensPerS > 0 && p.SustainedTokensPerS > r.FitMaxTokensPerS
}

// speedupAt is the speedup of a probed load.
func (r *Report) speedupAt(load float64) float64 {
	for _, p := range r.Probes {
		if p.Load == load {
			return p.Speedup
		}
	}
	return math.NaN()
}

// NewReport puts pl beside its trace and the profile it was planned on, named label (a
// built-in's name or the file's path).
func NewReport(pl *Plan, tr *Trace, p *sim.ProfileFile, label string) *Report {
	r := &Report{Plan: pl, Trace: tr.Name, Requests: len(tr.Reqs), Profile: label, NoPrefixes: tr.PrefixBlocks, span: tr.Span(),
		FitMaxTokensPerS: math.NaN()}
	r.MeanRate, _ = trace.MeanRate(int64(len(tr.Reqs)), tr.Span())
	if f := p.Fit; f != nil {
		r.Fitted, r.FitRuns, r.Error = true, len(f.Runs), TwinError(f)
		for _, run := range f.Runs {
			if run.Holdout {
				r.HeldOut++
			}
		}
		for _, e := range f.Errors {
			if e.Figure == "output_tok_s" && !(e.Measured <= r.FitMaxTokensPerS) {
				r.FitMaxTokensPerS = e.Measured
			}
		}
	}
	return r
}

// NoFit is what the plan says of a profile without a fit.
const NoFit = "no fit: figures are the model's, error unknown"

// Rows are the points the table shows: the At loads, or without them the passing load of
// the saturation and of the SLO limit.
func (r *Report) Rows() []Point {
	if len(r.At) > 0 {
		return r.At
	}
	var out []Point
	for _, b := range []stats.Bound{r.Saturation, r.SLOLimit} {
		for _, p := range r.Probes {
			if b.Found && p.Load == b.Pass && !containsLoad(out, p.Load) {
				out = append(out, p)
			}
		}
	}
	return out
}

func containsLoad(ps []Point, l float64) bool {
	for _, p := range ps {
		if p.Load == l {
			return true
		}
	}
	return false
}

// errorNote says over what the twin's error was measured.
func (r *Report) errorNote() string {
	switch {
	case !r.Fitted:
		return NoFit
	case len(r.Error) == 0:
		return "the fit states no error on these figures: error unknown"
	case r.Error[0].HeldOut:
		return fmt.Sprintf("twin's error: the largest |relative error| of each figure over the fit's %d held-out run(s) of %d", r.HeldOut, r.FitRuns)
	}
	return fmt.Sprintf("twin's error: the largest |relative error| of each figure over the %d run(s) it was fitted on (none held out: it flatters the twin; fit with --holdout)", r.FitRuns)
}

// describe says a bound in words, as a sweep says its own.
func (r *Report) describe(b stats.Bound, what string) string {
	return sweep.DescribeBound(b, r.Axis, what, sweep.BoundHints{
		Lower:        " (lower --start)",
		Raise:        ", the highest searched (raise --max)",
		Points:       "--max-points ran out before the resolution",
		NonMonotonic: "a load above passed or below failed: the twin is not monotonic on this trace",
		Load:         loadText,
	})
}

func loadText(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// WriteText writes the plan as text: what was planned, the knee, the figures at the rows'
// loads with the twin's error beside each, and the notes.
func (r *Report) WriteText(w io.Writer) error {
	slo := "no SLO"
	if !r.SLO.IsZero() {
		slo = fmt.Sprintf("SLO %s at %.1f%% attainment", r.SLO, 100*r.Options.Attainment)
	}
	fit := "no fit"
	if r.Fitted {
		fit = fmt.Sprintf("fitted to %d runs, %d held out", r.FitRuns, r.HeldOut)
	}
	fmt.Fprintf(w, "plan of %s (%d requests, %.3g req/s) on the twin %s (%s), %s; %d loads simulated\n\n",
		r.Trace, r.Requests, r.MeanRate, r.Profile, fit, slo, len(r.Probes))
	fmt.Fprintln(w, r.describe(r.Saturation, r.saturationText()))
	if !r.SLO.IsZero() {
		fmt.Fprintln(w, r.describe(r.SLOLimit, fmt.Sprintf("highest %s meeting the SLO at %.1f%% attainment", r.Axis, 100*r.Options.Attainment)))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// On the speedup axis the load is the speedup: one column says it; a closed loop has none.
	speedup := r.Axis == sweep.Rate
	head := []string{r.Axis, "speedup", "offer r/s", "offer tok/s", "sustain tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "goodput", "attain", "flags"}
	if !speedup {
		head = slices.Delete(head, 1, 2)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, p := range r.Rows() {
		var fl []string
		if p.Overloaded {
			fl = append(fl, "overloaded")
		}
		if r.beyondFit(&p) {
			fl = append(fl, "beyond fit")
		}
		flags := strings.Join(fl, ",")
		cells := []string{loadText(p.Load), loadText(p.Speedup), fmt.Sprintf("%.2f", p.OfferedRequestsPerS), fmt.Sprintf("%.1f", p.OfferedTokensPerS)}
		for _, f := range twin.Figures {
			cells = append(cells, fmt.Sprintf("%.1f", p.Figure(f)))
		}
		cells = append(cells, orDash(p.Goodput, "%.2f"), orDash(100*p.Attainment, "%.1f%%"), flags)
		if !speedup {
			cells = slices.Delete(cells, 1, 2)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if r.Fitted && len(r.Error) > 0 {
		// The error sits under the figure it is of.
		cells := make([]string, len(head))
		cells[0] = "twin error"
		for k, f := range twin.Figures {
			cells[len(head)-8+k] = r.errorCell(f)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nlatencies in ms, goodput in req/s; offered and sustained over each load's steady-state window, judged as a sweep's points (docs/metrics.md, \"Sweep\").\n%s\n", r.errorNote())
	if r.Fitted && len(r.Error) > 0 && len(r.Error) < len(twin.Figures) {
		fmt.Fprintln(w, "?: the fit states no error on that figure")
	}
	if s, l := r.Saturation, r.SLOLimit; r.Axis != sweep.Concurrency && s.Found && s.Bracketed && l.Found && l.Pass > s.Fail {
		fmt.Fprintf(w, "note: the SLO limit lies above the saturation: past it the queue grows for as long as the trace lasts (%.3g s at %s %s), so the latencies there depend on the trace's length; plan on a trace as long as the load you mean\n",
			(r.span / time.Duration(r.speedupAt(l.Pass))).Seconds(), r.Axis, loadText(l.Pass))
	}
	if slices.ContainsFunc(r.Rows(), func(p Point) bool { return r.beyondFit(&p) }) {
		fmt.Fprintf(w, "beyond fit: the twin predicts more output tok/s than any run of its fit measured (at most %.1f): an extrapolation its error does not cover\n", r.FitMaxTokensPerS)
	}
	if r.NoPrefixes {
		fmt.Fprintln(w, "note: the trace's prompts share prefixes; the plan does not model their cache hits, so its prefills are a cold cache's (a pessimistic bound)")
	}
	return nil
}

// minGain is the closed loop's saturation threshold, nil in an open loop.
func (r *Report) minGain() *float64 {
	if r.Axis != sweep.Concurrency {
		return nil
	}
	return &r.Options.MinGain
}

// saturationText says what the saturation is on the plan's axis, as a sweep says it.
func (r *Report) saturationText() string {
	if r.Axis == sweep.Concurrency {
		return fmt.Sprintf("saturation (doubling the concurrency adds < %.0f%% sustained output tok/s)", 100*r.Options.MinGain)
	}
	return fmt.Sprintf("saturation (sustained >= %.0f%% of offered output tok/s, not overloaded)", 100*r.Options.MinRatio)
}

// errorCell is the twin's error on figure, "±4.1%", or "?" when the fit states none.
func (r *Report) errorCell(figure string) string {
	for _, e := range r.Error {
		if e.Figure == figure {
			return fmt.Sprintf("±%.1f%%", 100*e.MaxAbs)
		}
	}
	return "?"
}

func orDash(v float64, format string) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// jsonPoint is a Point in the --json output: a figure it does not have is null.
type jsonPoint struct {
	Load                float64      `json:"load"`
	Speedup             analysis.Num `json:"speedup"` // null in a closed loop
	OfferedRequestsPerS analysis.Num `json:"offered_requests_per_s"`
	OfferedTokensPerS   analysis.Num `json:"offered_output_tokens_per_s"`
	SustainedTokensPerS analysis.Num `json:"sustained_output_tokens_per_s"`
	TTFT                jsonQ        `json:"ttft_ms"`
	TPOT                jsonQ        `json:"tpot_ms"`
	Goodput             analysis.Num `json:"goodput_requests_per_s"`
	Attainment          analysis.Num `json:"attainment"`
	Overloaded          bool         `json:"overloaded"`
	Tracks              bool         `json:"tracks"`
	MeetsSLO            bool         `json:"meets_slo"`
	BeyondFit           bool         `json:"beyond_fit"`
}

type jsonQ struct {
	P50 analysis.Num `json:"p50"`
	P99 analysis.Num `json:"p99"`
}

func (r *Report) jsonPoints(ps []Point) []jsonPoint {
	out := make([]jsonPoint, 0, len(ps))
	for _, p := range ps {
		out = append(out, jsonPoint{Load: p.Load, Speedup: analysis.Num(p.Speedup), OfferedRequestsPerS: analysis.Num(p.OfferedRequestsPerS),
			OfferedTokensPerS: analysis.Num(p.OfferedTokensPerS), SustainedTokensPerS: analysis.Num(p.SustainedTokensPerS),
			TTFT: jsonQ{analysis.Num(p.TTFTP50), analysis.Num(p.TTFTP99)}, TPOT: jsonQ{analysis.Num(p.TPOTP50), analysis.Num(p.TPOTP99)},
			Goodput: analysis.Num(p.Goodput), Attainment: analysis.Num(p.Attainment), Overloaded: p.Overloaded, Tracks: p.Tracks, MeetsSLO: p.MeetsSLO,
			BeyondFit: r.beyondFit(&p)})
	}
	return out
}

// WriteJSON writes the plan as one JSON object (docs/sim.md, "Planning with the twin").
func (r *Report) WriteJSON(w io.Writer) error {
	bound := func(b stats.Bound, what string) *sweep.BoundJSON {
		j := sweep.NewBoundJSON(b, r.describe(b, what))
		return &j
	}
	var sloLimit *sweep.BoundJSON
	slo := ""
	if !r.SLO.IsZero() {
		slo, sloLimit = r.SLO.String(), bound(r.SLOLimit, "highest "+r.Axis+" meeting the SLO")
	}
	errs := r.Error
	if errs == nil {
		errs = []FigureError{}
	}
	v := struct {
		Trace        string           `json:"trace"`
		Requests     int              `json:"requests"`
		MeanRate     float64          `json:"trace_mean_rate_per_s"`
		Profile      string           `json:"profile"`
		Fitted       bool             `json:"fitted"`
		FitRuns      int              `json:"fit_runs"`
		HeldOut      int              `json:"fit_held_out_runs"`
		FitMax       analysis.Num     `json:"fit_max_output_tokens_per_s"`
		Axis         string           `json:"axis"`
		SLO          string           `json:"slo"`
		Attainment   float64          `json:"attainment_target"`
		MinRatio     float64          `json:"min_ratio"`
		MinGain      *float64         `json:"min_gain,omitempty"` // closed loop only
		Resolution   float64          `json:"resolution"`
		Saturation   *sweep.BoundJSON `json:"saturation"`
		SLOLimit     *sweep.BoundJSON `json:"slo_limit"`
		Points       []jsonPoint      `json:"points"`
		Probes       []jsonPoint      `json:"probes"`
		TwinError    []FigureError    `json:"twin_error"`
		TwinErrorOn  string           `json:"twin_error_note"`
		NoPrefixHits bool             `json:"prefix_sharing_not_modelled"`
	}{r.Trace, r.Requests, r.MeanRate, r.Profile, r.Fitted, r.FitRuns, r.HeldOut, analysis.Num(r.FitMaxTokensPerS), r.Axis, slo, r.Options.Attainment,
		r.Options.MinRatio, r.minGain(), r.Options.Resolution, bound(r.Saturation, "saturation"), sloLimit, r.jsonPoints(r.Rows()),
		r.jsonPoints(r.Probes), errs, r.errorNote(), r.NoPrefixes}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
