package compare

import (
	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"

	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/apache/arrow/go/v15/parquet/file"

	"github.com/llmreplay/llmreplay/replay/results"
)

// compareWindowNS is the length of the time windows whose series the throughput intervals
// resample: 10 bins of 10 ms.
const compareWindowNS = 10 * decode.BinNS

// Method is printed under every comparison table (docs/compare.md explains it).
func Method(b stats.Bootstrap) string {
	b = b.WithDefaults()
	return fmt.Sprintf("%g%% intervals of the change against run A: %s, %d resamples, seed %d. "+
		"Percentiles (%s) and error, drop and attainment rates: requests resampled m out of n, m = n / (1 + 2 sum of the autocorrelations "+
		"of the request's indicator (below the percentile; failed...) in arrival order, flat-top weights): neighbouring requests are not independent "+
		"(each resample's order statistics or count drawn exactly); ITL: as many chunk gaps as TPOT's m. Rates change in percentage points. "+
		"Throughputs: circular block bootstrap of %d ms windows (sustained: of the steady-state window; overall: of the whole run), "+
		"Politis-White block length, at least the median E2E, widened by t(blocks-1)/z; runs of one trace, mode and speed resample the same blocks (paired). "+
		"Repeats of a run: repeats resampled too. ~: the interval holds zero.",
		100*b.Confidence, stats.BootstrapIntervalMethod, b.Resamples, b.Seed, analysis.PercentileMethod, compareWindowNS/1e6)
}

// agentMethod ends the method line of a comparison of agent runs.
const agentMethod = "Agent makespan, slowdown and prefix-cache hit rate: sessions resampled as independent units (n out of n; one session's calls wait for each other, sessions do not)."

// ReadRunMeta returns the run metadata of a results file without reading its rows.
func ReadRunMeta(path string) (results.RunMeta, error) {
	pr, err := file.OpenParquetFile(path, false, file.WithReadProps(decode.ReadProps()))
	if err != nil {
		return results.RunMeta{}, fmt.Errorf("analysis: open %s: %w", path, err)
	}
	defer pr.Close()
	return readMeta(path, pr)
}

// RunFiles is one run given to compare: its repeats (one, unless the run was
// repeated), each the files of its shards.
type RunFiles struct {
	Repeats [][]string
}

// Arg is one argument of compare: one run, or a sweep folder's points.
type Arg struct {
	Path   string
	Run    RunFiles // when Points is nil
	Axis   string   // sweep: speedup, rate or concurrency
	Points []PointFiles
}

// PointFiles is one point of a sweep folder.
type PointFiles struct {
	Load float64
	Run  RunFiles
}

// isResultsName reports whether a file name in a folder is a results file (not a metrics
// file, a journal or a report).
func isResultsName(name string) bool {
	return strings.HasSuffix(name, ".parquet") && !strings.HasSuffix(name, ".metrics.parquet") &&
		name != "sweep.parquet" && name != "summary.parquet" && name != "timeseries.parquet"
}

// groupRun groups the files of one run by repeat (repeat_group and repeat, else run_id)
// and refuses files of different runs.
func groupRun(path string, files []string) (RunFiles, results.RunMeta, error) {
	type key struct {
		group  string
		repeat int
	}
	var first results.RunMeta
	by := map[key][]string{}
	var keys []key
	for i, f := range files {
		m, err := ReadRunMeta(f)
		if err != nil {
			return RunFiles{}, first, err
		}
		group := m.RepeatGroup
		if group == "" {
			group = m.RunID
		}
		if i == 0 {
			first = m
		} else if fg := firstNonEmpty(first.RepeatGroup, first.RunID); group != fg {
			return RunFiles{}, first, fmt.Errorf("analysis: compare: %s: %s and %s belong to different runs (run %q, %q): give each run as its own argument",
				path, files[0], f, fg, group)
		}
		k := key{group, m.Repeat}
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], f)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].repeat < keys[j].repeat })
	var r RunFiles
	for _, k := range keys {
		r.Repeats = append(r.Repeats, by[k])
	}
	return r, first, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ResolveArg says what path is: a results file (one run), a folder of one run's
