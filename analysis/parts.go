package analysis

import (
	"io"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/analysis/plot"

	"fmt"
	"html/template"
	"math"
	"strings"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// The parts of a run's report that other reports build on. Package sweep writes a sweep's
// table, JSON, sweep.parquet and page from its points' Reports with these, so that a
// figure, a number, a summary column and a plot read the same in a run's report and in a
// sweep's.

// FigureFloat reads the declared scalar figure key (figures.go, reportFigures) from a
// report as a float: a count as its value, a flag as 0 or 1; NaN for a key not declared
// (the goldens of whatever reads it would show it).
func FigureFloat(key string) func(*Report) float64 { return figureFloat(key) }

// FigureQuantile reads a percentile (p picks it: q.P50, q.P99 ...) of the declared
// distribution key, in ms.
func FigureQuantile(key string, p func(stats.Quantiles) float64) func(*Report) float64 {
	return figureQuantile(key, p)
}

// Format1, Format2 and FormatPct print a figure as the text reports do: one or two
// decimals, or a percentage with one ("12.5%"); "-" when undefined.
func Format1(v float64) string { return f1(v) }

// Format2: see Format1.
func Format2(v float64) string { return f2(v) }

// FormatPct: see Format1; v is in percent.
func FormatPct(v float64) string { return pct(v) }

// FormatLoad prints a sweep's load (a speedup, rate or concurrency) to four decimals at
// most, trailing zeros dropped: compare's point names and a sweep's reports share it.
func FormatLoad(v float64) string { return fmtLoad(v) }

func f1(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func fmtLoad(v float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", v), "0"), ".")
}

// PerUserJSON is the JSON object of a report's per-user speeds (docs/metrics.md, "Per-user
// speed"): the report's "per_user" key, and a closed-loop sweep point's.
func PerUserJSON(u PerUser) any { return jsonPerUser{js(u.TokensPerS), js(u.InvTPOT)} }

// NewColumn is the column name holding v (float64, int64, bool or string).
func NewColumn(name string, v any) Column { return Column{name, v} }

// SummaryColumns is the report's summary.parquet row (docs/metrics.md, "summary.parquet").
func (r *Report) SummaryColumns() []Column { return r.summaryCols() }

// WriteColumns writes rows of columns (every row with the same names and kinds) as one
// Parquet file whose llmreplay.format is format, through a temporary file; NaN floats
// become nulls.
func WriteColumns(path, format string, rows [][]Column) error {
	if len(rows) == 0 {
		return fmt.Errorf("analysis: write %s: no rows", path)
	}
	first := rows[0]
	fields := make([]arrow.Field, len(first))
	for i, c := range first {
		switch c.v.(type) {
		case float64:
			fields[i] = arrow.Field{Name: c.name, Type: arrow.PrimitiveTypes.Float64, Nullable: true}
		case int64:
			fields[i] = arrow.Field{Name: c.name, Type: arrow.PrimitiveTypes.Int64}
		case bool:
			fields[i] = arrow.Field{Name: c.name, Type: arrow.FixedWidthTypes.Boolean}
		case string:
			fields[i] = arrow.Field{Name: c.name, Type: arrow.BinaryTypes.String}
		default:
			return fmt.Errorf("analysis: column %s: unsupported kind %T", c.name, c.v)
		}
	}
	md := arrow.NewMetadata([]string{results.MetaFormat}, []string{format})
	b := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, &md))
	defer b.Release()
	for _, row := range rows {
		for i, c := range row {
			switch v := c.v.(type) {
			case float64:
				if math.IsNaN(v) || math.IsInf(v, 0) {
					b.Field(i).AppendNull()
				} else {
					b.Field(i).(*array.Float64Builder).Append(v)
				}
			case int64:
				b.Field(i).(*array.Int64Builder).Append(v)
			case bool:
				b.Field(i).(*array.BooleanBuilder).Append(v)
			case string:
				b.Field(i).(*array.StringBuilder).Append(v)
			}
		}
	}
	return writeRecord(path, b.NewRecord())
}

// Plot is one SVG plot of a page (package analysis/plot draws it; the pages' "svg"
// template writes it).
type Plot = plot.Plot

