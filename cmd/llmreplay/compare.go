package main

import (
	"context"
	"fmt"
	"io"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/compare"
	"github.com/llmreplay/llmreplay/stats"
)

func init() {
	register(&command{
		name:    "compare",
		summary: "compare runs (or sweeps) figure by figure, with bootstrap confidence intervals of each change",
		run:     runCompare,
	})
}

const compareExamples = `  # Is B faster than A? Each figure's change against A with its 95% interval; ~ = no change
  llmreplay compare old.parquet new.parquet

  # A folder is one run (its shards, or its repeats); a sweep folder compares point by point
  llmreplay compare runs/old/ runs/new/
  llmreplay compare sweep-old/ sweep-new/

  # Three runs against the first, as JSON, with an HTML page and Parquet tables
  llmreplay compare bf16.parquet fp8.parquet fp8-ep.parquet --json --html compare.html --parquet cmp/

  # A 90% interval from 5000 resamples, another seed; runs of different traces (printed on top)
  llmreplay compare a.parquet b.parquet --confidence 0.9 --resamples 5000 --seed 7 --allow-different`

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("compare", "llmreplay compare A B [C ...] [flags]", compareExamples, stdout)
	confidence := fs.Float64("confidence", stats.DefaultConfidence, "level of the confidence intervals, e.g. 0.95")
	resamples := fs.Int("resamples", stats.DefaultResamples, "bootstrap resamples per figure and run (at least 100)")
	seed := fs.Uint64("seed", 1, "seed of the bootstrap: the same runs and seed give the same intervals")
	sloFlag := fs.String("slo", "", "objectives for goodput and attainment, applied to every run, e.g. ttft=2s,tpot=100ms or ttfa=3s,answer_tpot=50ms (default: run A's own --slo)")
	allowDifferent := fs.Bool("allow-different", false, "compare runs of different traces, speedups, rates or modes (the differences are printed on top)")
	jsonOut := fs.Bool("json", false, "print one JSON object (keys in docs/compare.md) instead of the tables")
	htmlOut := fs.String("html", "", "also write a self-contained HTML page (the tables, TTFT and TPOT CDFs, throughput over time) to this file")
	pqOut := fs.String("parquet", "", "also write compare.parquet, summary.parquet and timeseries.parquet into this directory")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	b := stats.Bootstrap{Confidence: *confidence, Resamples: *resamples, Seed: *seed}
	if err := b.Validate(); err != nil {
		return usagef("compare: %v", err)
	}
	opts := compare.Options{Bootstrap: b, Analysis: analysis.DefaultOptions(), AllowDifferent: *allowDifferent}
	if *sloFlag != "" {
		slo, err := analysis.ParseSLO(*sloFlag)
		if err != nil {
			return usagef("compare: --slo: %v", err)
		}
		opts.Analysis.SLO = slo
	}
	switch fs.NArg() {
	case 0:
		return usagef("compare: give at least two runs: results files, run folders or sweep folders")
	case 1:
		return usagef("compare: %s: one run only: give at least two runs to compare", fs.Arg(0))
	}
	var cargs []compare.Arg
	for _, p := range fs.Args() {
		a, err := compare.ResolveArg(p)
		if err != nil {
			return err
		}
		cargs = append(cargs, a)
	}
	c, err := compare.Runs(ctx, cargs, opts)
	if err != nil {
		return err
	}
	if *htmlOut != "" {
		if err := c.WriteHTMLFile(*htmlOut); err != nil {
			return err
		}
	}
	if *pqOut != "" {
		if err := c.WriteParquetDir(*pqOut); err != nil {
			return err
		}
	}
	if *jsonOut {
		return c.WriteJSON(stdout)
	}
	if err := c.WriteText(stdout); err != nil {
		return fmt.Errorf("compare: %w", err)
	}
	return nil
}
