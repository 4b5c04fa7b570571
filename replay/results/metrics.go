package results

import (
	"fmt"
	"strings"

	"github.com/apache/arrow/go/v15/arrow"
)

// The metrics file (docs/results-format.md, "Metrics file"): beside NAME.parquet, a run that
// scraped Prometheus endpoints writes NAME.metrics.parquet, one row per exposed sample per
// scrape, in long form. Like the results file it is written through a journal (an Arrow IPC
// stream, NAME.metrics.parquet.journal) and a rename, so a killed run keeps its samples up
// to the last flush and `llmreplay recover` converts them.

// MetricsFormat is the MetaFormat value of a metrics file and of its journal. Its MetaRun
// holds the RunMeta of the run (the same JSON as the results file's), so a metrics file
// read alone still places itself on the run clock.
const MetricsFormat = "metrics/v1"

// MetricsSuffix names a metrics file after its results file: results.parquet ->
// results.metrics.parquet.
const MetricsSuffix = ".metrics.parquet"

// Column names of metrics/v1.
const (
	// t_ns: when the scrape was sent, on the run clock (ns from run_start_unix_ns, the
	// clock of scheduled_ns and sent_ns), as Prometheus stamps a scrape at its start.
	ColMetricTNS = "t_ns"
	// source: the scraped URL without credentials or query (replay.SafeURL).
	ColMetricSource = "source"
	// metric: the sample's name as exposed (foo_total, foo_bucket, foo_sum, foo_count).
	ColMetricName = "metric"
	// type: its family's type: counter, gauge, histogram, summary, untyped,
	// gaugehistogram; "scrape" for the scraper's own rows (MetricScrape*).
	ColMetricType = "type"
	// labels: the sample's labels (without __name__), a map sorted by key.
	ColMetricLabels = "labels"
	// value: the sample's value as exposed (counters cumulative, buckets cumulative).
	ColMetricValue = "value"
)

// The scraper's own rows, one set per scrape attempt of each source, with type "scrape":
// they make a failed or slow metrics endpoint visible in the file itself.
const (
	// MetricScrapeUp is 1 when the scrape returned a parsed exposition, else 0 with the
	// label "error" saying why (an HTTP status, a timeout, a parse error: one short line).
	MetricScrapeUp = "llmreplay_scrape_up"
	// MetricScrapeDuration is how long the scrape took, in seconds.
	MetricScrapeDuration = "llmreplay_scrape_duration_seconds"
	// MetricScrapeSamples is how many samples the scrape returned.
	MetricScrapeSamples = "llmreplay_scrape_samples"
	// MetricTypeScrape is the type column of the rows above.
	MetricTypeScrape = "scrape"
)

// MetricsSchema is the Arrow schema of metrics/v1; every column is required.
var MetricsSchema = arrow.NewSchema([]arrow.Field{
	{Name: ColMetricTNS, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColMetricSource, Type: arrow.BinaryTypes.String},
	{Name: ColMetricName, Type: arrow.BinaryTypes.String},
	{Name: ColMetricType, Type: arrow.BinaryTypes.String},
	{Name: ColMetricLabels, Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.BinaryTypes.String)},
	{Name: ColMetricValue, Type: arrow.PrimitiveTypes.Float64},
}, nil)

// MetricsPath names the metrics file of the results file path: a trailing ".parquet" is
// replaced by MetricsSuffix, any other name gets MetricsSuffix appended.
func MetricsPath(resultsPath string) string {
	return strings.TrimSuffix(resultsPath, ".parquet") + MetricsSuffix
}

// MetricsSchemaWithRun returns MetricsSchema carrying the metrics format and the run
// metadata: the schema of a metrics file and of its journal.
func MetricsSchemaWithRun(run *RunMeta) (*arrow.Schema, error) {
	return withRun(MetricsSchema, MetricsFormat, run)
}

// CheckMetrics checks that s is a metrics/v1 schema (format key, every column by name with
// its type) and returns its run metadata.
func CheckMetrics(s *arrow.Schema) (*RunMeta, error) {
	m, err := runOf(s, MetricsFormat)
	if err != nil {
		return nil, err
	}
	for _, want := range MetricsSchema.Fields() {
		i := s.FieldIndices(want.Name)
		if len(i) == 0 {
			return nil, &Error{Column: want.Name, Msg: "missing"}
		}
		if got := s.Field(i[0]).Type; !sameType(got, want.Type) {
			return nil, &Error{Column: want.Name, Msg: fmt.Sprintf("type %s, want %s", got, want.Type)}
		}
	}
	return m, nil
}
