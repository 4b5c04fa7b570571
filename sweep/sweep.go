// Package sweep replays a trace at a series of loads and reports the curve, the saturation
// knee and the highest load that meets the SLOs. It owns what makes a sweep more than a
// loop of replays: the plan of points (a list of loads, or the knee search's probes), each
// point's replay options (its load, output and a prompt seed no other point shares), the
// idle check of the endpoint between points, the sweep's folder with its state, so that an
// interrupted sweep resumes where it stopped without storing a secret, and the reports:
// Report (report.go) judges the points (the knee, and its brackets when points were
// repeated, repeats.go) and writes the table, JSON, sweep.parquet and page, the columns
// declared once (columns.go), each point's numbers read through analysis's figures.
//
// Running one replay is not its business: a Replayer does that (the CLI's, with its
// progress and messages, the same as `llmreplay replay`'s), so a point is exactly a replay.
package sweep

import (
	"github.com/llmreplay/llmreplay/stats"

	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/internal/atomicfile"
	"github.com/llmreplay/llmreplay/internal/repeat"
	"github.com/llmreplay/llmreplay/replay"
)

// The axes a sweep varies the load on, named after replay's flags.
const (
	Speedup     = "speedup"     // open loop: the trace replayed N times faster
	Rate        = "rate"        // open loop: the trace rescaled to a mean of N requests/s
	Concurrency = "concurrency" // closed loop: N workers
	Agents      = "agents"      // N agent sessions started at once (replay --agent-sessions N)
)

// Config is a sweep: the replay its points share, the loads, and how to judge and report
// them. Its error texts name the CLI's flags, as replay.Config's do.
type Config struct {
	// Replay is every point's replay; a point's is a copy with its load set on the axis,
	// its output in Dir and a prompt seed of its own.
	Replay replay.Config
	// Flags is Replay's run-metadata flag map (what the command line set or defaulted);
	// each point's records its own load, output and seed.
	Flags map[string]string
	// Args is the command line, stored without its secrets in a new sweep's state so that
	// a resume parses it again (ResumeArgs); Given names the flags it set.
	Args  []string
	Given map[string]bool

	Dir   string    // the sweep's folder: the points' results files, the state, the reports
	Axis  string    // Speedup, Rate, Concurrency or Agents
	Loads []float64 // the points of a list sweep; none with Auto
	Auto  bool      // search the saturation load and the highest load meeting the SLOs

	// The search (with Auto) and the judging of every point, as in stats.KneeOptions,
	// but for Attainment, in percent of due requests.
	Start, Max, Resolution float64
	MaxPoints              int
	MinRatio, MinGain      float64
	Attainment             float64
	// MaxSlowdown (--max-slowdown), the agents axis's objective: a point meets it when
	// Attainment percent of its sessions took at most MaxSlowdown times their recorded
	// makespan (SessionAttainment); 0: no objective.
	MaxSlowdown float64

	Repeat      int           // replays per point; the point's row is its median repeat's
	Cooldown    time.Duration // pause between points, and between a point's repeats
	IdleCheck   bool          // before each replay, wait until the endpoint's /metrics shows it idle
	IdleTimeout time.Duration // how long the idle check waits before going on with a warning
	JSON        bool          // print the report as JSON instead of the text table

	Replayer Replayer
	Stdout   io.Writer // the report
	Stderr   io.Writer // the progress of the sweep, and what the Replayer logs
}

// A Replayer runs the sweep's replays.
type Replayer interface {
	// Check returns why a point's replay options cannot run, beyond what
	// replay.Config.Validate finds (the CLI's: an unknown simulated-engine profile), or
	// nil. The sweep checks every point it plans before it makes its folder.
	Check(cfg *replay.Config) error
	// Replay runs one replay to its results file, r.Config.Output, and returns its run id
	// once it started. A stop (ctx done) ends it as a stopped replay ends.
	Replay(ctx context.Context, r Replay) (runID string, err error)
}

// Replay is one replay of a point: the whole point, or one of its repeats.
type Replay struct {
	Config replay.Config
	Flags  map[string]string // its run-metadata flag map
	// Repeat is its 1-based index among the Repeats of a repeated point, and Group the run
	// id of the point's first repeat ("" for the first, which names the group); all zero
	// for a point that is not repeated.
	Repeat, Repeats int
	Group           string
}