// files (its shards, its repeats), or a sweep folder (sweep-state.json, or point-*.parquet
// files), whose points are its runs by load.
func ResolveArg(path string) (Arg, error) {
	a := Arg{Path: path}
	st, err := os.Stat(path)
	if err != nil {
		return a, fmt.Errorf("analysis: compare: %w", err)
	}
	if !st.IsDir() {
		a.Run, _, err = groupRun(path, []string{path})
		return a, err
	}
	ents, err := os.ReadDir(path)
	if err != nil {
		return a, fmt.Errorf("analysis: compare: %w", err)
	}
	var files, points []string
	_, stateErr := os.Stat(filepath.Join(path, "sweep-state.json"))
	for _, e := range ents {
		if e.IsDir() || !isResultsName(e.Name()) {
			continue
		}
		files = append(files, filepath.Join(path, e.Name()))
		if strings.HasPrefix(e.Name(), "point-") {
			points = append(points, filepath.Join(path, e.Name()))
		}
	}
	if stateErr == nil || len(points) > 0 {
		return resolveSweep(path, points)
	}
	if len(files) == 0 {
		return a, fmt.Errorf("analysis: compare: %s: a folder with no results files (*.parquet)", path)
	}
	a.Run, _, err = groupRun(path, files)
	return a, err
}

// resolveSweep groups a sweep folder's point files by load (from each file's run metadata).
func resolveSweep(path string, files []string) (Arg, error) {
	a := Arg{Path: path}
	if len(files) == 0 {
		return a, fmt.Errorf("analysis: compare: %s: a sweep folder with no point-*.parquet results files", path)
	}
	byLoad := map[float64][]string{}
	for _, f := range files {
		// point-NN-AXIS-LOAD....parquet
		parts := strings.SplitN(filepath.Base(f), "-", 4)
		if len(parts) < 4 {
			return a, fmt.Errorf("analysis: compare: %s: not a sweep point file name (point-NN-AXIS-LOAD.parquet)", f)
		}
		axis := parts[2]
		if a.Axis == "" {
			a.Axis = axis
		} else if axis != a.Axis {
			return a, fmt.Errorf("analysis: compare: %s: axis %q, but other points of %s are on %q", f, axis, path, a.Axis)
		}
		m, err := ReadRunMeta(f)
		if err != nil {
			return a, err
		}
		var load float64
		switch axis {
		case "speedup":
			load = m.Speedup
		case "rate":
			load = m.Rate
		case "concurrency":
			load = float64(m.Concurrency)
		default:
			return a, fmt.Errorf("analysis: compare: %s: unknown sweep axis %q", f, axis)
		}
		byLoad[load] = append(byLoad[load], f)
	}
	loads := make([]float64, 0, len(byLoad))
	for l := range byLoad {
		loads = append(loads, l)
	}
	slices.Sort(loads)
	for _, l := range loads {
		run, _, err := groupRun(path, byLoad[l])
		if err != nil {
			return a, err
		}
		a.Points = append(a.Points, PointFiles{Load: l, Run: run})
	}
	return a, nil
}

// Options control Compare.
type Options struct {
	Bootstrap stats.Bootstrap
	Analysis  analysis.Options // as for analyze; its SLO applies to every run (default: run A's)
	// AllowDifferent compares runs of different traces, speeds or modes (the differences
	// are printed on top); otherwise they are refused.
	AllowDifferent bool
}

// Figure names one headline figure.
type Figure struct {
	Key, Name, Unit string
	// Relative: the change is in percent of run A's value; otherwise (figures that are
	// percentages themselves) in percentage points.
	Relative bool
}

// Row is one figure across the runs: Values[i] is run i's, Changes[i] run i's
// change against run 0 (Changes[0] is the zero stats.Change).
type Row struct {
	Figure
	Values  []float64
	Changes []stats.Change
}

// RunInfo describes one run of a comparison.
type RunInfo struct {
	Label         string // A, B, C...
	Path          string
	Files         []string
	Repeats       int
	Meta          results.RunMeta
	ClientLimited bool
	Overloaded    bool
	PromptOff     bool // prompt_off_target: the server counted its prompts off their targets
}

// Section is the table of one comparison: the runs' figures (one section for runs,
// one per load for sweeps).
type Section struct {
	Point   string // "" for runs; "rate 2" for a sweep point
	Runs    []RunInfo
	Rows    []Row
	reports []*analysis.Report // each run's (first repeat's) report, for the HTML plots
}

// Comparison is the result of Compare.
type Comparison struct {
	Options     Options
	Method      string
	Differences []string // what differs between the runs beyond the system under test
	Sections    []Section
	Warnings    []string
}

// Reports returns every run's report (of its first repeat), section by section.
func (c *Comparison) Reports() []*analysis.Report {
	var out []*analysis.Report
	for _, s := range c.Sections {
		out = append(out, s.reports...)
	}
	return out
}

// ErrDifferentRuns is returned by Runs when runs differ in trace, speed or mode and
// AllowDifferent is false.
var ErrDifferentRuns = errors.New("runs of different traces, speeds or modes (use --allow-different to compare them anyway)")

