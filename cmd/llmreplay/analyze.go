package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
)

func init() {
	register(&command{
		name:    "analyze",
		summary: "report throughput, latency percentiles, goodput and flags from results files",
		run:     runAnalyze,
	})
}

const analyzeExamples = `  # The text report of one run
  llmreplay analyze results.parquet

  # Goodput and attainment under SLOs, as one JSON object for scripts
  llmreplay analyze results.parquet --slo ttft=2s,tpot=100ms --json

  # A reasoning model: objectives on the time to the first answer token and the
  # answer's own TPOT (docs/metrics.md, "Reasoning")
  llmreplay analyze results.parquet --slo ttfa=3s,answer_tpot=50ms

  # Shards of one run merge on absolute time; an HTML report and Parquet summaries
  llmreplay analyze shard-*.parquet --html report.html --parquet summary/

  # A run that scraped /metrics (replay --scrape) is read with results.metrics.parquet
  # beside it: the report adds the engine's queue, KV cache and GPUs (docs/metrics.md)
  llmreplay analyze results.parquet --interval 5s --html report.html
  # The repeats of one run (replay --repeat 3): pooled figures, and the median and the
  # range across the repeats
  llmreplay analyze results.r?.parquet

  # Exclude a fixed 30 s warm-up; choose the prompt-length buckets
  llmreplay analyze results.parquet --warmup 30s --buckets prompt=512,2048,8192`

func runAnalyze(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("analyze", "llmreplay analyze results.parquet... [flags]", analyzeExamples, stdout)
	sloFlag := fs.String("slo", "", "objectives for goodput and attainment, e.g. ttft=2s,tpot=100ms,e2e=30s; a reasoning model's ttfa=3s,answer_tpot=50ms (default: the run's own --slo)")
	warmup := fs.String("warmup", "auto", "warm-up excluded from the steady-state window, from the first send: a duration, or auto to detect it (MSER-5)")
	maxLate := fs.Duration("max-lateness", 0, "schedule-lateness p99 above which the run is flagged client-limited; closed loop: of the steady state after the first wave (default: the run's, else 10ms)")
	interval := fs.Duration("interval", time.Second, "time-series interval (a multiple of 10ms)")
	var buckets []string
	fs.StringArrayVar(&buckets, "buckets", nil, "length-bucket edges: EDGES for both breakdowns, or prompt=EDGES / output=EDGES (repeatable); default log-spaced")
	jsonOut := fs.Bool("json", false, "print one JSON object (keys in docs/metrics.md) instead of the text report")
	htmlOut := fs.String("html", "", "also write a self-contained HTML report to this file")
	pqOut := fs.String("parquet", "", "also write summary.parquet and timeseries.parquet into this directory")
	allowMixed := fs.Bool("allow-mixed", false, "pool files of different runs on absolute time instead of refusing them")
	allowPartial := fs.Bool("allow-partial", false, "analyse the shards given even when others of their run are missing (the report warns)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usagef("analyze: no results files given")
	}
	opts := analysis.DefaultOptions()
	if *sloFlag != "" {
		slo, err := analysis.ParseSLO(*sloFlag)
		if err != nil {
			return usagef("analyze: --slo: %v", err)
		}
		opts.SLO = slo
	}
	if w := strings.TrimSpace(*warmup); w != "auto" {
		d, err := time.ParseDuration(w)
		if err != nil || d < 0 {
			return usagef("analyze: --warmup %q: want a non-negative duration or auto", w)
		}
		opts.Warmup = d
	}
	opts.MaxLateness = *maxLate
	opts.Interval = *interval
	for _, b := range buckets {
		var err error
		if opts.PromptBuckets, opts.OutputBuckets, err = analysis.ParseBuckets(b, opts.PromptBuckets, opts.OutputBuckets); err != nil {
			return usagef("analyze: --buckets: %v", err)
		}
	}
	if err := opts.Validate(); err != nil {
		return usagef("analyze: %v", err)
	}
	d, err := loadResults(ctx, decode.LoadOptions{AllowMixed: *allowMixed, AllowPartial: *allowPartial}, fs.Args()...)
	if err != nil {
		return err
	}
	rep, err := analyzeData(ctx, d, decode.LoadOptions{AllowPartial: *allowPartial}, opts)
	if err != nil {
		return err
	}
	if *htmlOut != "" {
		if err := rep.WriteHTMLFile(*htmlOut); err != nil {
			return err
		}
	}
	if *pqOut != "" {
		if err := analysis.WriteParquetDir(*pqOut, rep); err != nil {
			return err
		}
	}
	if *jsonOut {
		return rep.WriteJSON(stdout)
	}
	if err := rep.WriteText(stdout); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

// loadResults loads results files as analysis.Load does, except that the repeats of one
// repeated run (replay --repeat: one repeat_group, several run ids) load together without
// --allow-mixed.
func loadResults(ctx context.Context, lo decode.LoadOptions, paths ...string) (*decode.Data, error) {
	d, err := analysis.Load(ctx, lo, paths...)
	if err == nil || lo.AllowMixed || !errors.Is(err, decode.ErrMixedRuns) {
		return d, err
	}
	mixed := lo
	mixed.AllowMixed = true
	d, merr := analysis.Load(ctx, mixed, paths...)
	if merr != nil {
		return nil, merr
	}
	if _, ok := analysis.RepeatGroup(d.Runs); !ok {
		return nil, err // not one run's repeats: refused as before
	}
	return d, nil
}

// analyzeData analyses loaded results: the repeats of one run with the figures across
// them (analysis.AnalyzeRepeats), anything else as one run.
func analyzeData(ctx context.Context, d *decode.Data, lo decode.LoadOptions, opts analysis.Options) (*analysis.Report, error) {
	if _, ok := analysis.RepeatGroup(d.Runs); ok {
		return analysis.AnalyzeRepeats(ctx, d, lo, opts)
	}
	return analysis.Analyze(d, opts)
}

// writeRepeatsReport prints the text report of the repeats of one run.
func writeRepeatsReport(ctx context.Context, files []string, w io.Writer) error {
	lo := decode.LoadOptions{AllowPartial: true}
	d, err := loadResults(ctx, lo, files...)
	if err != nil {
		return err
	}
	rep, err := analyzeData(ctx, d, lo, analysis.DefaultOptions())
	if err != nil {
		return err
	}
	return rep.WriteText(w)
}