// ConfigError is a sweep that cannot run: a bad value or combination in its Config, or a
// resume that does not give what its state needs. Its text names the flag; the CLI
// reports it as a usage error.
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

func configErrorf(format string, a ...any) error {
	return &ConfigError{fmt.Sprintf(format, a...)}
}

// IsConfigError reports whether err is (or wraps) a ConfigError.
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}

// Validate checks the sweep and every point's replay it plans (with Auto: the first),
// without touching a file, the network or the clock (as long as the Replayer's Check does
// not).
func (c *Config) Validate() error {
	if c.Replayer == nil {
		return errors.New("sweep: no Replayer")
	}
	if c.Dir == "" {
		return configErrorf("sweep: -o DIR is required")
	}
	switch c.Axis {
	case Speedup, Rate, Concurrency, Agents:
	default:
		return configErrorf("sweep: axis %q: want speedup, rate, concurrency or agents", c.Axis)
	}
	if c.Auto == (len(c.Loads) > 0) {
		return configErrorf("sweep: give exactly one of --speedups, --rates, --concurrencies, --agents and --auto")
	}
	if err := c.validateAgents(); err != nil {
		return err
	}
	for _, l := range c.Loads {
		if !(l > 0) || math.IsInf(l, 0) {
			return configErrorf("sweep: load %v: every point must be positive", l)
		}
		if (c.Axis == Concurrency || c.Axis == Agents) && l != math.Trunc(l) {
			return configErrorf("sweep: %s %v: want whole numbers", c.Axis, l)
		}
	}
	if err := repeat.Check(c.Repeat, &c.Replay); err != nil {
		return configErrorf("sweep: %v", err)
	}
	if c.Cooldown < 0 {
		return configErrorf("sweep: --cooldown %v: want a duration >= 0", c.Cooldown)
	}
	if c.Auto && c.Replay.Concurrency > 0 {
		return configErrorf("sweep: --auto searches open-loop loads only")
	}
	if !(c.Attainment > 0 && c.Attainment <= 100) {
		return configErrorf("sweep: --attainment %v: want a percentage in (0, 100]", c.Attainment)
	}
	if !(c.MinGain > 0 && c.MinGain < 1) {
		return configErrorf("sweep: --min-gain %v: want a fraction in (0, 1), such as 0.1 for 10%%", c.MinGain)
	}
	if c.Auto {
		ko := c.kneeOptions()
		if err := ko.Validate(); err != nil {
			return configErrorf("sweep: %v", err)
		}
		if c.Axis == Concurrency && (c.Start != math.Trunc(c.Start) || c.Max != math.Trunc(c.Max)) {
			return configErrorf("sweep: --auto-axis concurrency: --start %v and --max %v must be whole numbers", c.Start, c.Max)
		}
	}
	if _, err := c.analysisOptions(); err != nil {
		return err
	}
	return c.checkPoints()
}

// checkPoints checks every planned point's replay options, so that a bad one is refused
// before the sweep makes its folder or sends a request.
func (c *Config) checkPoints() error {
	loads := c.Loads
	if c.Auto {
		loads = []float64{c.Start}
	}
	for _, load := range loads {
		cfg, _ := c.pointConfig(load, filepath.Join(c.Dir, "check.parquet"), 1)
		err := cfg.Validate()
		if err == nil {
			err = c.Replayer.Check(&cfg)
		}
		if err != nil {
			return configErrorf("sweep: at %s %s: %v", c.Axis, fmtLoad(load), err)
		}
	}
	return nil
}

// kneeOptions returns the search's options. With Auto, analysis's defaults fill the zero
// fields (--min-ratio 0 searches with 0.95), as the search itself would.
func (c *Config) kneeOptions() stats.KneeOptions {
	ko := stats.KneeOptions{Start: c.Start, Max: c.Max, Resolution: c.Resolution, MinRatio: c.MinRatio, MinGain: c.MinGain,
		Attainment: c.Attainment / 100, HasSLO: c.Replay.SLO != "", MaxPoints: c.MaxPoints}
	if c.Auto {
		_ = ko.Validate() // for its defaults; Config.Validate has reported its errors
	}
	return ko
}

