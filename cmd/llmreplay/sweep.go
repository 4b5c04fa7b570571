package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/internal/atomicfile"
	"github.com/llmreplay/llmreplay/internal/prom"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

func init() {
	register(&command{
		name:    "sweep",
		summary: "replay a trace at a series of loads; report the curve, the saturation knee and the SLO limit",
		run:     runSweep,
	})
}

const sweepExamples = `  # The built-in simulated engine at five speedups of the bundled sample, 60 s each
  llmreplay sweep --speedups 2,4,8,16,32 --duration 60s -o sweep-sim/

  # Find the saturation point and the highest rate meeting the SLOs, to 5%
  llmreplay sweep --trace t.parquet --endpoint http://127.0.0.1:8000/v1 --auto --auto-axis rate \
    --start 1 --max 512 --slo ttft=2s,tpot=100ms --duration 2m -o sweep-auto/

  # The classic closed-loop concurrency table
  llmreplay sweep --trace t.parquet --endpoint http://127.0.0.1:8000/v1 --concurrencies 1,2,4,8,16,32,64 \
    --limit 2000 -o sweep-conc/

  # Find the concurrency where throughput saturates (doubling adds < 10%) and the highest
  # concurrency meeting the SLOs: doublings 1, 2, 4 ... up to 1024, then the SLO bound bisected
  llmreplay sweep --trace t.parquet --endpoint http://127.0.0.1:8000/v1 --auto --auto-axis concurrency \
    --slo ttft=2s,tpot=100ms --duration 1m -o sweep-conc-auto/

  # Three repeats at each point, 10 s apart (point-01-speedup-2.r1.parquet ...): each point's
  # row is its median repeat's; llmreplay analyze DIR/point-01-*.r?.parquet gives the spread
  llmreplay sweep --speedups 2,4,8 --repeat 3 --cooldown 10s --duration 60s -o sweep-rep/

  # An interrupted sweep continues where it stopped (finished points are kept)
  llmreplay sweep --resume sweep-auto/`

// sweepState is DIR/sweep-state.json: the sweep's command line and its finished points, so
// that --resume continues with the same options and skips what is done. The command line
// is stored without its secrets: flags that may carry one (--api-key, --header, an
// --endpoint with userinfo or a query) are left out and named in Withheld, and --resume
// asks for them again (the API key may come from the environment instead).
type sweepState struct {
	Version  int         `json:"version"`
	Args     []string    `json:"args"`
	Points   []sweepDone `json:"points"`
	Started  time.Time   `json:"started"`
	Withheld []string    `json:"withheld,omitempty"` // flag names, e.g. "endpoint"
	Endpoint string      `json:"endpoint,omitempty"` // a withheld --endpoint's safe form
}

type sweepDone struct {
	Load float64 `json:"load"`
	File string  `json:"file"` // relative to DIR
	// Repeats are a repeated point's files (sweep --repeat), relative to DIR, repeat 1
	// first; File is then the point's file without the repeat (point-01-rate-2.parquet).
	Repeats []string `json:"repeats,omitempty"`
}

const sweepStateFile = "sweep-state.json"

type sweepFlags struct {
	speedups, rates                                 []float64
	concurrencies                                   []int
	auto                                            bool
	autoAxis                                        string
	start, max, resolution, minRatio, attainmentPct float64
	minGain                                         float64
	maxPoints                                       int
	cooldown, idleTimeout                           time.Duration
	repeat                                          int
	idleCheck, jsonOut                              bool
	resume                                          string
}

// sweepPlan is a parsed, checked sweep command line.
type sweepPlan struct {
	fs    *pflag.FlagSet
	cfg   replay.Config     // the replay options every point shares
	flags map[string]string // their run-metadata flag map
	sf    sweepFlags
	axis  string
	loads []float64
	dir   string
	ko    stats.KneeOptions
	aopts analysis.Options
}

