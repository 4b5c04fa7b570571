package decode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/llmreplay/llmreplay/replay/results"
)

// loadServer reads the metrics file each results file's metadata names (RunMeta.MetricsFile,
// beside the results file), keeping only the samples of opts.Metrics and
// the scraper's llmreplay_scrape_up rows. A named file that is missing is a warning (a
// killed run keeps only its journal: `llmreplay recover` converts it); one that is not a
// metrics/v1 file is an error.
//
// Shards: every shard may scrape the same endpoints. Each source's rows are taken from one
// file of its run only, the lowest shard index that has rows for it, so a counter is never
// counted twice and a gauge is never averaged with a copy of itself. Runs pooled with
// AllowMixed keep each their own copy (they scraped at different times).
func (d *Data) loadServer(ctx context.Context, opts LoadOptions) error {
	order := make([]int, len(d.Files))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return d.Runs[order[a]].ShardIndex < d.Runs[order[b]].ShardIndex })
	var sd *ServerData
	for _, i := range order {
		m := d.Runs[i]
		if m.MetricsFile == "" {
			continue
		}
		if sd == nil {
			sd = &ServerData{}
		}
		sd.IntervalNS = max(sd.IntervalNS, m.ScrapeIntervalNS)
		path := filepath.Join(filepath.Dir(d.Files[i]), filepath.Base(m.MetricsFile))
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			sd.Warnings = append(sd.Warnings, fmt.Sprintf("metrics file %s named by %s is missing: no server figures from shard %d (a killed run leaves %s%s: llmreplay recover converts it)",
				path, d.Files[i], m.ShardIndex, filepath.Base(path), ".journal"))
			continue
		}
		if err := sd.readFile(ctx, path, i, m.RunID, m.ShardIndex, d.ShiftNS[i], opts); err != nil {
			return err
		}
		sd.Files++
	}
	d.Server = sd
	return nil
}

// readFile reads one metrics file, file index fi of d (shard shard of run runID), shifting
// its t_ns by shift onto the common time axis.
func (sd *ServerData) readFile(ctx context.Context, path string, fi int, runID string, shard int, shift int64, opts LoadOptions) error {
	pr, err := file.OpenParquetFile(path, false, file.WithReadProps(ReadProps()))
	if err != nil {
		return fmt.Errorf("analysis: open %s: %w", path, err)
	}
	defer pr.Close()
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: opts.BatchSize}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("analysis: open %s: %w", path, err)
	}
	sc, err := fr.Schema()
	if err != nil {
		return fmt.Errorf("analysis: read %s: %w", path, err)
	}
	if _, err := results.CheckMetrics(sc); err != nil {
		return fmt.Errorf("analysis: read %s: %w", path, err)
	}
	// Leaf columns of the fields read (the labels map has two leaves); type is not read.
	want := []string{results.ColMetricTNS, results.ColMetricSource, results.ColMetricName, results.ColMetricLabels, results.ColMetricValue}
	leafOf := results.Leaves(sc)
	var cols []int
	for _, name := range want {
		cols = append(cols, leafOf[name]...)
	}
	rr, err := fr.GetRecordReader(ctx, cols, nil)
	if err != nil {
		return fmt.Errorf("analysis: read %s: %w", path, err)
	}
	defer rr.Release()
	// Sources this file may contribute: those no lower shard of its run claimed (runs
	// pooled with --allow-mixed each keep their own: they scraped at different times).
	known := map[string]int{results.MetricScrapeUp: ScrapeUp}
	for i, name := range opts.Metrics {
		known[name] = i
	}
	srcIdx := map[[2]string]int{}
	for i, s := range sd.Sources {
		srcIdx[[2]string{sd.RunOf[i], s}] = i
	}
	seriesIdx := map[ServerSeries]int32{}
	for i, s := range sd.Series {
		seriesIdx[s] = int32(i)
	}
	var row0 int64
	for rr.Next() {
		rec := rr.Record()
		if err := sd.addRecord(path, row0, rec, fi, runID, shard, shift, known, srcIdx, seriesIdx); err != nil {
			return err
		}
		row0 += rec.NumRows()
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("analysis: read %s: %w", path, err)
	}
	return nil
}