// analysisOptions returns the options every point is analysed with: the defaults and the
// replay's SLOs.
func (c *Config) analysisOptions() (analysis.Options, error) {
	opts := analysis.DefaultOptions()
	if c.Replay.SLO != "" {
		slo, err := analysis.ParseSLO(c.Replay.SLO)
		if err != nil {
			return opts, configErrorf("sweep: --slo: %v", err)
		}
		opts.SLO = slo
	}
	return opts, nil
}

// Run runs the sweep cfg describes in cfg.Dir, then writes its reports there and prints
// one. resumed is the state of the interrupted sweep it continues (ResumeArgs), its
// finished points kept; nil starts a new sweep, in a folder that holds none. A stop (ctx
// done) ends the point in progress, drops its files and reports the finished points.
func Run(ctx context.Context, cfg *Config, resumed *State) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := cfg.checkAgentTrace(); err != nil {
		return err
	}
	state := resumed
	if state != nil {
		if err := state.checkWithheld(cfg); err != nil {
			return err
		}
	}
	dir := cfg.Dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	if state == nil {
		if _, err := os.Stat(filepath.Join(dir, StateFile)); err == nil {
			return fmt.Errorf("sweep: %s already holds a sweep: continue it with --resume %s, or choose another -o", dir, dir)
		}
		var err error
		if state, err = newState(cfg); err != nil {
			return err
		}
		if err := state.Write(dir); err != nil {
			return err
		}
	}
	aopts, err := cfg.analysisOptions()
	if err != nil {
		return err
	}
	sw := &sweeper{ctx: ctx, cfg: cfg, state: state, aopts: aopts, ko: cfg.kneeOptions(), rows: map[float64]Row{}}
	for _, p := range state.Points {
		row, err := sw.analyse(p.Load, p.File, p.Repeats...)
		if err != nil {
			return fmt.Errorf("sweep: resume: %w", err)
		}
		sw.rows[p.Load] = row
		fmt.Fprintf(cfg.Stderr, "llmreplay: sweep: kept %s %s from %s\n", cfg.Axis, fmtLoad(p.Load), p.File)
	}
	knee, runErr := sw.runPoints()
	return sw.finish(knee, runErr)
}

// finish writes and prints the sweep's report from the finished points.
func (sw *sweeper) finish(knee *stats.KneeResult, runErr error) error {
	if len(sw.rows) == 0 {
		if runErr != nil {
			return runErr
		}
		return errors.New("sweep: no point finished")
	}
	rows := make([]Row, 0, len(sw.rows))
	for _, r := range sw.rows {
		rows = append(rows, r)
	}
	if runErr != nil {
		knee = nil // an interrupted search's bounds are partial: judge the finished points alone
	}
	rep := NewReport(sw.cfg.Axis, rows, sw.ko, knee)
	if err := writeReports(sw.cfg.Dir, rep); err != nil {
		return err
	}
	var err error
	if sw.cfg.JSON {
		err = rep.WriteJSON(sw.cfg.Stdout)
	} else {
		err = rep.WriteText(sw.cfg.Stdout)
	}
	if err != nil {
		return err
	}
	if runErr != nil {
		if sw.ctx.Err() != nil {
			return fmt.Errorf("sweep: interrupted after %d points; they are kept in %s: continue with llmreplay sweep --resume %s", len(sw.rows), sw.cfg.Dir, sw.cfg.Dir)
		}
		return runErr
	}
	return nil
}

// writeReports writes the sweep's report in every format into dir, each file atomically.
func writeReports(dir string, rep *Report) error {
	if err := rep.WriteParquet(filepath.Join(dir, "sweep.parquet")); err != nil {
		return err
	}
	if err := rep.WriteHTMLFile(filepath.Join(dir, "sweep.html")); err != nil {
		return err
	}
	for name, write := range map[string]func(io.Writer) error{"sweep.json": rep.WriteJSON, "sweep.txt": rep.WriteText} {
		path := filepath.Join(dir, name)
		if err := atomicfile.Write(path, write); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}