func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	state, args, err := sweepResumeArgs(args)
	if err != nil {
		return err
	}
	sp, err := parseSweep(args, stdout)
	if err != nil {
		return err
	}
	if state != nil {
		if err := state.checkWithheld(sp); err != nil {
			return err
		}
	}
	dir := sp.dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	if state == nil {
		if _, err := os.Stat(filepath.Join(dir, sweepStateFile)); err == nil {
			return fmt.Errorf("sweep: %s already holds a sweep: continue it with --resume %s, or choose another -o", dir, dir)
		}
		if state, err = newSweepState(args, &sp.cfg, sp.fs); err != nil {
			return err
		}
		if err := writeSweepState(dir, state); err != nil {
			return err
		}
	}

	sw := &sweeper{ctx: ctx, cfg: sp.cfg, flags: sp.flags, sf: &sp.sf, axis: sp.axis, dir: dir, state: state, aopts: sp.aopts,
		stdout: stdout, stderr: stderr, rows: map[float64]analysis.SweepRow{}}
	for _, p := range state.Points {
		row, err := sw.analyse(p.Load, p.File, p.Repeats...)
		if err != nil {
			return fmt.Errorf("sweep: resume: %w", err)
		}
		sw.rows[p.Load] = row
		fmt.Fprintf(stderr, "llmreplay: sweep: kept %s %s from %s\n", sp.axis, fmtLoadFlag(p.Load), p.File)
	}
	knee, runErr := sw.runPoints(sp)
	return sw.finish(sp, knee, runErr)
}

// sweepResumeArgs reads the state of a --resume DIR and returns the command line to parse:
// the stored one, plus --json and the withheld secret flags when the resume gives them.
func sweepResumeArgs(args []string) (*sweepState, []string, error) {
	var resumeDir string
	for i, a := range args {
		if a == "--resume" && i+1 < len(args) {
			resumeDir = args[i+1]
		} else if v, ok := strings.CutPrefix(a, "--resume="); ok {
			resumeDir = v
		}
	}
	if resumeDir == "" {
		return nil, args, nil
	}
	st, err := readSweepState(resumeDir)
	if err != nil {
		return nil, nil, err
	}
	// The sweep continues with the options it was started with; only --json (how the
	// result is printed) and the flags it withheld may be added.
	var extra []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--resume":
			i++
		case strings.HasPrefix(a, "--resume="):
		case a == "--json":
			extra = append(extra, a)
		default:
			n := secretFlagTokens(args, i)
			if n == 0 || len(st.Withheld) == 0 {
				return nil, nil, usagef("sweep: --resume takes no other flags than --json: the sweep continues with its own (%s)", strings.Join(st.Args, " "))
			}
			extra = append(extra, args[i:i+n]...)
			i += n - 1
		}
	}
	return st, append(append([]string(nil), st.Args...), extra...), nil
}

// secretFlags are the flags whose values may be secrets: stored in sweep-state.json only
// when the value is not one (an --endpoint without userinfo or query).
var secretFlags = map[string]string{"--endpoint": "endpoint", "-e": "endpoint", "--api-key": "api-key", "--header": "header", "-H": "header"}

// secretFlagTokens returns how many tokens of args, from i, are one secret flag with its
// value (--endpoint URL, --endpoint=URL, -eURL, -H 'N: v'...), or 0 when args[i] is not one.
func secretFlagTokens(args []string, i int) int {
	if _, ok := secretFlagName(args[i]); !ok {
		return 0
	}
	if _, bare := secretFlags[args[i]]; bare && i+1 < len(args) {
		return 2 // the flag, then its value
	}
	return 1
}

// secretFlagName returns the name of the secret flag token a starts (in any form).
func secretFlagName(a string) (string, bool) {
	if n, ok := secretFlags[a]; ok {
		return n, true
	}
	for form, n := range secretFlags {
		long := strings.HasPrefix(form, "--")
		if (long && strings.HasPrefix(a, form+"=")) || (!long && len(a) > 2 && strings.HasPrefix(a, form)) {
			return n, true
		}
	}
	return "", false
}