// NewPlot is plot.New: an empty plot with id (the element's id, which the render check
// names), a title, axis labels and ranges, each axis linear or log. Its methods Line,
// Dots, VLine and Legend draw on it.
func NewPlot(id, title, xlabel, ylabel string, xlo, xhi float64, xlog bool, ylo, yhi float64, ylog bool) *Plot {
	return plot.New(id, title, xlabel, ylabel, xlo, xhi, xlog, ylo, yhi, ylog)
}

// MaxOf is the largest finite pts[i][k] (0 when none): a plot's range.
func MaxOf(pts [][2]float64, k int) float64 { return plot.MaxOf(pts, k) }

// PageTemplate is a self-contained page whose body is body: the shared head (Content
// Security Policy, style sheet) and foot (the render check), with "svg" to draw a Plot.
// Its data has Title, Style (PageStyle) and Script (PageScript) besides what body reads.
func PageTemplate(body string) *template.Template { return pageTemplate(htmlHead + body + htmlFoot) }

// PageStyle and PageScript are every page's style sheet and render-check script.
const (
	PageStyle  template.CSS = htmlStyle
	PageScript template.JS  = htmlScript
)

// SetPath sets the value at a dot-separated path ("ttft_ms.p50"), making the objects on
// the way; a key set again keeps its place.
func (o *Object) SetPath(path string, v any) { o.setPath(path, v) }

// What package analysis/compare reads of a run's report and its figures, besides the
// parts above.

// Figures returns the declared headline figures (figures.go, reportFigures), in their
// order; the caller must not change them.
func Figures() []Figure { return reportFigures }

// FigureByKey returns the declared figure named key, or nil.
func FigureByKey(key string) *Figure { return figureByKey(key) }

// Defined reports whether the run r reports defines the figure (its Present; nil: always).
func (f *Figure) Defined(r *Report) bool { return f.present(r) }

// Float returns a scalar figure's value as a float64 (a flag as 0 or 1; NaN for a string).
func (f *Figure) Float(r *Report) float64 { return f.float(r) }

// Meets reports whether request i of d is ok and meets every objective of slo.
func Meets(d *decode.Data, i int, slo SLO) bool { return meets(d, i, slo) }

// ReasoningSample is request i's sample of the reasoning distribution key (TTFA, answer
// TPOT, reasoning tokens); ok is false when the request has none.
func ReasoningSample(d *decode.Data, key string, i int) (float64, bool) {
	return reasoningSample(d, key, i)
}

// Curve is the CDF curve of the report's distribution key ("ttft", "tpot", "ttfa",
// "latency" of a run that is not generation; nil
// for a distribution without samples or a key without a curve), which the HTML pages draw.
func (r *Report) Curve(key string) [][2]float64 {
	switch key {
	case "ttft":
		return r.ttftCurve
	case "tpot":
		return r.tpotCurve
	case "ttfa":
		return r.ttfaCurve
	case "latency":
		if r.Unary != nil {
			return r.Unary.latencyCurve
		}
	}
	return nil
}

// TableRow and TableCell are a row and a cell of a page's tables, which the templates
// "rows" and "header" write (PageTemplate); DataRow is a row of data cells.
type (
	TableRow  = htmlRow
	TableCell = htmlCell
)

// DataRow is a row of data cells ending its line in the page's source.
func DataRow(cells ...string) TableRow { return dataRow(cells...) }

// OrDash is s, or "-" when s is empty (the reports' undefined text).
func OrDash(s string) string { return orDash(s) }

// WriteFileAtomic writes path through a temporary file renamed into place, so that a
// failure never leaves a half-written file.
func WriteFileAtomic(path string, write func(w io.Writer) error) error {
	return writeAtomic(path, write)
}

// SentImages reports whether request i of d sent images (results revision 1.4).
func SentImages(d *decode.Data, i int) bool { return imageRow(d, i) }

// PromptTokens is request i's prompt tokens: the server's count when it gave one, else the
// target (what total_tokens_per_s and the rates of a run that is not generation count).
func PromptTokens(d *decode.Data, i int) int64 { return promptTokens(d, i) }
