package analysis

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/montanaflynn/stats"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay/results"
)

// Repeats is what the repeats of one run (`replay --repeat N`, or one repeated sweep point)
// add to its report: for each headline figure, its pooled value, the median and the range
// (min–max) of the repeats' values, and each repeat's value (docs/metrics.md, "Repeats").
type Repeats struct {
	Group   string   // repeat_group: the first repeat's run id
	Count   int      // repeat_count: how many repeats the run asked for
	Index   []int    // the repeats given, 1-based, ascending
	RunIDs  []string // their run ids, in Index order
	Figures []RepeatFigure
	// Reports are the repeats' own reports, in Index order.
	Reports []*Report
}

// RepeatFigure is one headline figure across repeats. Median is montanaflynn/stats'
// (the mean of the middle two for an even count); Min and Max bound Values, the repeats'
// values in Index order; NaN values (a figure a repeat does not define) are left out of
// the median and the range.
type RepeatFigure struct {
	Key    string // the JSON key, e.g. "ttft_p99_ms"
	Label  string // the text label
	Pooled float64
	Median float64
	Min    float64
	Max    float64
	Values []float64
}

// RepeatGroup reports whether runs (one per file) are the repeats of one repeated run:
// every file carries the same non-empty repeat_group and they hold more than one repeat.
func RepeatGroup(runs []results.RunMeta) (string, bool) {
	if len(runs) == 0 || runs[0].RepeatGroup == "" {
		return "", false
	}
	ids := map[string]bool{}
	for _, r := range runs {
		if r.RepeatGroup != runs[0].RepeatGroup {
			return "", false
		}
		ids[r.RunID] = true
	}
	return runs[0].RepeatGroup, len(ids) > 1
}

// AnalyzeRepeats analyses the files of the repeats of one run (RepeatGroup of d.Runs must
// hold): each repeat alone (its shards merged), and all of them pooled. The pooled report
// takes every request of every repeat: its counts, latency quantiles, attainment and flags
// are over them all (a flag is set when some repeat's is); its rates are each repeat's
// numerator summed over the repeats' denominators summed (sustained: tokens in each
// repeat's steady-state window over the windows' lengths; overall and goodput: over each
// repeat's first-sent-to-last-end duration), so the cooldowns between repeats count
// nowhere. The pooled report has no steady-state window nor peak (each repeat has its
// own); its time series is on absolute time, the repeats one after another. The pooled
// report is returned with Repeats set.
func AnalyzeRepeats(ctx context.Context, d *decode.Data, lo decode.LoadOptions, opts Options) (*Report, error) {
	group, ok := RepeatGroup(d.Runs)
	if !ok {
		return nil, fmt.Errorf("analysis: %s: not the repeats of one run", strings.Join(d.Files, ", "))
	}
	byRepeat := map[string][]string{}
	idx := map[string]int{}
	count := 0
	for i, r := range d.Runs {
		byRepeat[r.RunID] = append(byRepeat[r.RunID], d.Files[i])
		if prev, seen := idx[r.RunID]; seen && prev != r.Repeat {
			return nil, fmt.Errorf("analysis: %s: run %q is repeat %d and %d", d.Files[i], r.RunID, prev, r.Repeat)
		}
		idx[r.RunID] = r.Repeat
		count = max(count, r.RepeatCount)
	}
	runIDs := make([]string, 0, len(byRepeat))
	for id := range byRepeat {
		runIDs = append(runIDs, id)
	}
	sort.Slice(runIDs, func(i, j int) bool { return idx[runIDs[i]] < idx[runIDs[j]] })
	rp := &Repeats{Group: group, Count: count}
	for i, id := range runIDs {
		if i > 0 && idx[id] == idx[runIDs[i-1]] {
			return nil, fmt.Errorf("analysis: %s and %s: two runs (%q, %q) are repeat %d of group %q",
				byRepeat[runIDs[i-1]][0], byRepeat[id][0], runIDs[i-1], id, idx[id], group)
		}
		rd, err := Load(ctx, decode.LoadOptions{AllowPartial: lo.AllowPartial, BatchSize: lo.BatchSize, Workers: lo.Workers}, byRepeat[id]...)
		if err != nil {
			return nil, err
		}
		rep, err := Analyze(rd, opts)
		if err != nil {
			return nil, err
		}
		rp.Index, rp.RunIDs, rp.Reports = append(rp.Index, idx[id]), append(rp.RunIDs, id), append(rp.Reports, rep)
	}
	d.Mixed = false // one run, repeated: not runs pooled by --allow-mixed
	pooled, err := Analyze(d, opts)
	if err != nil {
		return nil, err
	}
	pooled.poolRates(rp.Reports)
	pooled.Warnings = slices.Insert(pooled.Warnings, 0, fmt.Sprintf("%d repeats of run %s pooled: rates over the repeats' own windows and durations, latencies over all their requests (docs/metrics.md, \"Repeats\")", len(rp.Reports), group))
	if len(rp.Index) < count {
		pooled.warnf("repeats %s of %d given (the others are missing or were stopped)", joinInts(rp.Index), count)
	}
	rp.Figures = repeatFigures(pooled, rp.Reports)
	pooled.Repeats = rp
	return pooled, nil
}