// newSweepState starts the state of a new sweep, its command line without secrets.
func newSweepState(args []string, cfg *replay.Config, fs *pflag.FlagSet) (*sweepState, error) {
	st := &sweepState{Version: 1, Started: time.Now().UTC()}
	withheld := map[string]bool{}
	for i := 0; i < len(args); i++ {
		n := secretFlagTokens(args, i)
		if n == 0 {
			st.Args = append(st.Args, args[i])
			continue
		}
		name, _ := secretFlagName(args[i])
		if name == "endpoint" && !replay.HasSecret(cfg.Endpoint) {
			st.Args = append(st.Args, args[i:i+n]...)
		} else {
			withheld[name] = true
		}
		i += n - 1
	}
	for _, n := range []string{"endpoint", "api-key", "header"} {
		if withheld[n] {
			st.Withheld = append(st.Withheld, n)
		}
	}
	if withheld["endpoint"] {
		st.Endpoint = replay.SafeURL(cfg.Endpoint)
	}
	// A --scrape URL's credentials or query would be stored with the command line.
	for _, u := range cfg.Scrape {
		if replay.HasSecret(u) {
			return nil, usagef("sweep: --scrape %s carries credentials or a query, which %s would store: give the sweep a metrics URL without them", replay.SafeURL(u), sweepStateFile)
		}
	}
	// Whatever form a secret took (-qeURL, say), it must not be stored.
	for _, a := range st.Args {
		if holdsSecret(a, cfg, fs.Changed("api-key")) {
			return nil, usagef("sweep: cannot store the command line without its secrets: give --endpoint, --api-key and --header as separate flags")
		}
	}
	return st, nil
}

// holdsSecret reports whether a command-line token holds one of cfg's secrets: the
// endpoint's userinfo or query, a whole --header, the API key when a flag gave it.
func holdsSecret(a string, cfg *replay.Config, keyFromFlag bool) bool {
	if keyFromFlag && cfg.APIKey != "" && strings.Contains(a, cfg.APIKey) {
		return true
	}
	for _, h := range cfg.Headers {
		if h != "" && strings.HasSuffix(a, h) {
			return true
		}
	}
	if replay.HasSecret(cfg.Endpoint) && strings.Contains(a, cfg.Endpoint) {
		return true
	}
	if u, err := url.Parse(cfg.Endpoint); err == nil && u.User != nil {
		return strings.Contains(a, u.User.String())
	}
	return false
}

// checkWithheld makes a resume give again the secret flags the state left out.
func (st *sweepState) checkWithheld(sp *sweepPlan) error {
	for _, n := range st.Withheld {
		given := sp.fs.Changed(n)
		if n == "api-key" {
			given = sp.cfg.APIKey != "" // the flag, or $LLMREPLAY_API_KEY / $OPENAI_API_KEY
		}
		if given {
			continue
		}
		what := "--" + n
		if n == "endpoint" {
			what = fmt.Sprintf("--endpoint (%s, with its credentials)", st.Endpoint)
		}
		return usagef("sweep: --resume: this sweep's %s is not stored (it may hold a secret): give it again with --resume", what)
	}
	return nil
}

