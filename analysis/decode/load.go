package decode

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/llmreplay/llmreplay/replay/results"
)

// LoadOptions control Load.
type LoadOptions struct {
	// AllowMixed pools files of different runs (different run_id) on absolute time instead
	// of refusing them.
	AllowMixed bool
	// AllowPartial analyses the shards given even when some shards of their run are
	// missing (the report then warns); otherwise Load refuses an incomplete run.
	AllowPartial bool
	// BatchSize is the number of rows decoded per Arrow record; 0 means 16Ki.
	BatchSize int64
	// Workers is how many row groups are decoded at once; 0 means GOMAXPROCS, at most 4.
	Workers int
	// Metrics are the metric names whose samples Load keeps from the metrics files the runs
	// name (ServerSeries.Metric is an index into it); llmreplay_scrape_up is always read,
	// and every other sample is skipped, so memory grows with the kept series only. Nil
	// keeps none: analysis.Load passes the names its server section knows.
	Metrics []string
}

// FieldError is a bad value in a results file: the file, 0-based row and column name.
type FieldError struct {
	File  string
	Row   int64
	Field string
	Err   error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("analysis: read %s row %d: %s: %v", e.File, e.Row, e.Field, e.Err)
}
func (e *FieldError) Unwrap() error { return e.Err }

// ErrPartialRun is returned by Load when shards of a run are missing and
// LoadOptions.AllowPartial is false.
var ErrPartialRun = errors.New("incomplete run")

// ErrMixedRuns is returned by Load when files belong to different runs and
// LoadOptions.AllowMixed is false.
var ErrMixedRuns = errors.New("results files belong to different runs (use --allow-mixed to pool them)")

// Load reads one or more results files (results/v1 Parquet). Shards of one run (same
// run_id) merge on absolute time; files of different runs are refused unless
// opts.AllowMixed, in which case they are pooled on absolute time (run_start_unix_ns).
func Load(ctx context.Context, opts LoadOptions, paths ...string) (*Data, error) {
	if len(paths) == 0 {
		return nil, errors.New("analysis: no results files given")
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 16 << 10
	}
	d := &Data{Files: paths}
	var fs []*results.File
	defer func() {
		for _, f := range fs {
			f.Close()
		}
	}()
	for _, p := range paths {
		f, err := results.Open(p, results.OpenOptions{Props: ReadProps(), BatchSize: opts.BatchSize})
		if err != nil {
			return nil, fmt.Errorf("analysis: %w", err)
		}
		fs = append(fs, f)
		d.Runs = append(d.Runs, f.Run)
	}
	if err := d.checkRuns(opts.AllowMixed); err != nil {
		return nil, err
	}
	if miss := d.MissingShards(); len(miss) > 0 && !opts.AllowPartial {
		return nil, fmt.Errorf("analysis: %s: shards %s of the run are missing: give every shard's file, or --allow-partial to analyse these alone: %w",
			strings.Join(paths, ", "), strings.Join(miss, ", "), ErrPartialRun)
	}
	// Reserve the per-request columns up front from the Parquet metadata.
	var rows int64
	for _, f := range fs {
		rows += max(f.Parquet.NumRows(), 0)
	}
	if rows > 1<<31 {
		return nil, fmt.Errorf("analysis: %d rows: more than analysis holds in memory", rows)
	}
	d.alloc(int(rows))
	for k, name := range optionalColumns {
		for _, f := range fs {
			if hasValues(f.Parquet, name) {
				d.allocOptional(k, int(rows))
				break
			}
		}
	}
	base := 0
	if opts.Workers <= 0 {
		opts.Workers = min(runtime.GOMAXPROCS(0), 4)
	}
	d.BaseUnixNS = d.Runs[0].RunStartUnixNS
	for _, r := range d.Runs {
		d.BaseUnixNS = min(d.BaseUnixNS, r.RunStartUnixNS)
	}
	for i, f := range fs {
		d.ShiftNS = append(d.ShiftNS, d.Runs[i].RunStartUnixNS-d.BaseUnixNS)
		if err := d.readFile(ctx, f, d.ShiftNS[i], base, opts); err != nil {
			return nil, err
		}
		base += int(f.Parquet.NumRows())
		d.FileEnd = append(d.FileEnd, base)
	}
	if err := d.loadServer(ctx, opts); err != nil {
		return nil, err
	}
	return d, nil
}

// checkRuns refuses files of different runs (unless allowMixed) and duplicate shards.
func (d *Data) checkRuns(allowMixed bool) error {
	first := d.Runs[0]
	seen := map[string]map[int]string{}
	for i, r := range d.Runs {
		if r.RunID != first.RunID || r.ShardCount != first.ShardCount {
			if !allowMixed {
				return fmt.Errorf("analysis: %s (run %q) and %s (run %q): %w", d.Files[0], first.RunID, d.Files[i], r.RunID, ErrMixedRuns)
			}
			d.Mixed = true
		}
		if seen[r.RunID] == nil {
			seen[r.RunID] = map[int]string{}
		}
		if prev, dup := seen[r.RunID][r.ShardIndex]; dup {
			if abs(prev) == abs(d.Files[i]) {
				return fmt.Errorf("analysis: %s given twice", d.Files[i])
			}
			return fmt.Errorf("analysis: %s and %s are both shard %d/%d of run %q", prev, d.Files[i], r.ShardIndex, r.ShardCount, r.RunID)
		}
		seen[r.RunID][r.ShardIndex] = d.Files[i]
	}
	return nil
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// MissingShards lists, per run, the shards of the run not given, as "index/count" sorted
// by run_id then index (analysis warns with them when LoadOptions.AllowPartial let them go).
func (d *Data) MissingShards() []string {
	have := map[string]map[int]bool{}
	count := map[string]int{}
	for _, r := range d.Runs {
		if have[r.RunID] == nil {
			have[r.RunID] = map[int]bool{}
		}
		have[r.RunID][r.ShardIndex] = true
		count[r.RunID] = r.ShardCount
	}
	var out []string
	ids := make([]string, 0, len(have))
	for id := range have {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for s := 0; s < count[id]; s++ {
			if !have[id][s] {
				out = append(out, fmt.Sprintf("%d/%d", s, count[id]))
			}
		}
	}
	return out
}
