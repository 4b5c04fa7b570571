package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/internal/atomicfile"
	"github.com/llmreplay/llmreplay/replay"
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

  # An interrupted sweep continues where it stopped (finished points are kept)
  llmreplay sweep --resume sweep-auto/`

// sweepState is DIR/sweep-state.json: the sweep's command line and its finished points, so
// that --resume continues with the same options and skips what is done.
type sweepState struct {
	Version int         `json:"version"`
	Args    []string    `json:"args"`
	Points  []sweepDone `json:"points"`
	Started time.Time   `json:"started"`
}

type sweepDone struct {
	Load float64 `json:"load"`
	File string  `json:"file"` // relative to DIR
}

const sweepStateFile = "sweep-state.json"

type sweepFlags struct {
	speedups, rates                                 []float64
	concurrencies                                   []int
	auto                                            bool
	autoAxis                                        string
	start, max, resolution, minRatio, attainmentPct float64
	maxPoints                                       int
	cooldown, idleTimeout                           time.Duration
	idleCheck, jsonOut                              bool
	resume                                          string
}

func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var resumeDir string
	for i, a := range args {
		if a == "--resume" && i+1 < len(args) {
			resumeDir = args[i+1]
		} else if v, ok := strings.CutPrefix(a, "--resume="); ok {
			resumeDir = v
		}
	}
	var state *sweepState
	if resumeDir != "" {
		st, err := readSweepState(resumeDir)
		if err != nil {
			return err
		}
		// The sweep continues with the options it was started with; only --json (how the
		// result is printed) may be added.
		var extra []string
		for i := 0; i < len(args); i++ {
			switch a := args[i]; {
			case a == "--resume":
				i++
			case strings.HasPrefix(a, "--resume="):
			case a == "--json":
				extra = append(extra, a)
			default:
				return usagef("sweep: --resume takes no other flags than --json: the sweep continues with its own (%s)", strings.Join(st.Args, " "))
			}
		}
		state, args = st, append(append([]string(nil), st.Args...), extra...)
	}

	fs := newFlagSet("sweep", "llmreplay sweep (--speedups a,b,c | --rates a,b,c | --concurrencies a,b,c | --auto) -o DIR [replay flags]", sweepExamples, stdout)
	var rf replayFlags
	addReplayFlags(fs, &rf)
	for _, n := range []string{"speedup", "rate", "concurrency", "keep-journal", "strict"} {
		fs.MarkHidden(n) // set per point by the sweep
	}
	out := fs.Lookup("output")
	out.Usage, out.DefValue = "directory for the points' results files and the sweep's reports (required)", ""
	var sf sweepFlags
	fs.Float64SliceVar(&sf.speedups, "speedups", nil, "open-loop points at these speedups of the trace")
	fs.Float64SliceVar(&sf.rates, "rates", nil, "open-loop points at these mean request rates (req/s), the trace's shape kept")
	fs.IntSliceVar(&sf.concurrencies, "concurrencies", nil, "closed-loop points with these numbers of concurrent workers")
	fs.BoolVar(&sf.auto, "auto", false, "search for the saturation load and the highest load meeting --slo (bracket, then bisect)")
	fs.StringVar(&sf.autoAxis, "auto-axis", "speedup", "axis of --auto: speedup or rate")
	fs.Float64Var(&sf.start, "start", 1, "--auto: first load probed")
	fs.Float64Var(&sf.max, "max", 1024, "--auto: highest load probed")
	fs.Float64Var(&sf.resolution, "resolution", 0.05, "--auto: stop when (fail-pass)/pass is at most this")
	fs.IntVar(&sf.maxPoints, "max-points", 24, "--auto: at most this many points")
	fs.Float64Var(&sf.minRatio, "min-ratio", 0.95, "a load is sustained while sustained output tok/s >= this share of offered, and not overloaded")
	fs.Float64Var(&sf.attainmentPct, "attainment", 99, "SLO attainment (percent of due requests) a load must reach to meet --slo")
	fs.DurationVar(&sf.cooldown, "cooldown", 5*time.Second, "pause between points")
	fs.BoolVar(&sf.idleCheck, "idle-check", true, "before each point, wait until the endpoint's /metrics shows no running or waiting requests (when it has /metrics)")
	fs.DurationVar(&sf.idleTimeout, "idle-timeout", 2*time.Minute, "how long the idle check waits before going on with a warning")
	fs.BoolVar(&sf.jsonOut, "json", false, "print the sweep as JSON instead of the text table")
	fs.StringVar(&sf.resume, "resume", "", "continue the interrupted sweep in DIR, with the options it was started with")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("sweep: unexpected argument %q", fs.Arg(0))
	}
	for n, list := range map[string]string{"speedup": "speedups", "rate": "rates", "concurrency": "concurrencies"} {
		if fs.Changed(n) {
			return usagef("sweep: --%s is set per point: give --%s (or --auto) instead", n, list)
		}
	}
	dir := rf.output
	if !fs.Changed("output") || dir == "" {
		return usagef("sweep: -o DIR is required")
	}
	axis, loads, err := sf.axis()
	if err != nil {
		return err
	}
	if sf.auto && rf.concurrency > 0 {
		return usagef("sweep: --auto searches open-loop loads only")
	}
	if !(sf.attainmentPct > 0 && sf.attainmentPct <= 100) {
		return usagef("sweep: --attainment %v: want a percentage in (0, 100]", sf.attainmentPct)
	}
	ko := analysis.KneeOptions{Start: sf.start, Max: sf.max, Resolution: sf.resolution, MinRatio: sf.minRatio,
		Attainment: sf.attainmentPct / 100, HasSLO: rf.slo != "", MaxPoints: sf.maxPoints}
	if sf.auto {
		if err := ko.Validate(); err != nil {
			return usagef("sweep: %v", err)
		}
	}
	aopts := analysis.DefaultOptions()
	if rf.slo != "" {
		if aopts.SLO, err = analysis.ParseSLO(rf.slo); err != nil {
			return usagef("sweep: --slo: %v", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	if state == nil {
		if _, err := os.Stat(filepath.Join(dir, sweepStateFile)); err == nil {
			return fmt.Errorf("sweep: %s already holds a sweep: continue it with --resume %s, or choose another -o", dir, dir)
		}
		state = &sweepState{Version: 1, Args: args, Started: time.Now().UTC()}
		if err := writeSweepState(dir, state); err != nil {
			return err
		}
	}

	sw := &sweeper{ctx: ctx, fs: fs, rf: &rf, sf: &sf, axis: axis, dir: dir, state: state, aopts: aopts,
		stdout: stdout, stderr: stderr, rows: map[float64]analysis.SweepRow{}}
	for _, p := range state.Points {
		row, err := sw.analyse(p.Load, p.File)
		if err != nil {
			return fmt.Errorf("sweep: resume: %w", err)
		}
		sw.rows[p.Load] = row
		fmt.Fprintf(stderr, "llmreplay: sweep: kept %s %s from %s\n", axis, fmtLoadFlag(p.Load), p.File)
	}

	var knee *analysis.KneeResult
	var runErr error
	if sf.auto {
		knee, runErr = analysis.SearchKnee(ctx, func(ctx context.Context, load float64) (analysis.SweepPoint, error) {
			row, err := sw.point(load)
			if err != nil {
				return analysis.SweepPoint{}, err
			}
			return row.Point(), nil
		}, ko)
	} else {
		for _, l := range loads {
			if _, err := sw.point(l); err != nil {
				runErr = err
				break
			}
		}
	}
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
	rep := analysis.NewSweepReport(axis, rows, ko, knee)
	if err := sw.writeReports(rep); err != nil {
		return err
	}
	if sf.jsonOut {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	if runErr != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("sweep: interrupted after %d points; they are kept in %s: continue with llmreplay sweep --resume %s", len(sw.rows), dir, dir)
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
		case "speedup", "rate":
			axis = sf.autoAxis
		default:
			return "", nil, usagef("sweep: --auto-axis %q: want speedup or rate", sf.autoAxis)
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
	fs             *pflag.FlagSet
	rf             *replayFlags
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
	if sw.ran > 0 && sw.sf.cooldown > 0 {
		select {
		case <-time.After(sw.sf.cooldown):
		case <-sw.ctx.Done():
			return analysis.SweepRow{}, sw.ctx.Err()
		}
	}
	sw.ran++
	if sw.sf.idleCheck && sw.rf.endpoint != "" {
		sw.waitIdle()
	}
	file := fmt.Sprintf("point-%02d-%s-%s.parquet", len(sw.state.Points)+1, sw.axis, fmtLoadFlag(load))
	path := filepath.Join(sw.dir, file)
	// The axes are named after replay's flags: --speedup, --rate, --concurrency.
	if err := sw.fs.Set(sw.axis, fmtLoadFlag(load)); err != nil {
		return analysis.SweepRow{}, err
	}
	if err := sw.fs.Set("output", path); err != nil {
		return analysis.SweepRow{}, err
	}
	rf := *sw.rf // the flag values, with the per-point ones just set
	rf.quiet = true
	fmt.Fprintf(sw.stderr, "llmreplay: sweep: point %d: %s %s -> %s\n", len(sw.state.Points)+1, sw.axis, fmtLoadFlag(load), path)
	started := time.Now()
	err := doReplay(sw.ctx, sw.fs, &rf, io.Discard, sw.stderr)
	if sw.ctx.Err() != nil {
		// An interrupted point is not a measurement of this load: drop it, resume reruns it.
		os.Remove(path)
		return analysis.SweepRow{}, sw.ctx.Err()
	}
	if err != nil {
		return analysis.SweepRow{}, fmt.Errorf("sweep: %s %s: %w", sw.axis, fmtLoadFlag(load), err)
	}
	row, err := sw.analyse(load, file)
	if err != nil {
		return analysis.SweepRow{}, err
	}
	sw.rows[load] = row
	sw.state.Points = append(sw.state.Points, sweepDone{Load: load, File: file})
	if err := writeSweepState(sw.dir, sw.state); err != nil {
		return analysis.SweepRow{}, err
	}
	pt := row.Point()
	fmt.Fprintf(sw.stderr, "llmreplay: sweep: point %d done in %s: offered %.1f tok/s, sustained %.1f tok/s, TTFT p99 %.1f ms%s\n",
		len(sw.state.Points), time.Since(started).Round(time.Second), pt.OfferedTokensPerSecond, pt.SustainedTokensPerSecond,
		row.Report.TTFT.P99, flagsNote(row.Report))
	return row, nil
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

func (sw *sweeper) analyse(load float64, file string) (analysis.SweepRow, error) {
	path := filepath.Join(sw.dir, file)
	d, err := analysis.Load(sw.ctx, analysis.LoadOptions{AllowPartial: true}, path)
	if err != nil {
		return analysis.SweepRow{}, err
	}
	return analysis.NewSweepRow(sw.axis, load, file, d, sw.aopts)
}

// waitIdle polls the endpoint's Prometheus /metrics until no request is running or waiting
// (vLLM's and SGLang's gauge names; the simulated engine uses vLLM's), so a point does not
// start while the previous one's requests still occupy the engine. An endpoint without
// /metrics is taken as idle.
func (sw *sweeper) waitIdle() {
	base, err := replay.BaseURL(sw.rf.endpoint)
	if err != nil {
		return
	}
	root := *base
	root.Path = strings.TrimSuffix(strings.TrimSuffix(root.Path, "/"), "/v1") + "/metrics"
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

// scrapeBusy sums the running and waiting request gauges of a Prometheus text page.
func scrapeBusy(ctx context.Context, client *http.Client, url string) (busy float64, known bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false
	}
	return parseBusy(resp.Body)
}

var busyGauges = []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "sglang:num_running_reqs", "sglang:num_queue_reqs"}

func parseBusy(r io.Reader) (busy float64, known bool) {
	sc := bufio.NewScanner(io.LimitReader(r, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, g := range busyGauges {
			if rest, ok := strings.CutPrefix(line, g); ok && (strings.HasPrefix(rest, "{") || strings.HasPrefix(rest, " ")) {
				fields := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
				if len(fields) == 0 {
					continue
				}
				if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
					busy += v
					known = true
				}
			}
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
