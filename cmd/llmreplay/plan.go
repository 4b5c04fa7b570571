package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/plan"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/stats"
	"github.com/llmreplay/llmreplay/sweep"
)

func init() {
	register(&command{
		name:    "plan",
		summary: "the highest load a twin of the engine (a profile) serves a trace at within an SLO, its knee, and its figures at chosen loads",
		run:     runPlan,
	})
}

const planExamples = `  # The highest request rate a fitted twin serves the trace at within the SLO, its
  # saturation, and the figures there, each beside the twin's error on held-out runs
  llmreplay plan --trace t.parquet --profile twin.json --slo ttft=2s,tpot=100ms

  # The figures the twin predicts at 5, 10 and 20 requests/s (the trace's shape kept,
  # rescaled as replay --rate does)
  llmreplay plan --trace t.parquet --profile twin.json --slo ttft=2s --rates 5,10,20

  # At 1x, 2x and 4x the trace's own arrivals, on a built-in profile, as JSON
  llmreplay plan --trace t.parquet --profile moe-230b-8gpu --speedups 1,2,4 --json

  # Closed loop, as replay --concurrency runs it: the concurrency after which doubling
  # the workers stops paying, and the figures at 1, 8 and 64 workers
  llmreplay plan --trace t.parquet --profile twin.json --concurrencies 1,8,64`

// runPlan is `llmreplay plan`: package plan searches and renders; this reads the flags,
// the trace and the profile.
func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", "llmreplay plan --profile NAME|FILE [--trace T] [--slo ...] [--rates a,b | --speedups a,b | --concurrencies a,b] [--json]", planExamples, stdout)
	tracePath := fs.StringP("trace", "t", "", "trace file (trace/v1 Parquet); default: the bundled sample")
	profile := fs.String("profile", "", "the twin: a built-in ("+strings.Join(sim.Profiles(), ", ")+") or a profile file, fitted by llmreplay sim fit or not (required)")
	fs.StringVar(profile, "sim-profile", "", "the same as --profile, as replay and sweep name it")
	sloText := fs.String("slo", "", "SLOs, as sweep's: e.g. ttft=2s,tpot=100ms (ttft, tpot, e2e)")
	rates := fs.Float64Slice("rates", nil, "report the figures at these mean request rates (req/s), the trace's shape kept (replay --rate); the search is then on the rate axis")
	speedups := fs.Float64Slice("speedups", nil, "report the figures at these speedups of the trace's arrivals; the search is then on the speedup axis")
	concurrencies := fs.IntSlice("concurrencies", nil, "report the figures of closed loops with these numbers of workers (replay --concurrency); the search is then on the concurrency axis, by doublings")
	axis := fs.String("auto-axis", "", "axis of the search: rate, speedup or concurrency (default: that of --rates, --speedups or --concurrencies, else rate)")
	var ko stats.KneeOptions
	fs.Float64Var(&ko.Start, "start", 0.25, "first load searched (on the concurrency axis default 1, and a whole number)")
	fs.Float64Var(&ko.Max, "max", 4096, "highest load searched")
	fs.Float64Var(&ko.Resolution, "resolution", 0.02, "stop when (fail-pass)/pass is at most this")
	fs.IntVar(&ko.MaxPoints, "max-points", 40, "at most this many loads simulated by the search")
	fs.Float64Var(&ko.MinRatio, "min-ratio", 0.95, "open loop: a load is sustained while sustained output tok/s >= this share of offered, and not overloaded")
	fs.Float64Var(&ko.MinGain, "min-gain", 0.10, "closed loop: saturation is the smallest concurrency after which doubling adds less than this share of sustained output tok/s")
	attainment := fs.Float64("attainment", 99, "SLO attainment (percent of requests) a load must reach to meet --slo")
	jsonOut := fs.Bool("json", false, "print the plan as JSON instead of text")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("plan: unexpected argument %q", fs.Arg(0))
	}
	if *profile == "" {
		return usagef("plan: --profile NAME|FILE is required: the twin to plan on")
	}
	o := plan.Options{Knee: ko, At: *rates, Axis: *axis}
	o.Knee.Attainment = *attainment / 100
	given := 0
	for _, n := range []int{len(*rates), len(*speedups), len(*concurrencies)} {
		if n > 0 {
			given++
		}
	}
	switch {
	case given > 1:
		return usagef("plan: give one of --rates, --speedups and --concurrencies")
	case len(*speedups) > 0:
		o.At = *speedups
		if o.Axis == "" {
			o.Axis = sweep.Speedup
		}
	case len(*concurrencies) > 0:
		o.At = nil
		for _, c := range *concurrencies {
			o.At = append(o.At, float64(c))
		}
		if o.Axis == "" {
			o.Axis = sweep.Concurrency
		}
	case o.Axis == "":
		o.Axis = sweep.Rate
	}
	if (len(*rates) > 0 && o.Axis != sweep.Rate) || (len(*speedups) > 0 && o.Axis != sweep.Speedup) || (len(*concurrencies) > 0 && o.Axis != sweep.Concurrency) {
		return usagef("plan: --auto-axis %s does not match the loads given (--rates is the rate axis, --speedups the speedup axis, --concurrencies the concurrency axis)", o.Axis)
	}
	if o.Axis == sweep.Concurrency && !fs.Changed("start") {
		o.Knee.Start = 1
	}
	slo, err := analysis.ParseSLO(*sloText)
	if err != nil {
		return usagef("plan: --slo: %v", err)
	}
	o.SLO = slo
	p, _, err := sim.LoadProfile(*profile)
	if err != nil {
		return usagef("plan: --profile: %v", err)
	}
	tr, err := plan.ReadTrace(*tracePath)
	if err != nil {
		return fmt.Errorf("plan: --trace: %w", err)
	}
	pl, err := plan.Run(ctx, p.Config, tr, o)
	if err != nil {
		return err
	}
	rep := plan.NewReport(pl, &tr, &p, *profile)
	if *jsonOut {
		return rep.WriteJSON(stdout)
	}
	return rep.WriteText(stdout)
}