// parseSweep parses and checks sweep's command line.
func parseSweep(args []string, stdout io.Writer) (*sweepPlan, error) {
	fs := newFlagSet("sweep", "llmreplay sweep (--speedups a,b,c | --rates a,b,c | --concurrencies a,b,c | --auto) -o DIR [replay flags]", sweepExamples, stdout)
	sp := &sweepPlan{fs: fs, cfg: replay.DefaultConfig()}
	addReplayFlags(fs, &sp.cfg)
	for _, n := range []string{"speedup", "rate", "concurrency", "keep-journal", "strict"} {
		fs.MarkHidden(n) // set per point by the sweep
	}
	out := fs.Lookup("output")
	out.Usage, out.DefValue = "directory for the points' results files and the sweep's reports (required)", ""
	addSweepFlags(fs, &sp.sf)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usagef("sweep: unexpected argument %q", fs.Arg(0))
	}
	setGiven(fs, &sp.cfg)
	for n, list := range map[string]string{"speedup": "speedups", "rate": "rates", "concurrency": "concurrencies"} {
		if fs.Changed(n) {
			return nil, usagef("sweep: --%s is set per point: give --%s (or --auto) instead", n, list)
		}
	}
	sp.dir = sp.cfg.Output
	if !fs.Changed("output") || sp.dir == "" {
		return nil, usagef("sweep: -o DIR is required")
	}
	var err error
	if sp.axis, sp.loads, err = sp.sf.axis(); err != nil {
		return nil, err
	}
	if err := checkRepeat("sweep", sp.sf.repeat, &sp.cfg); err != nil {
		return nil, err
	}
	if sp.sf.cooldown < 0 {
		return nil, usagef("sweep: --cooldown %v: want a duration >= 0", sp.sf.cooldown)
	}
	sf := &sp.sf
	if sf.auto && sp.cfg.Concurrency > 0 {
		return nil, usagef("sweep: --auto searches open-loop loads only")
	}
	if !(sf.attainmentPct > 0 && sf.attainmentPct <= 100) {
		return nil, usagef("sweep: --attainment %v: want a percentage in (0, 100]", sf.attainmentPct)
	}
	if !(sf.minGain > 0 && sf.minGain < 1) {
		return nil, usagef("sweep: --min-gain %v: want a fraction in (0, 1), such as 0.1 for 10%%", sf.minGain)
	}
	sp.ko = stats.KneeOptions{Start: sf.start, Max: sf.max, Resolution: sf.resolution, MinRatio: sf.minRatio, MinGain: sf.minGain,
		Attainment: sf.attainmentPct / 100, HasSLO: sp.cfg.SLO != "", MaxPoints: sf.maxPoints}
	if sf.auto {
		if err := sp.ko.Validate(); err != nil {
			return nil, usagef("sweep: %v", err)
		}
		if sp.axis == "concurrency" && (sf.start != math.Trunc(sf.start) || sf.max != math.Trunc(sf.max)) {
			return nil, usagef("sweep: --auto-axis concurrency: --start %v and --max %v must be whole numbers", sf.start, sf.max)
		}
	}
	sp.aopts = analysis.DefaultOptions()
	if sp.cfg.SLO != "" {
		if sp.aopts.SLO, err = analysis.ParseSLO(sp.cfg.SLO); err != nil {
			return nil, usagef("sweep: --slo: %v", err)
		}
	}
	sp.flags = behaviourFlags(fs)
	if sp.sf.repeat == 1 {
		delete(sp.flags, "repeat") // an unrepeated point's metadata is what it was before --repeat
	}
	// Every point's replay options are checked now, before a folder is made or a request sent.
	probe := &sweeper{cfg: sp.cfg, flags: sp.flags, axis: sp.axis}
	loads := sp.loads
	if sf.auto {
		loads = []float64{sf.start}
	}
	for _, load := range loads {
		cfg, _ := probe.pointConfig(load, filepath.Join(sp.dir, "check.parquet"), 1)
		if err := checkReplayConfig(&cfg); err != nil {
			return nil, usagef("sweep: at %s %s: %v", sp.axis, fmtLoadFlag(load), strings.TrimPrefix(err.Error(), "replay: "))
		}
	}
	return sp, nil
}