func (sd *ServerData) addRecord(path string, row0 int64, rec arrow.Record, fi int, runID string, shard int, shift int64, known map[string]int, srcIdx map[[2]string]int, seriesIdx map[ServerSeries]int32) error {
	col := func(name string) (arrow.Array, error) {
		i := rec.Schema().FieldIndices(name)
		if len(i) == 0 {
			return nil, &FieldError{File: path, Row: row0, Field: name, Err: errors.New("missing")}
		}
		return rec.Column(i[0]), nil
	}
	var cs [5]arrow.Array
	for k, name := range []string{results.ColMetricTNS, results.ColMetricSource, results.ColMetricName, results.ColMetricLabels, results.ColMetricValue} {
		a, err := col(name)
		if err != nil {
			return err
		}
		cs[k] = a
	}
	ts, ok1 := cs[0].(*array.Int64)
	srcs, ok2 := cs[1].(*array.String)
	names, ok3 := cs[2].(*array.String)
	labels, ok4 := cs[3].(*array.Map)
	vals, ok5 := cs[4].(*array.Float64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return fmt.Errorf("analysis: read %s: metrics columns of unexpected types", path)
	}
	keys, _ := labels.Keys().(*array.String)
	items, _ := labels.Items().(*array.String)
	owner := func(src string) (int, bool) {
		k := [2]string{runID, src}
		i, ok := srcIdx[k]
		if !ok {
			i = len(sd.Sources)
			srcIdx[k] = i
			sd.Sources = append(sd.Sources, src)
			sd.RunOf = append(sd.RunOf, runID)
			sd.ShardOf = append(sd.ShardOf, shard)
			sd.Attempts = append(sd.Attempts, 0)
			sd.Failures = append(sd.Failures, 0)
			sd.LastError = append(sd.LastError, "")
			sd.OwnerFile = append(sd.OwnerFile, fi)
			return i, true
		}
		return i, sd.OwnerFile[i] == fi
	}
	label := func(i int, name string) string {
		if keys == nil || items == nil || labels.IsNull(i) {
			return ""
		}
		a, b := labels.ValueOffsets(i)
		for j := int(a); j < int(b); j++ {
			if keys.Value(j) == name {
				return items.Value(j)
			}
		}
		return ""
	}
	for i := 0; i < int(rec.NumRows()); i++ {
		mi, known := known[names.Value(i)]
		if !known {
			continue
		}
		src, own := owner(srcs.Value(i))
		if !own {
			continue
		}
		t := ts.Value(i)
		if t <= -int64(MaxSpan) || t >= int64(MaxSpan) {
			return &FieldError{File: path, Row: row0 + int64(i), Field: results.ColMetricTNS, Err: fmt.Errorf("%d outside (-%v, %v)", t, MaxSpan, MaxSpan)}
		}
		v := vals.Value(i)
		if mi == ScrapeUp {
			sd.Attempts[src]++
			if v == 0 {
				sd.Failures[src]++
				sd.LastError[src] = label(i, "error")
			}
			continue
		}
		var lbl string
		if keys != nil && items != nil && !labels.IsNull(i) {
			a, b := labels.ValueOffsets(i)
			ks, vs := make([]string, 0, b-a), make([]string, 0, b-a)
			for j := int(a); j < int(b); j++ {
				ks, vs = append(ks, keys.Value(j)), append(vs, items.Value(j))
			}
			lbl = sortedLabels(ks, vs)
		}
		key := ServerSeries{Source: src, Metric: mi, Labels: lbl}
		si, ok := seriesIdx[key]
		if !ok {
			si = int32(len(sd.Series))
			seriesIdx[key] = si
			sd.Series = append(sd.Series, key)
		}
		sd.Samples = append(sd.Samples, ServerSample{Series: si, T: t + shift, V: v})
	}
	return nil
}

// ScrapeUp is the index Load gives llmreplay_scrape_up, the scraper's own row per scrape,
// which it counts into ServerData.Attempts and Failures instead of keeping as samples.
const ScrapeUp = -1

// ServerSeries is one kept series: a source, a known metric, a label set.
type ServerSeries struct {
	Source int // index into ServerData.Sources
	Metric int // index into LoadOptions.Metrics
	Labels string
}

// ServerSample is one kept sample of a series, on the common time axis.
type ServerSample struct {
	Series int32   // index into ServerData.Series
	T      int64   // t_ns shifted onto the common time axis
	V      float64 // the value as exposed
}

// ServerData is what Load keeps of the metrics files: the kept series' samples and each
// source's scrape attempts.
type ServerData struct {
	Files      int      // metrics files read
	Sources    []string // in order of first appearance, lowest shard first
	ShardOf    []int    // the shard whose file gave each source's rows
	OwnerFile  []int    // the index in Data.Files of that file
	RunOf      []string // the run_id of that file
	Attempts   []int64  // per source: llmreplay_scrape_up rows
	Failures   []int64  // per source: llmreplay_scrape_up rows with value 0
	LastError  []string // per source: the error label of its last failed scrape
	Series     []ServerSeries
	Samples    []ServerSample
	IntervalNS int64 // the scrape interval (the largest of the files'), aligning sources
	Warnings   []string
}

// sortedLabels renders a label map's pairs as k=v joined by commas, sorted by key.
func sortedLabels(keys, vals []string) string {
	if len(keys) == 0 {
		return ""
	}
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return keys[idx[a]] < keys[idx[b]] })
	var sb strings.Builder
	for n, i := range idx {
		if n > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(keys[i])
		sb.WriteByte('=')
		sb.WriteString(vals[i])
	}
	return sb.String()
}
