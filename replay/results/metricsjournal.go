package results

import (
	"time"

	"errors"
	"fmt"
	"io"
	"os"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/llmreplay/llmreplay/internal/atomicfile"
	"github.com/llmreplay/llmreplay/internal/prom"
)

// MetricsJournal appends scraped samples to a crash-safe Arrow IPC stream with the
// metrics/v1 schema (MetricsSchemaWithRun): the metrics file's journal, as Journal
// is the results file's. One goroutine (the run's metrics writer) owns it.
type MetricsJournal struct {
	ipcStream

	tNS                  *array.Int64Builder
	source, metric, typ  *array.StringBuilder
	labels               *array.MapBuilder
	labelKeys, labelVals *array.StringBuilder
	value                *array.Float64Builder
}

// CreateMetricsJournal creates (truncating) the metrics journal at path and writes its
// schema with the run metadata, so that even a run killed before its first scrape leaves a
// journal recover turns into a valid, empty metrics file.
func CreateMetricsJournal(path string, run *RunMeta) (*MetricsJournal, error) {
	schema, err := MetricsSchemaWithRun(run)
	if err != nil {
		return nil, fmt.Errorf("replay: create metrics journal %s: %w", path, err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	j := &MetricsJournal{ipcStream: ipcStream{path: path, what: "metrics journal", b: b}}
	if err := j.bind(schema); err != nil {
		b.Release()
		return nil, fmt.Errorf("replay: create metrics journal %s: %w", path, err)
	}
	if err := j.create(schema); err != nil {
		return nil, err
	}
	return j, nil
}

// bind finds each column's builder by its contract name.
func (j *MetricsJournal) bind(s *arrow.Schema) error {
	field := func(name string) array.Builder {
		i := s.FieldIndices(name)
		if len(i) != 1 {
			return nil
		}
		return j.b.Field(i[0])
	}
	var ok [7]bool
	j.tNS, ok[0] = field(ColMetricTNS).(*array.Int64Builder)
	j.source, ok[1] = field(ColMetricSource).(*array.StringBuilder)
	j.metric, ok[2] = field(ColMetricName).(*array.StringBuilder)
	j.typ, ok[3] = field(ColMetricType).(*array.StringBuilder)
	j.labels, ok[4] = field(ColMetricLabels).(*array.MapBuilder)
	j.value, ok[5] = field(ColMetricValue).(*array.Float64Builder)
	ok[6] = true
	if ok[4] {
		j.labelKeys, ok[6] = j.labels.KeyBuilder().(*array.StringBuilder)
		vals, ok2 := j.labels.ItemBuilder().(*array.StringBuilder)
		j.labelVals, ok[6] = vals, ok[6] && ok2
	}
	for i, good := range ok {
		if !good {
			return fmt.Errorf("metrics schema: column %d of the contract has no builder of its type", i)
		}
	}
	if s.NumFields() != len(MetricsSchema.Fields()) {
		return fmt.Errorf("metrics schema: %d columns, the contract has %d", s.NumFields(), len(MetricsSchema.Fields()))
	}
	return nil
}

// AddSample appends one row.
func (j *MetricsJournal) AddSample(tNS int64, source string, s *prom.Sample) {
	j.tNS.Append(tNS)
	j.source.Append(source)
	j.metric.Append(s.Name)
	j.typ.Append(s.Type)
	j.labels.Append(true)
	for _, l := range s.Labels {
		j.labelKeys.Append(l.Name)
		j.labelVals.Append(l.Value)
	}
	j.value.Append(s.Value)
	j.pending++
}

// ScrapeRows returns the scraper's own rows of one attempt (MetricScrape*): up (0, with the
// error as a label, when the attempt found no exposition), its duration, and how many
// samples it found.
func ScrapeRows(errMsg string, dur time.Duration, samples int) [3]prom.Sample {
	up := prom.Sample{Name: MetricScrapeUp, Type: MetricTypeScrape, Value: 1}
	if errMsg != "" {
		up.Value = 0
		up.Labels = []prom.Label{{Name: "error", Value: errMsg}}
	}
	return [3]prom.Sample{
		up,
		{Name: MetricScrapeDuration, Type: MetricTypeScrape, Value: dur.Seconds()},
		{Name: MetricScrapeSamples, Type: MetricTypeScrape, Value: float64(samples)},
	}
}

// AddSamples appends samples scraped from source at tNS, batch after batch (a scrape's
// samples, then the scraper's own rows), and writes the pending batch when it is full.
func (j *MetricsJournal) AddSamples(tNS int64, source string, batches ...[]prom.Sample) error {
	for _, b := range batches {
		for i := range b {
			j.AddSample(tNS, source, &b[i])
		}
	}
	if j.pending >= journalBatchRows {
		return j.Flush()
	}
	return nil
}

// ConvertMetricsJournal turns the metrics journal at journal into the Parquet metrics file
// out, as ConvertJournal does for results: through a temporary file renamed on success,
// keeping every whole batch of a killed run's journal (info.Tail says what was cut).
func ConvertMetricsJournal(journal, out string) (ConvertInfo, error) {
	return convertIPC(journal, out, "metrics", CheckMetrics, nil)
}

// JournalFormat returns the format (Format or MetricsFormat) of the
// journal at path, from its schema metadata.
func JournalFormat(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("replay: open journal: %w", err)
	}
	defer f.Close()
	rdr, err := ipc.NewReader(f, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return "", journalReadError(path, err)
	}
	defer rdr.Release()
	md := rdr.Schema().Metadata()
	if i := md.FindKey(MetaFormat); i >= 0 {
		return md.Values()[i], nil
	}
	return "", fmt.Errorf("replay: journal %s: schema metadata lacks %s", path, MetaFormat)
}

// convertIPC is ConvertJournal's body for a journal whose schema check returns its run.
func convertIPC(journal, out, what string, check func(*arrow.Schema) (*RunMeta, error), edit func(*RunMeta)) (info ConvertInfo, err error) {
	f, err := os.Open(journal)
	if err != nil {
		return info, fmt.Errorf("replay: open journal: %w", err)
	}
	defer f.Close()
	rdr, err := ipc.NewReader(f, ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return info, journalReadError(journal, err)
	}
	defer rdr.Release()
	schema := rdr.Schema()
	if info.Run, err = check(schema); err != nil {
		return info, fmt.Errorf("replay: journal %s: %w", journal, err)
	}
	if edit != nil {
		edit(info.Run)
		if schema, err = withRun(schema, Format, info.Run); err != nil {
			return info, fmt.Errorf("replay: journal %s: %w", journal, err)
		}
	}
	tmp, err := atomicfile.Create(out)
	if err != nil {
		return info, fmt.Errorf("replay: create %s file: %w", what, err)
	}
	defer tmp.Abort() // after Commit, a no-op
	fw, err := newParquetWriter(schema, tmp)
	if err != nil {
		return info, fmt.Errorf("replay: write %s: %w", out, err)
	}
	for rdr.Next() {
		rec := rdr.Record()
		if rec.NumRows() == 0 {
			continue
		}
		if err := fw.WriteBuffered(rec); err != nil {
			fw.Close()
			return info, fmt.Errorf("replay: write %s: %w", out, err)
		}
		info.Rows += rec.NumRows()
	}
	if e := rdr.Err(); e != nil && !errors.Is(e, io.EOF) {
		info.Tail = fmt.Errorf("journal %s cut after %d records: %w", journal, info.Rows, e)
	}
	if err := fw.Close(); err != nil {
		return info, fmt.Errorf("replay: write %s: %w", out, err)
	}
	if err := tmp.Commit(); err != nil {
		return info, fmt.Errorf("replay: write %s: %w", out, err)
	}
	return info, nil
}