func addSweepFlags(fs *pflag.FlagSet, sf *sweepFlags) {
	fs.Float64SliceVar(&sf.speedups, "speedups", nil, "open-loop points at these speedups of the trace")
	fs.Float64SliceVar(&sf.rates, "rates", nil, "open-loop points at these mean request rates (req/s), the trace's shape kept")
	fs.IntSliceVar(&sf.concurrencies, "concurrencies", nil, "closed-loop points with these numbers of concurrent workers")
	fs.BoolVar(&sf.auto, "auto", false, "search for the saturation load and the highest load meeting --slo (bracket, then bisect)")
	fs.StringVar(&sf.autoAxis, "auto-axis", "speedup", "axis of --auto: speedup, rate (open loop) or concurrency (closed loop: doublings from --start, then the SLO bound bisected on whole concurrencies)")
	fs.Float64Var(&sf.start, "start", 1, "--auto: first load probed (a whole number on the concurrency axis)")
	fs.Float64Var(&sf.max, "max", 1024, "--auto: highest load probed (a whole number on the concurrency axis)")
	fs.Float64Var(&sf.resolution, "resolution", 0.05, "--auto: stop when (fail-pass)/pass is at most this (on the concurrency axis, also when fail = pass+1)")
	fs.IntVar(&sf.maxPoints, "max-points", 24, "--auto: at most this many points")
	fs.Float64Var(&sf.minRatio, "min-ratio", 0.95, "open loop: a load is sustained while sustained output tok/s >= this share of offered, and not overloaded")
	fs.Float64Var(&sf.minGain, "min-gain", 0.10, "closed loop: saturation is the smallest concurrency after which doubling adds less than this share of sustained output tok/s (per doubling when the steps are not doublings)")
	fs.Float64Var(&sf.attainmentPct, "attainment", 99, "SLO attainment (percent of due requests) a load must reach to meet --slo")
	fs.DurationVar(&sf.cooldown, "cooldown", defaultCooldown, "pause between points, and between a point's repeats")
	addRepeatFlag(fs, &sf.repeat, "point")
	fs.BoolVar(&sf.idleCheck, "idle-check", true, "before each point, wait until the endpoint's /metrics shows no running or waiting requests (when it has /metrics)")
	fs.DurationVar(&sf.idleTimeout, "idle-timeout", 2*time.Minute, "how long the idle check waits before going on with a warning")
	fs.BoolVar(&sf.jsonOut, "json", false, "print the sweep as JSON instead of the text table")
	fs.StringVar(&sf.resume, "resume", "", "continue the interrupted sweep in DIR, with the options it was started with")
}