// poolRates replaces r's rates, computed over the pooled runs' absolute time (which holds
// the cooldowns between repeats), by the repeats' summed numerators over summed
// denominators, and ORs the repeats' overload flags.
func (r *Report) poolRates(reps []*Report) {
	var dur, win, req, out, tot, sus, good, goodTok float64
	overloaded := false
	for _, p := range reps {
		t := p.Throughput
		if t.DurationS > 0 {
			dur += t.DurationS
			req += t.RequestsPerS * t.DurationS
			out += t.OutputTokensPerS * t.DurationS
			tot += t.TotalTokensPerS * t.DurationS
			if g := p.Goodput; g != nil {
				good += g.RequestsPerS * t.DurationS
				goodTok += g.OutputTokensPerS * t.DurationS
			}
		}
		if w := t.WindowEndS - t.WindowStartS; w > 0 && !math.IsNaN(t.SustainedOutputTokensPerS) {
			win += w
			sus += t.SustainedOutputTokensPerS * w
		}
		overloaded = overloaded || p.Flags.Overloaded
	}
	t := &r.Throughput
	div := func(a, b float64) float64 {
		if b > 0 {
			return a / b
		}
		return math.NaN()
	}
	t.DurationS = dur
	t.RequestsPerS, t.OutputTokensPerS, t.TotalTokensPerS = div(req, dur), div(out, dur), div(tot, dur)
	t.SustainedOutputTokensPerS = div(sus, win)
	t.WindowStartS, t.WindowEndS, t.WarmupS, t.WarmupDetected = math.NaN(), math.NaN(), math.NaN(), false
	t.PeakOutputTokensPerS, t.PeakAtS = math.NaN(), math.NaN()
	if r.Goodput != nil {
		r.Goodput.RequestsPerS, r.Goodput.OutputTokensPerS = div(good, dur), div(goodTok, dur)
	}
	r.Flags.Overloaded = overloaded
	r.poolUnary(reps)
}

