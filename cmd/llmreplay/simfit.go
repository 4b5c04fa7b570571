package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/twin"
)

const simFitExamples = `  # Fit a twin to three light runs of one endpoint (one request at a time with varied
  # prompts, a closed loop at concurrency 4, one past the batch cap), and check it on a
  # fourth run it is not fitted on
  llmreplay sim fit solo.parquet c4.parquet c32.parquet --holdout c16.parquet -o twin.json

  # Start from another profile's values for what the runs cannot determine
  llmreplay sim fit runs/*.parquet --base moe-230b-8gpu -o twin.json

  # Start from a profile file
  llmreplay sim fit runs/*.parquet --base old-twin.json -o twin.json

  # Serve the twin, or replay a trace against it in-process
  llmreplay sim --profile-file twin.json
  llmreplay replay --trace t.parquet --sim-profile twin.json -o predicted.parquet`

// runSimFit is `llmreplay sim fit`: package twin does the work; this reads the flags,
// prints the fit and writes the profile file.
func runSimFit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sim fit", "llmreplay sim fit RUNS... -o profile.json [--holdout RUN]... [--base PROFILE]", simFitExamples, stdout)
	out := fs.StringP("output", "o", "", "profile file to write (required)")
	holdout := fs.StringArray("holdout", nil, "a results file to predict but not fit on, repeatable: its error is the twin's error on a load it never saw")
	baseName := fs.String("base", "tiny", "what the runs cannot determine keeps this profile's values: a built-in ("+strings.Join(sim.Profiles(), ", ")+") or a profile file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return usagef("sim fit: -o profile.json is required")
	}
	if fs.NArg() == 0 {
		return usagef("sim fit: give at least one results file to fit on")
	}
	bp, _, err := sim.LoadProfile(*baseName)
	if err != nil {
		return usagef("sim fit: --base: %v", err)
	}
	base := bp.Config
	paths := append(fs.Args(), *holdout...)
	held := make([]bool, len(paths))
	for i := fs.NArg(); i < len(paths); i++ {
		held[i] = true
	}
	name := strings.TrimSuffix(filepath.Base(*out), filepath.Ext(*out))
	p, err := twin.FitFiles(ctx, paths, held, base, name, "llmreplay "+version)
	if err != nil {
		return fmt.Errorf("sim fit: %w", err)
	}
	printFit(stdout, p.Fit)
	if err := sim.WriteProfileFile(*out, p); err != nil {
		return fmt.Errorf("sim fit: %w", err)
	}
	fmt.Fprintf(stdout, "\nwrote %s\n", *out)
	return nil
}

// printFit prints each parameter with its standard error (the undetermined with their
// advice) and the twin's error on every run and figure.
func printFit(w io.Writer, f *sim.FitReport) {
	fmt.Fprintln(w, "Parameters (± one standard error):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	var advice []string
	for _, p := range f.Params {
		if p.Determined {
			se := ""
			if p.StdErr > 0 {
				se = "± " + fmtSig(p.StdErr)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", p.Name, fmtSig(p.Value), se)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\tnot determined\n", p.Name, fmtSig(p.Value))
		advice = append(advice, fmt.Sprintf("  %s: %s", p.Name, p.Advice))
	}
	tw.Flush()
	if len(advice) > 0 {
		fmt.Fprintf(w, "\nNot determined, and which run would determine it:\n%s\n", strings.Join(advice, "\n"))
	}
	held := map[string]bool{}
	for _, r := range f.Runs {
		held[r.File] = r.Holdout
	}
	fmt.Fprintln(w, "\nThe twin's error (predicted vs measured):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "run\t\tfigure\tmeasured\tpredicted\terror\t\n")
	for _, e := range f.Errors {
		mark := "fit"
		if held[e.Run] {
			mark = "held out"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%.3f\t%+.1f%%\t\n", e.Run, mark, e.Figure, e.Measured, e.Predicted, 100*e.RelErr)
	}
	tw.Flush()
}

// fmtSig prints v whole from 1,000 up (nanoseconds, tokens), else with 4 significant
// digits.
func fmtSig(v float64) string {
	if math.Abs(v) >= 1000 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.4g", v)
}