// runPoints runs the sweep's points: the list, or the --auto search.
func (sw *sweeper) runPoints(sp *sweepPlan) (*stats.KneeResult, error) {
	if sp.sf.auto {
		probe := func(ctx context.Context, load float64) (stats.SweepPoint, error) {
			row, err := sw.point(load)
			if err != nil {
				return stats.SweepPoint{}, err
			}
			return row.Point(), nil
		}
		if sp.axis == "concurrency" {
			return stats.SearchConcurrency(sw.ctx, probe, sp.ko)
		}
		return stats.SearchKnee(sw.ctx, probe, sp.ko)
	}
	for _, l := range sp.loads {
		if _, err := sw.point(l); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// finish writes and prints the sweep's report from the finished points.
func (sw *sweeper) finish(sp *sweepPlan, knee *stats.KneeResult, runErr error) error {
	if len(sw.rows) == 0 {
		if runErr != nil {
			return runErr
		}
		return errors.New("sweep: no point finished")
	}
	rows := make([]analysis.SweepRow, 0, len(sw.rows))
	for _, r := range sw.rows {
		rows = append(rows, r)
	}
	if runErr != nil {
		knee = nil // an interrupted search's bounds are partial: judge the finished points alone
	}
	rep := analysis.NewSweepReport(sp.axis, rows, sp.ko, knee)
	if err := sw.writeReports(rep); err != nil {
		return err
	}
	var err error
	if sp.sf.jsonOut {
		err = rep.WriteJSON(sw.stdout)
	} else {
		err = rep.WriteText(sw.stdout)
	}
	if err != nil {
		return err
	}
	if runErr != nil {
		if sw.ctx.Err() != nil {
			return fmt.Errorf("sweep: interrupted after %d points; they are kept in %s: continue with llmreplay sweep --resume %s", len(sw.rows), sp.dir, sp.dir)
		}
		return runErr
	}
	return nil
}

// axis returns the sweep's axis and, for a list sweep, its loads.
func (sf *sweepFlags) axis() (string, []float64, error) {
	given := 0
	var axis string
	var loads []float64
	if len(sf.speedups) > 0 {
		given, axis, loads = given+1, "speedup", sf.speedups
	}
	if len(sf.rates) > 0 {
		given, axis, loads = given+1, "rate", sf.rates
	}
	if len(sf.concurrencies) > 0 {
		given, axis = given+1, "concurrency"
		loads = nil
		for _, c := range sf.concurrencies {
			loads = append(loads, float64(c))
		}
	}
	if sf.auto {
		given++
		switch sf.autoAxis {
		case "speedup", "rate", "concurrency":
			axis = sf.autoAxis
		default:
			return "", nil, usagef("sweep: --auto-axis %q: want speedup, rate or concurrency", sf.autoAxis)
		}
	}
	if given != 1 {
		return "", nil, usagef("sweep: give exactly one of --speedups, --rates, --concurrencies and --auto")
	}
	for _, l := range loads {
		if !(l > 0) || math.IsInf(l, 0) {
			return "", nil, usagef("sweep: load %v: every point must be positive", l)
		}
		if axis == "concurrency" && l != math.Trunc(l) {
			return "", nil, usagef("sweep: concurrency %v: want whole numbers", l)
		}
	}
	return axis, loads, nil
}

type sweeper struct {
	ctx            context.Context
	cfg            replay.Config     // the options every point shares
	flags          map[string]string // their run-metadata flag map
	sf             *sweepFlags
	axis, dir      string
	state          *sweepState
	aopts          analysis.Options
	stdout, stderr io.Writer
	rows           map[float64]analysis.SweepRow
	ran            int // points run by this process (for the cooldown)
}

// point returns the row at load, running a replay for it unless a finished one is kept.
func (sw *sweeper) point(load float64) (analysis.SweepRow, error) {
	if r, ok := sw.rows[load]; ok {
		return r, nil
	}
	if err := sw.ctx.Err(); err != nil {
		return analysis.SweepRow{}, err
	}
	file := fmt.Sprintf("point-%02d-%s-%s.parquet", len(sw.state.Points)+1, sw.axis, fmtLoadFlag(load))
	path := filepath.Join(sw.dir, file)
	cfg, flags := sw.pointConfig(load, path, len(sw.state.Points)+1)
	n := max(sw.sf.repeat, 1)
	var repeats []string
	started := time.Now()
	group := ""
	for r := 1; r <= n; r++ {
		if sw.ran > 0 && !cooldown(sw.ctx, sw.sf.cooldown) {
			sw.removeAll(repeats)
			return analysis.SweepRow{}, sw.ctx.Err()
		}
		sw.ran++
		if sw.sf.idleCheck && sw.cfg.Endpoint != "" {
			sw.waitIdle()
		}
		rcfg, rflags, ro := cfg, flags, repeatOf{}
		if n > 1 {
			rcfg, rflags = repeatConfig(cfg, flags, r, n)
			ro = repeatOf{index: r, count: n, group: group}
			repeats = append(repeats, filepath.Base(rcfg.Output))
			fmt.Fprintf(sw.stderr, "llmreplay: sweep: point %d: %s %s, repeat %d of %d -> %s\n", len(sw.state.Points)+1, sw.axis, fmtLoadFlag(load), r, n, rcfg.Output)
		} else {
			fmt.Fprintf(sw.stderr, "llmreplay: sweep: point %d: %s %s -> %s\n", len(sw.state.Points)+1, sw.axis, fmtLoadFlag(load), path)
		}
		id, err := doReplayRepeat(sw.ctx, rcfg, rflags, ro, io.Discard, sw.stderr)
		if r == 1 {
			group = id
		}
		if sw.ctx.Err() != nil {
			// An interrupted point is not a measurement of this load: drop it (all its
			// repeats), resume reruns it.
			os.Remove(rcfg.Output)
			os.Remove(results.MetricsPath(rcfg.Output))
			sw.removeAll(repeats)
			return analysis.SweepRow{}, sw.ctx.Err()
		}
		if err != nil {
			return analysis.SweepRow{}, fmt.Errorf("sweep: %s %s: %w", sw.axis, fmtLoadFlag(load), err)
		}
	}
	row, err := sw.analyse(load, file, repeats...)
	if err != nil {
		return analysis.SweepRow{}, err
	}
	sw.rows[load] = row
	sw.state.Points = append(sw.state.Points, sweepDone{Load: load, File: file, Repeats: repeats})
	if err := writeSweepState(sw.dir, sw.state); err != nil {
		return analysis.SweepRow{}, err
	}
	pt := row.Point()
	if sp := row.Spread; sp != nil {
		fmt.Fprintf(sw.stderr, "llmreplay: sweep: point %d, %d repeats: sustained %.1f - %.1f tok/s, TTFT p99 %.1f - %.1f ms (intervals: docs/metrics.md, \"Sweep\"); the row is the median repeat's\n",
			len(sw.state.Points), sp.Repeats, sp.Sustained.Lo, sp.Sustained.Hi, sp.TTFTP99.Lo, sp.TTFTP99.Hi)
	}
	if sw.axis == "concurrency" {
		fmt.Fprintf(sw.stderr, "llmreplay: sweep: point %d done in %s: sustained %.1f tok/s, %.1f tok/s per user (mean), TTFT p99 %.1f ms%s\n",
			len(sw.state.Points), time.Since(started).Round(time.Second), pt.SustainedTokensPerSecond, row.Report.PerUser.TokensPerS.Mean,
			row.Report.TTFT.P99, flagsNote(row.Report))
		return row, nil
	}
	fmt.Fprintf(sw.stderr, "llmreplay: sweep: point %d done in %s: offered %.1f tok/s, sustained %.1f tok/s, TTFT p99 %.1f ms%s\n",
		len(sw.state.Points), time.Since(started).Round(time.Second), pt.OfferedTokensPerSecond, pt.SustainedTokensPerSecond,
		row.Report.TTFT.P99, flagsNote(row.Report))
	return row, nil
}

// pointConfig returns the replay of point n (1-based): a copy of the sweep's options with
// the load set on the axis (named after replay's flags: --speedup, --rate, --concurrency),
// the output, and the prompt seed --seed + (n−1)·2^40, and its flag map with the same flags
// as the command line would give them. Each point sends prompt text no earlier point sent:
// the points replay the same trace, and an engine with automatic prefix caching (vLLM's and
// SGLang's default, the simulated engine's) would otherwise serve a later point's prompts
// from the blocks an earlier point left in its cache, and measure cache hits, not the load.
// The prompt builder offsets request and block ids by the seed (docs/prompts.md), so seeds
// 2^40 apart share no prompt unless the trace's ids span more than 2^40.
// pointSeedShift spaces the points' prompt seeds (pointConfig).
const pointSeedShift = 40

func (sw *sweeper) pointConfig(load float64, path string, n int) (replay.Config, map[string]string) {
	cfg := sw.cfg
	// The sweep owns its folder: a point's file or journal left by an interrupted or killed
	// sweep is not a measurement, and --resume reruns that point over it.
	cfg.Output, cfg.Quiet, cfg.Force = path, true, true
	cfg.Seed += uint64(n-1) << pointSeedShift
	value := fmtLoadFlag(load)
	switch sw.axis {
	case "speedup":
		cfg.Speedup, cfg.SpeedupSet = load, true
	case "rate":
		cfg.Rate, cfg.RateSet = load, true
	case "concurrency":
		cfg.Concurrency, cfg.ConcurrencySet = int(load), true
		value = strconv.Itoa(cfg.Concurrency)
	}
	flags := maps.Clone(sw.flags)
	flags[sw.axis], flags["output"], flags["seed"] = value, path, strconv.FormatUint(cfg.Seed, 10)
	return cfg, flags
}

func flagsNote(r *analysis.Report) string {
	var s []string
	if r.Flags.ClientLimited {
		s = append(s, "client-limited")
	}
	if r.Flags.Overloaded {
		s = append(s, "overloaded")
	}
	if len(s) == 0 {
		return ""
	}
	return " [" + strings.Join(s, ", ") + "]"
}

// analyse returns the row of the point at load: its file's, or, for a repeated point (its
// repeats' files given), analysis.NewRepeatedSweepRow of its repeats' rows and data: its
// median repeat's row, with the intervals across the repeats.
func (sw *sweeper) analyse(load float64, file string, repeats ...string) (analysis.SweepRow, error) {
	files := repeats
	if len(files) == 0 {
		files = []string{file}
	}
	rows := make([]analysis.SweepRow, 0, len(files))
	data := make([]*analysis.Data, 0, len(files))
	for _, f := range files {
		d, err := analysis.Load(sw.ctx, analysis.LoadOptions{AllowPartial: true}, filepath.Join(sw.dir, f))
		if err != nil {
			return analysis.SweepRow{}, err
		}
		row, err := analysis.NewSweepRow(sw.axis, load, f, d, sw.aopts)
		if err != nil {
			return analysis.SweepRow{}, err
		}
		rows, data = append(rows, row), append(data, d)
	}
	if len(repeats) == 0 {
		return rows[0], nil
	}
	return analysis.NewRepeatedSweepRow(rows, data), nil
}

// removeAll removes files of DIR.
func (sw *sweeper) removeAll(files []string) {
	for _, f := range files {
		os.Remove(filepath.Join(sw.dir, f))
		os.Remove(results.MetricsPath(filepath.Join(sw.dir, f)))
	}
}

// waitIdle polls the endpoint's Prometheus /metrics until no request is running or waiting
// (vLLM's, SGLang's, TGI's and the llama.cpp server's gauge names; the simulated engine uses vLLM's), so a point does not
// start while the previous one's requests still occupy the engine. An endpoint without
// /metrics is taken as idle.
func (sw *sweeper) waitIdle() {
	base, err := replay.BaseURL(sw.cfg.Endpoint)
	if err != nil {
		return
	}
	root := replay.MetricsURL(base)
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(sw.sf.idleTimeout)
	for {
		busy, known := scrapeBusy(sw.ctx, client, root.String())
		if !known || busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(sw.stderr, "llmreplay: sweep: WARNING: the endpoint still has %g requests running or waiting after %v; starting the point anyway\n", busy, sw.sf.idleTimeout)
			return
		}
		select {
		case <-time.After(time.Second):
		case <-sw.ctx.Done():
			return
		}
	}
}

// scrapeBusy sums the running and waiting request gauges of a Prometheus exposition.
func scrapeBusy(ctx context.Context, client *http.Client, url string) (busy float64, known bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false
	}
	req.Header.Set("Accept", prom.Accept)
	resp, err := client.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false
	}
	return parseBusy(io.LimitReader(resp.Body, replay.MaxExposition), resp.Header)
}