// repeatFigures lists the headline figures across repeats.
func repeatFigures(pooled *Report, reps []*Report) []RepeatFigure {
	type fig struct {
		key, label string
		get        func(*Report) float64
	}
	// The values are the declared figures' (figures.go); the keys and labels are the
	// repeats table's own, a contract of its JSON (docs/metrics.md, "Repeats").
	figs := []fig{
		{"sustained_output_tokens_per_s", "sustained output tok/s", figureFloat("sustained_output_tokens_per_s")},
		{"output_tokens_per_s", "output tok/s (overall)", figureFloat("output_tokens_per_s")},
		{"requests_per_s", "requests/s (overall)", figureFloat("requests_per_s")},
		{"ttft_p50_ms", "TTFT p50 ms", figureQuantile("ttft", p50)},
		{"ttft_p99_ms", "TTFT p99 ms", figureQuantile("ttft", p99)},
		{"tpot_p50_ms", "TPOT p50 ms", figureQuantile("tpot", p50)},
		{"tpot_p99_ms", "TPOT p99 ms", figureQuantile("tpot", p99)},
		{"e2e_p50_ms", "E2E p50 ms", figureQuantile("e2e", p50)},
		{"e2e_p99_ms", "E2E p99 ms", figureQuantile("e2e", p99)},
	}
	if pooled.Goodput != nil {
		figs = append(figs, fig{"goodput_requests_per_s", "goodput req/s", figureFloat("goodput_requests_per_s")},
			fig{"attainment_pct", "SLO attainment %", figureFloat("slo_attainment_pct")})
	}
	figs = append(figs, fig{"error_pct", "errors % (failed/total)", figureFloat("error_rate_pct")})
	out := make([]RepeatFigure, 0, len(figs))
	for _, f := range figs {
		rf := RepeatFigure{Key: f.key, Label: f.label, Pooled: f.get(pooled), Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
		var defined stats.Float64Data
		for _, r := range reps {
			v := f.get(r)
			rf.Values = append(rf.Values, v)
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				defined = append(defined, v)
			}
		}
		if len(defined) > 0 {
			rf.Median, _ = defined.Median()
			rf.Min, _ = defined.Min()
			rf.Max, _ = defined.Max()
		}
		out = append(out, rf)
	}
	return out
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

// writeText writes the repeats table: one row per headline figure.
func (rp *Repeats) writeText(w io.Writer) {
	fmt.Fprintf(w, "\nRepeats: %d of %d, group %s (pooled, median and range across the repeats; r1 r2 ... each repeat's value)\n", len(rp.Index), rp.Count, rp.Group)
	fmt.Fprintf(w, "  %-26s %12s %12s %25s  ", "figure", "pooled", "median", "min – max")
	for _, i := range rp.Index {
		fmt.Fprintf(w, " %10s", fmt.Sprintf("r%d", i))
	}
	fmt.Fprintln(w)
	for _, f := range rp.Figures {
		fmt.Fprintf(w, "  %-26s %12s %12s %25s  ", f.Label, f2(f.Pooled), f2(f.Median), f2(f.Min)+" – "+f2(f.Max))
		for _, v := range f.Values {
			fmt.Fprintf(w, " %10s", f2(v))
		}
		fmt.Fprintln(w)
	}
}

// repeatsHTML is the repeats table of the HTML report.
type repeatsHTML struct {
	N, Count int
	Group    string
	Header   []string
	Rows     []htmlRow
}

func (rp *Repeats) html() *repeatsHTML {
	h := &repeatsHTML{N: len(rp.Index), Count: rp.Count, Group: rp.Group, Header: []string{"figure", "pooled", "median", "min – max"}}
	for _, i := range rp.Index {
		h.Header = append(h.Header, fmt.Sprintf("r%d", i))
	}
	for _, f := range rp.Figures {
		cells := []string{f.Label, f2(f.Pooled), f2(f.Median), f2(f.Min) + " – " + f2(f.Max)}
		for _, v := range f.Values {
			cells = append(cells, f2(v))
		}
		h.Rows = append(h.Rows, dataRow(cells...))
	}
	return h
}

// jsonRepeats is the report's "repeats" key (docs/metrics.md, "Repeats").
type jsonRepeats struct {
	Group   string                      `json:"group"`
	Count   int                         `json:"repeat_count"`
	Repeats []int                       `json:"repeats"`
	RunIDs  []string                    `json:"run_ids"`
	Figures map[string]jsonRepeatFigure `json:"figures"`
}

type jsonRepeatFigure struct {
	Pooled Num   `json:"pooled"`
	Median Num   `json:"median"`
	Min    Num   `json:"min"`
	Max    Num   `json:"max"`
	Values []Num `json:"values"`
}

func (rp *Repeats) toJSON() *jsonRepeats {
	j := &jsonRepeats{Group: rp.Group, Count: rp.Count, Repeats: rp.Index, RunIDs: rp.RunIDs, Figures: map[string]jsonRepeatFigure{}}
	for _, f := range rp.Figures {
		jf := jsonRepeatFigure{Pooled: Num(f.Pooled), Median: Num(f.Median), Min: Num(f.Min), Max: Num(f.Max)}
		for _, v := range f.Values {
			jf.Values = append(jf.Values, Num(v))
		}
		j.Figures[f.Key] = jf
	}
	return j
}