func label(i int) string {
	if i < 26 {
		return string(rune('A' + i))
	}
	return "R" + strconv.Itoa(i+1)
}

// Runs loads every argument and compares the runs: all arguments runs, or all
// sweeps (compared point by point; every sweep must have every load of the first).
func Runs(ctx context.Context, args []Arg, opts Options) (*Comparison, error) {
	if len(args) < 2 {
		if len(args) == 1 {
			return nil, fmt.Errorf("analysis: compare: %s: one run only: give at least two runs (results files, run folders or sweep folders)", args[0].Path)
		}
		return nil, errors.New("analysis: compare: give at least two runs")
	}
	if err := opts.Bootstrap.Validate(); err != nil {
		return nil, fmt.Errorf("analysis: compare: %w", err)
	}
	opts.Bootstrap = opts.Bootstrap.WithDefaults()
	if opts.Analysis.Interval == 0 {
		slo := opts.Analysis.SLO
		opts.Analysis = analysis.DefaultOptions()
		opts.Analysis.SLO = slo
	}
	if opts.Analysis.SLO.IsZero() {
		// Run A's own objectives, for every run.
		first := args[0].Run
		if args[0].Points != nil {
			first = args[0].Points[0].Run
		}
		if m, err := ReadRunMeta(first.Repeats[0][0]); err == nil && m.SLO != "" {
			if slo, err := analysis.ParseSLO(m.SLO); err == nil {
				opts.Analysis.SLO = slo
			}
		}
	}
	c := &Comparison{Options: opts, Method: Method(opts.Bootstrap)}
	sweep := args[0].Points != nil
	for _, a := range args[1:] {
		if (a.Points != nil) != sweep {
			return nil, fmt.Errorf("analysis: compare: %s and %s: a sweep folder compares only with sweep folders", args[0].Path, a.Path)
		}
	}
	if !sweep {
		runs := make([]RunFiles, len(args))
		for i, a := range args {
			runs[i] = a.Run
		}
		s, err := c.section(ctx, "", args, runs)
		if err != nil {
			return nil, err
		}
		c.Sections = append(c.Sections, *s)
		return c, nil
	}
	for _, a := range args[1:] {
		if a.Axis != args[0].Axis {
			return nil, fmt.Errorf("analysis: compare: %s sweeps %s, %s sweeps %s: compare sweeps of one axis", args[0].Path, args[0].Axis, a.Path, a.Axis)
		}
		for _, p := range args[0].Points {
			if !slices.ContainsFunc(a.Points, func(q PointFiles) bool { return q.Load == p.Load }) {
				return nil, fmt.Errorf("analysis: compare: %s: sweep folder has no point at %s %s, which %s has", a.Path, args[0].Axis, analysis.FormatLoad(p.Load), args[0].Path)
			}
		}
		if len(a.Points) > len(args[0].Points) {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s: points not in %s left out", a.Path, args[0].Path))
		}
	}
	for _, p := range args[0].Points {
		runs := make([]RunFiles, len(args))
		for i, a := range args {
			k := slices.IndexFunc(a.Points, func(q PointFiles) bool { return q.Load == p.Load })
			runs[i] = a.Points[k].Run
		}
		s, err := c.section(ctx, args[0].Axis+" "+analysis.FormatLoad(p.Load), args, runs)
		if err != nil {
			return nil, err
		}
		c.Sections = append(c.Sections, *s)
	}
	return c, nil
}