var busyGauges = []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "sglang:num_running_reqs", "sglang:num_queue_reqs",
	"tgi_queue_size", "tgi_batch_current_size", "llamacpp:requests_processing", "llamacpp:requests_deferred"}

// parseBusy sums busyGauges over their label sets; known is false when the exposition does
// not parse or has none of them.
func parseBusy(r io.Reader, h http.Header) (busy float64, known bool) {
	samples, err := prom.Parse(r, h)
	if err != nil {
		return 0, false
	}
	for _, s := range samples {
		if slices.Contains(busyGauges, s.Name) {
			busy += s.Value
			known = true
		}
	}
	return busy, known
}

func (sw *sweeper) writeReports(rep *analysis.SweepReport) error {
	if err := rep.WriteParquet(filepath.Join(sw.dir, "sweep.parquet")); err != nil {
		return err
	}
	if err := rep.WriteHTMLFile(filepath.Join(sw.dir, "sweep.html")); err != nil {
		return err
	}
	for name, write := range map[string]func(io.Writer) error{"sweep.json": rep.WriteJSON, "sweep.txt": rep.WriteText} {
		if err := writeFileAtomic(filepath.Join(sw.dir, name), write); err != nil {
			return err
		}
	}
	return nil
}

// fmtLoadFlag formats a load exactly (shortest round-trip form), for flags and file names.
func fmtLoadFlag(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func readSweepState(dir string) (*sweepState, error) {
	path := filepath.Join(dir, sweepStateFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sweep: resume: %w", err)
	}
	var st sweepState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("sweep: resume: %s: %w", path, err)
	}
	if st.Version != 1 || len(st.Args) == 0 {
		return nil, fmt.Errorf("sweep: resume: %s: not a version 1 sweep state", path)
	}
	return &st, nil
}

func writeSweepState(dir string, st *sweepState) error {
	return writeFileAtomic(filepath.Join(dir, sweepStateFile), func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	})
}

// writeFileAtomic writes path through internal/atomicfile: a synced temporary file beside
// it, renamed into place, 0644 under the umask.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	if err := atomicfile.Write(path, write); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
