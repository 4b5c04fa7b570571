package twin

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
)

// Figures are the five figures the twin's error is stated on (FitError.Figure), in
// order.
var Figures = []string{"output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms"}

// figuresOf reads the five figures off an analysis report: sustained output tok/s over
// the steady-state window, and the TTFT and TPOT quantiles of ok requests.
func figuresOf(r *analysis.Report) []float64 {
	return []float64{r.Throughput.SustainedOutputTokensPerS, r.TTFT.P50, r.TTFT.P99, r.TPOT.P50, r.TPOT.P99}
}

// SimRequests turns run r's requests into the engine's requests, and the loop it ran:
// an open-loop run's requests arrive when they were sent; a closed-loop run's first
// Concurrency requests arrive when they were sent (its workers' starts) and every later
// one when an earlier one ends, as the replayer's workers send them. Each asks for the
// output it got. Results say how many prompt tokens a request read from the cache but not
// from whom: the twin gives every request that hit a prefix of that length shared with
// the run's first request, so that it hits as much (if the cache still holds it), and
// the others none.
func SimRequests(r *Run) ([]sim.SimRequest, int, []int64) {
	reqs := slices.Clone(r.Reqs)
	o := 0 // open loop
	if r.Meta.Mode == results.ModeClosed && r.Meta.Concurrency > 0 {
		o = r.Meta.Concurrency
		slices.SortStableFunc(reqs, func(a, b Req) int { return cmp.Compare(a.Scheduled, b.Scheduled) })
	}
	out := make([]sim.SimRequest, len(reqs))
	ids := make([]int64, len(reqs))
	most := 0
	for i, q := range reqs {
		out[i] = sim.SimRequest{Arrival: time.Duration(max(q.Sent, 0)), Prompt: q.Prompt, Output: q.Output}
		ids[i] = q.ID
		if q.Cached > 0 {
			// Its measured hit, replayed: it shares that many tokens with the run's prefix.
			out[i].PrefixID, out[i].SharedPrefix = 1, min(q.Cached, q.Prompt)
			most = max(most, out[i].SharedPrefix)
		}
	}
	if most > 0 && out[0].PrefixID == 0 {
		// The first request seeds the shared prefix the later hits read.
		out[0].PrefixID, out[0].SharedPrefix = 1, min(most, out[0].Prompt)
	}
	return out, o, ids
}

// Predict simulates run r on cfg, writes the predicted run as a results file in dir
// (named after r) and returns the five figures of the measured and of the predicted run,
// both computed by package analysis with its defaults.
func Predict(ctx context.Context, cfg sim.Config, r *Run, dir string) (measured, predicted []float64, err error) {
	reqs, o, ids := SimRequests(r)
	res, err := sim.Simulate(cfg, reqs, o)
	if err != nil {
		return nil, nil, fmt.Errorf("twin: predict %s: %w", r.File, err)
	}
	path := filepath.Join(dir, "predicted-"+r.File)
	meta := r.Meta
	meta.Simulated, meta.SimProfile, meta.Scrape, meta.MetricsFile, meta.ScrapeIntervalNS = true, "fit", nil, "", 0
	if err := WriteResults(path, meta, reqs, res, ids); err != nil {
		return nil, nil, fmt.Errorf("twin: predict %s: %w", r.File, err)
	}
	m, err := analysis.AnalyzeFiles(ctx, analysis.DefaultOptions(), r.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("twin: analyze %s: %w", r.File, err)
	}
	p, err := analysis.AnalyzeFiles(ctx, analysis.DefaultOptions(), path)
	if err != nil {
		return nil, nil, fmt.Errorf("twin: analyze the prediction of %s: %w", r.File, err)
	}
	return figuresOf(m), figuresOf(p), nil
}

// Errors predicts every run with cfg and states the twin's error on each figure both the
// run and its prediction have (one whose outputs are all one token has no TPOT).
func Errors(ctx context.Context, cfg sim.Config, runs []Run) ([]sim.FitError, error) {
	dir, err := os.MkdirTemp("", "llmreplay-twin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var out []sim.FitError
	for i := range runs {
		m, p, err := Predict(ctx, cfg, &runs[i], dir)
		if err != nil {
			return nil, err
		}
		for k, name := range Figures {
			e := sim.FitError{Run: runs[i].File, Figure: name, Measured: m[k], Predicted: p[k], RelErr: (p[k] - m[k]) / m[k]}
			if math.IsNaN(e.RelErr) || math.IsInf(e.RelErr, 0) {
				continue // a figure the run (or its prediction) does not have: no error to state
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// FitFiles reads the results files (holdout marks those only predicted), fits base to
// those not held out and predicts them all: the profile file of the twin, named name.
func FitFiles(ctx context.Context, paths []string, holdout []bool, base sim.Config, name, tool string) (sim.ProfileFile, error) {
	var runs []Run
	for i, p := range paths {
		r, err := ReadRun(ctx, p, holdout[i])
		if err != nil {
			return sim.ProfileFile{}, err
		}
		runs = append(runs, r)
	}
	if !slices.ContainsFunc(runs, func(r Run) bool { return !r.Holdout }) {
		return sim.ProfileFile{}, fmt.Errorf("twin: every run is held out: give at least one run to fit on")
	}
	cfg, params := Fit(runs, base)
	if err := cfg.Validate(); err != nil {
		return sim.ProfileFile{}, fmt.Errorf("twin: the fitted engine is not valid: %w", err)
	}
	errs, err := Errors(ctx, cfg, runs)
	if err != nil {
		return sim.ProfileFile{}, err
	}
	rep := &sim.FitReport{Tool: tool, Params: params, Errors: errs}
	for _, r := range runs {
		rep.Runs = append(rep.Runs, sim.FitRun{File: r.File, SHA256: r.SHA256, Holdout: r.Holdout})
	}
	if m := runs[0].Meta.Model; m != "" && m != "*" {
		cfg.Model = m // the twin answers to the measured engine's model name
	}
	return sim.ProfileFile{Format: sim.ProfileFormat, Version: sim.ProfileVersion, Name: name,
		Description: fmt.Sprintf("fitted by %s to %d runs", tool, len(runs)), Config: cfg, Fit: rep}, nil
}