// section compares one set of runs.
func (c *Comparison) section(ctx context.Context, point string, args []Arg, runs []RunFiles) (*Section, error) {
	s := &Section{Point: point}
	opts := c.Options
	// Comparability first, from the metadata alone: nothing is read when it fails.
	paired := true
	for i, run := range runs {
		m, err := ReadRunMeta(run.Repeats[0][0])
		if err != nil {
			return nil, err
		}
		s.Runs = append(s.Runs, RunInfo{Label: label(i), Path: args[i].Path, Repeats: len(run.Repeats), Meta: m})
		paired = paired && len(run.Repeats) == len(runs[0].Repeats)
	}
	if diffs := differences(s.Runs); point == "" || len(c.Sections) == 0 {
		if len(diffs) > 0 && !opts.AllowDifferent {
			return nil, fmt.Errorf("analysis: compare: %s: %w", strings.Join(diffs, "; "), ErrDifferentRuns)
		}
		c.Differences = diffs
		paired = paired && len(diffs) == 0
	} else {
		paired = paired && len(diffs) == 0
	}
	var figs []Figure
	ests := make([][]map[string]stats.Estimate, len(runs)) // run, repeat
	tps := make([][][]tpSeries, len(runs))
	for i, run := range runs {
		info := &s.Runs[i]
		for k, files := range run.Repeats {
			info.Files = append(info.Files, files...)
			d, err := analysis.Load(ctx, decode.LoadOptions{}, files...)
			if err != nil {
				return nil, err
			}
			r, err := analysis.Analyze(d, opts.Analysis)
			if err != nil {
				return nil, err
			}
			if k == 0 {
				s.reports = append(s.reports, r)
			}
			info.ClientLimited = info.ClientLimited || r.Flags.ClientLimited
			info.Overloaded = info.Overloaded || r.Flags.Overloaded
			info.PromptOff = info.PromptOff || r.Flags.PromptOffTarget
			f, e, tp := figures(d, r, opts.Bootstrap, fmt.Sprintf("%s/%s/%d", point, info.Label, k+1))
			if i == 0 && k == 0 {
				figs = f
			}
			ests[i] = append(ests[i], e)
			tps[i] = append(tps[i], tp)
		}
	}
	c.throughputs(point, paired, ests, tps)
	per := make([]map[string]stats.Estimate, len(runs))
	for i := range runs {
		stream := fmt.Sprintf("%s/%s/repeats", point, s.Runs[i].Label)
		if paired { // repeat k of every run drawn together: their schedules are the same
			stream = point + "/paired/repeats"
		}
		per[i] = stats.CombineRepeats(ests[i], opts.Bootstrap, stream)
	}
	for _, f := range figs {
		row := Row{Figure: f}
		for i := range runs {
			e, ok := per[i][f.Key]
			if !ok {
				e = stats.Undefined()
			}
			row.Values = append(row.Values, e.Value)
			if i == 0 {
				row.Changes = append(row.Changes, stats.Change{Delta: math.NaN(), CI: stats.NoCI(), Relative: f.Relative})
				continue
			}
			row.Changes = append(row.Changes, stats.Compare(per[0][f.Key], e, opts.Bootstrap.Confidence, f.Relative))
		}
		s.Rows = append(s.Rows, row)
	}
	// A bootstrap of a tail percentile rests on the samples above it: with fewer than 10
	// its replicates take few distinct values and its interval is unreliable.
	for i, r := range s.reports {
		n := min(r.TTFT.N, r.TPOT.N)
		if r.Unary != nil { // no TTFT, no TPOT: the latency's
			n = r.E2E.N
		}
		if n > 0 && n < 1000 {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%srun %s: p99 from %d requests (fewer than 10 above it): its intervals are unreliable", pointPrefix(point), s.Runs[i].Label, n))
		}
		if a := r.Agents; a != nil && a.Makespan.N > 0 && a.Makespan.N < 1000 {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%srun %s: agent makespan and slowdown p99 from %d sessions (fewer than 10 above it): their intervals are unreliable", pointPrefix(point), s.Runs[i].Label, a.Makespan.N))
		}
	}
	if s.reports[0].Agents != nil && !strings.Contains(c.Method, agentMethod) {
		c.Method += " " + agentMethod
	}
	for _, r := range s.Runs {
		if r.ClientLimited {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%srun %s is client-limited: its numbers describe the replayer, not the endpoint", pointPrefix(point), r.Label))
		}
		if r.Overloaded {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%srun %s is overloaded: its throughput is what the endpoint gave, not what it sustains", pointPrefix(point), r.Label))
		}
		if r.PromptOff {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%srun %s's prompts were counted more than %s off their targets by the server: it processed other prompts than the trace's (analyze says how)", pointPrefix(point), r.Label, analysis.FormatPct(100*analysis.PromptOffBound)))
		}
	}
	return s, nil
}

// tpSeries is a throughput figure of one run: its value as reported and its per-window
// series, whose block bootstrap gives the figure's spread.
type tpSeries struct {
	key      string
	value    float64
	xs       []float64
	minBlock int
}

