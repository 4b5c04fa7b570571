package analysis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/llmreplay/llmreplay/replay/results"
)

// loadServer reads the metrics file each results file's metadata names (RunMeta.MetricsFile,
// beside the results file), keeping only the samples of known metrics (serverMetrics) and
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
	var sd *serverData
	for _, i := range order {
		m := d.Runs[i]
		if m.MetricsFile == "" {
			continue
		}
		if sd == nil {
			sd = &serverData{}
		}
		sd.intervalNS = max(sd.intervalNS, m.ScrapeIntervalNS)
		path := filepath.Join(filepath.Dir(d.Files[i]), filepath.Base(m.MetricsFile))
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			sd.warnings = append(sd.warnings, fmt.Sprintf("metrics file %s named by %s is missing: no server figures from shard %d (a killed run leaves %s%s: llmreplay recover converts it)",
				path, d.Files[i], m.ShardIndex, filepath.Base(path), ".journal"))
			continue
		}
		if err := sd.readFile(ctx, path, i, m.RunID, m.ShardIndex, d.ShiftNS[i], opts); err != nil {
			return err
		}
		sd.files++
	}
	d.server = sd
	return nil
}

// readFile reads one metrics file, file index fi of d (shard shard of run runID), shifting
// its t_ns by shift onto the common time axis.
func (sd *serverData) readFile(ctx context.Context, path string, fi int, runID string, shard int, shift int64, opts LoadOptions) error {
	pr, err := file.OpenParquetFile(path, false, file.WithReadProps(readProps()))
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
	srcIdx := map[[2]string]int{}
	for i, s := range sd.sources {
		srcIdx[[2]string{sd.runOf[i], s}] = i
	}
	seriesIdx := map[serverSeries]int32{}
	for i, s := range sd.series {
		seriesIdx[s] = int32(i)
	}
	var row0 int64
	for rr.Next() {
		rec := rr.Record()
		if err := sd.addRecord(path, row0, rec, fi, runID, shard, shift, srcIdx, seriesIdx); err != nil {
			return err
		}
		row0 += rec.NumRows()
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("analysis: read %s: %w", path, err)
	}
	return nil
}

func (sd *serverData) addRecord(path string, row0 int64, rec arrow.Record, fi int, runID string, shard int, shift int64, srcIdx map[[2]string]int, seriesIdx map[serverSeries]int32) error {
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
			i = len(sd.sources)
			srcIdx[k] = i
			sd.sources = append(sd.sources, src)
			sd.runOf = append(sd.runOf, runID)
			sd.shardOf = append(sd.shardOf, shard)
			sd.attempts = append(sd.attempts, 0)
			sd.failures = append(sd.failures, 0)
			sd.lastError = append(sd.lastError, "")
			sd.ownerFile = append(sd.ownerFile, fi)
			return i, true
		}
		return i, sd.ownerFile[i] == fi
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
		mi, known := metricIndex[names.Value(i)]
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
		if mi == scrapeUpIndex {
			sd.attempts[src]++
			if v == 0 {
				sd.failures[src]++
				sd.lastError[src] = label(i, "error")
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
		key := serverSeries{source: src, metric: mi, labels: lbl}
		si, ok := seriesIdx[key]
		if !ok {
			si = int32(len(sd.series))
			seriesIdx[key] = si
			sd.series = append(sd.series, key)
		}
		sd.samples = append(sd.samples, serverSample{series: si, t: t + shift, v: v})
	}
	return nil
}
