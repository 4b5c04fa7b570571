package main

import (
	"context"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/sweep"
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

  # How many concurrent agents before a task takes 20% longer than recorded: point N replays
  # the agent trace's first N sessions started at once (replay --agent-sessions N); the limit
  # is the highest N where 90% of the sessions took at most 1.2x their recorded makespan
  llmreplay sweep --trace agents.parquet --endpoint http://127.0.0.1:8000/v1 --agents 1,2,4,8,16 \
    --max-slowdown 1.2 --attainment 90 -o sweep-agents/

  # An interrupted sweep continues where it stopped (finished points are kept)
  llmreplay sweep --resume sweep-auto/`

type sweepFlags struct {
	speedups, rates                                 []float64
	concurrencies, agents                           []int
	maxSlowdown                                     float64
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

// runSweep turns the command line (a resumed sweep's: its stored one) into a sweep.Config
// and runs it; the sweep package does the rest.
func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	state, args, err := sweep.ResumeArgs(args)
	if err != nil {
		return sweepUsage(err)
	}
	cfg, err := parseSweep(args, stdout, stderr)
	if err != nil {
		return err
	}
	return sweepUsage(sweep.Run(ctx, cfg, state))
}

// sweepUsage makes the sweep's configuration errors usage errors (exit status 2).
func sweepUsage(err error) error {
	if sweep.IsConfigError(err) {
		return &usageError{err.Error()}
	}
	return err
}

// parseSweep parses sweep's command line into a sweep.Config, checking what only the
// flags say (which were given); sweep.Config.Validate checks the rest.
func parseSweep(args []string, stdout, stderr io.Writer) (*sweep.Config, error) {
	fs := newFlagSet("sweep", "llmreplay sweep (--speedups a,b,c | --rates a,b,c | --concurrencies a,b,c | --agents a,b,c | --auto) -o DIR [replay flags]", sweepExamples, stdout)
	cfg := replay.DefaultConfig()
	addReplayFlags(fs, &cfg)
	for _, n := range []string{"speedup", "rate", "concurrency", "agent-sessions", "keep-journal", "strict"} {
		fs.MarkHidden(n) // set per point by the sweep
	}
	out := fs.Lookup("output")
	out.Usage, out.DefValue = "directory for the points' results files and the sweep's reports (required)", ""
	var sf sweepFlags
	addSweepFlags(fs, &sf)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usagef("sweep: unexpected argument %q", fs.Arg(0))
	}
	setGiven(fs, &cfg)
	for n, list := range map[string]string{"speedup": "speedups", "rate": "rates", "concurrency": "concurrencies", "agent-sessions": "agents"} {
		if fs.Changed(n) {
			if n != "agent-sessions" {
				list += " (or --auto)"
			}
			return nil, usagef("sweep: --%s is set per point: give --%s instead", n, list)
		}
	}
	if !fs.Changed("output") || cfg.Output == "" {
		return nil, usagef("sweep: -o DIR is required")
	}
	axis, loads, err := sf.axis()
	if err != nil {
		return nil, err
	}
	flags := behaviourFlags(fs)
	if sf.repeat == 1 {
		delete(flags, "repeat") // an unrepeated point's metadata is what it was before --repeat
	}
	given := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { given[f.Name] = true })
	return &sweep.Config{Replay: cfg, Flags: flags, Args: args, Given: given,
		Dir: cfg.Output, Axis: axis, Loads: loads, Auto: sf.auto,
		Start: sf.start, Max: sf.max, Resolution: sf.resolution, MaxPoints: sf.maxPoints,
		MinRatio: sf.minRatio, MinGain: sf.minGain, Attainment: sf.attainmentPct, MaxSlowdown: sf.maxSlowdown,
		Repeat: sf.repeat, Cooldown: sf.cooldown, IdleCheck: sf.idleCheck, IdleTimeout: sf.idleTimeout, JSON: sf.jsonOut,
		Replayer: cliReplayer{stderr}, Stdout: stdout, Stderr: stderr}, nil
}

func addSweepFlags(fs *pflag.FlagSet, sf *sweepFlags) {
	fs.Float64SliceVar(&sf.speedups, "speedups", nil, "open-loop points at these speedups of the trace")
	fs.Float64SliceVar(&sf.rates, "rates", nil, "open-loop points at these mean request rates (req/s), the trace's shape kept")
	fs.IntSliceVar(&sf.concurrencies, "concurrencies", nil, "closed-loop points with these numbers of concurrent workers")
	fs.IntSliceVar(&sf.agents, "agents", nil, "agent points: replay the trace's first N agent sessions, started at once (replay --agent-sessions N), for each N")
	fs.Float64Var(&sf.maxSlowdown, "max-slowdown", 0, "--agents: a point meets the objective when --attainment percent of its sessions took at most this many times their recorded makespan (1.2: 20% longer)")
	fs.BoolVar(&sf.auto, "auto", false, "search for the saturation load and the highest load meeting --slo (bracket, then bisect)")
	fs.StringVar(&sf.autoAxis, "auto-axis", "speedup", "axis of --auto: speedup, rate (open loop) or concurrency (closed loop: doublings from --start, then the SLO bound bisected on whole concurrencies)")
	fs.Float64Var(&sf.start, "start", 1, "--auto: first load probed (a whole number on the concurrency axis)")
	fs.Float64Var(&sf.max, "max", 1024, "--auto: highest load probed (a whole number on the concurrency axis)")
	fs.Float64Var(&sf.resolution, "resolution", 0.05, "--auto: stop when (fail-pass)/pass is at most this (on the concurrency axis, also when fail = pass+1)")
	fs.IntVar(&sf.maxPoints, "max-points", 24, "--auto: at most this many points")
	fs.Float64Var(&sf.minRatio, "min-ratio", 0.95, "open loop: a load is sustained while sustained output tok/s >= this share of offered, and not overloaded")
	fs.Float64Var(&sf.minGain, "min-gain", 0.10, "closed loop: saturation is the smallest concurrency after which doubling adds less than this share of sustained output tok/s (per doubling when the steps are not doublings)")
	fs.Float64Var(&sf.attainmentPct, "attainment", 99, "SLO attainment (percent of due requests; with --agents, of sessions) a load must reach to meet --slo (--max-slowdown)")
	fs.DurationVar(&sf.cooldown, "cooldown", defaultCooldown, "pause between points, and between a point's repeats")
	addRepeatFlag(fs, &sf.repeat, "point")
	fs.BoolVar(&sf.idleCheck, "idle-check", true, "before each point, wait until the endpoint's /metrics shows no running or waiting requests (when it has /metrics)")
	fs.DurationVar(&sf.idleTimeout, "idle-timeout", 2*time.Minute, "how long the idle check waits before going on with a warning")
	fs.BoolVar(&sf.jsonOut, "json", false, "print the sweep as JSON instead of the text table")
	fs.StringVar(&sf.resume, "resume", "", "continue the interrupted sweep in DIR, with the options it was started with")
}

// axis returns the sweep's axis and, for a list sweep, its loads (sweep.Config.Validate
// checks them).
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
	if len(sf.agents) > 0 {
		given, axis = given+1, "agents"
		loads = nil
		for _, c := range sf.agents {
			loads = append(loads, float64(c))
		}
	}
	if sf.auto {
		given++
		switch sf.autoAxis {
		case "speedup", "rate", "concurrency":
			axis = sf.autoAxis
		case "agents":
			return "", nil, usagef("sweep: --auto does not search the agents axis: list the counts, such as --agents 1,2,4,8,16")
		default:
			return "", nil, usagef("sweep: --auto-axis %q: want speedup, rate or concurrency", sf.autoAxis)
		}
	}
	if given != 1 {
		return "", nil, usagef("sweep: give exactly one of --speedups, --rates, --concurrencies, --agents and --auto")
	}
	return axis, loads, nil
}

// cliReplayer runs a sweep's points as `llmreplay replay` runs (its checks, its messages
// on stderr), their reports unprinted.
type cliReplayer struct{ stderr io.Writer }

func (cliReplayer) Check(cfg *replay.Config) error { return replayConfigProblem(cfg) }

func (r cliReplayer) Replay(ctx context.Context, rp sweep.Replay) (string, error) {
	return doReplayRepeat(ctx, rp.Config, rp.Flags, repeatOf{index: rp.Repeat, count: rp.Repeats, group: rp.Group}, io.Discard, r.stderr)
}