// throughputs fills in the throughput figures' estimates. Paired runs (the same trace,
// speed and mode, and as many repeats each: repeat k of every run has the same schedule)
// resample, repeat by repeat, the same blocks of
// windows in every run, with one block length (the longest any run asks for), so the
// interval measures how the runs differ window by window and not how the trace's load
// varies over time, which the runs share. Other runs resample independently.
//
// Only sustained output tok/s is paired: its value is its windows' mean. The overall rates
// and goodput divide by the run's own span (first send to last end), a single measurement
// per run that no window sees: paired, two runs of one schedule whose windows hold the
// same requests gave a zero-width interval around the spans' 0.02% difference, called
// significant in every such pair (35% of bench/compare-false-alarm.sh's pairs). They are
// resampled run by run.
func (c *Comparison) throughputs(point string, paired bool, ests [][]map[string]stats.Estimate, tps [][][]tpSeries) {
	b := c.Options.Bootstrap
	for i := range tps {
		for k := range tps[i] {
			for _, t := range tps[i][k] {
				if paired && pairedFigure(t.key) {
					continue
				}
				ests[i][k][t.key] = scaledBlock(b, t.value, t.xs, stats.BlockLength(t.xs, t.minBlock), fmt.Sprintf("%s/%s/%d/%s", point, label(i), k+1, t.key))
			}
		}
	}
	if !paired {
		return
	}
	for k := range tps[0] {
		find := func(i int, key string) (tpSeries, bool) {
			for _, t := range tps[i][k] {
				if t.key == key {
					return t, true
				}
			}
			return tpSeries{}, false
		}
		for _, t0 := range tps[0][k] {
			if !pairedFigure(t0.key) {
				continue
			}
			l, n := 1, len(t0.xs)
			for i := range tps {
				if t, ok := find(i, t0.key); ok {
					l, n = max(l, stats.BlockLength(t.xs, t.minBlock)), min(n, len(t.xs))
				}
			}
			for i := range tps {
				if t, ok := find(i, t0.key); ok {
					ests[i][k][t.key] = scaledBlock(b, t.value, t.xs[:n], min(l, max(n/2, 1)), fmt.Sprintf("%s/paired/%d/%s", point, k+1, t.key))
				}
			}
		}
	}
}

// pairedFigure reports whether paired runs resample the windows of the figure at key
// together (its declaration's CompareSpec.Paired).
func pairedFigure(key string) bool {
	f := analysis.FigureByKey(key)
	return f != nil && f.Compare != nil && f.Compare.Paired
}

// scaledBlock is the estimate of a throughput figure: its reported value, and replicates
// that move with the block bootstrap of its per-window series (value × replicate mean /
// series mean).
func scaledBlock(b stats.Bootstrap, value float64, xs []float64, block int, stream string) stats.Estimate {
	if math.IsNaN(value) || len(xs) == 0 {
		return stats.Undefined()
	}
	e := b.BlockMean(xs, block, stream)
	out := stats.Estimate{Value: value, Reps: make([]float64, len(e.Reps))}
	for i, v := range e.Reps {
		switch {
		case e.Value != 0:
			out.Reps[i] = value * v / e.Value
		case value == 0:
			out.Reps[i] = 0
		default:
			return stats.Undefined()
		}
	}
	return out
}

func pointPrefix(point string) string {
	if point == "" {
		return ""
	}
	return point + ": "
}

// differences lists what makes runs not comparable: the trace, the speed, the mode.
func differences(runs []RunInfo) []string {
	var out []string
	a := runs[0].Meta
	for _, r := range runs[1:] {
		b := r.Meta
		add := func(what, va, vb string) {
			if va != vb {
				out = append(out, fmt.Sprintf("%s %s %s, A %s", r.Label, what, vb, va))
			}
		}
		add("trace_sha256", short(a.TraceSHA256), short(b.TraceSHA256))
		add("mode", orOpen(a.Mode), orOpen(b.Mode))
		add("speedup", analysis.FormatLoad(a.Speedup), analysis.FormatLoad(b.Speedup))
		add("rate", analysis.FormatLoad(a.Rate), analysis.FormatLoad(b.Rate))
		add("concurrency", strconv.Itoa(a.Concurrency), strconv.Itoa(b.Concurrency))
	}
	return out
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}

func orOpen(m string) string {
	if m == "" {
		return results.ModeOpen
	}
	return m
}

// windows sums the 10 ms bins [lo, hi) into 100 ms windows (the last one partial).
func windows(bins []float64, lo, hi int64) []float64 {
	if hi <= lo {
		return nil
	}
	out := make([]float64, (hi-lo+9)/10)
	for b := lo; b < hi && b < int64(len(bins)); b++ {
		if b >= 0 {
			out[(b-lo)/10] += bins[b]
		}
	}
	return out
}

// readMeta returns the validated run metadata of the results file pr reads (at path).
func readMeta(path string, pr *file.Reader) (results.RunMeta, error) {
	m, err := results.ReadRun(path, pr)
	if err != nil {
		return m, fmt.Errorf("analysis: %w", err)
	}
	return m, nil
}
