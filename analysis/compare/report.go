package compare

import (
	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/plot"

	"bufio"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// Format is the llmreplay.format of compare.parquet.
const Format = "compare/v1"

// fmtValue prints a figure with four significant digits at most, no exponent.
func fmtValue(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "—"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 10:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// fmtDelta prints a change: percent, or percentage points.
func fmtDelta(v float64, relative bool) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	unit := "pp"
	if relative {
		unit = "%"
	}
	if v == 0 {
		return "0" + unit
	}
	return fmt.Sprintf("%+.1f%s", v, unit)
}

// changeCells are the change columns of one run against A: change, interval, mark.
func changeCells(c stats.Change) (delta, ci, mark string) {
	delta = fmtDelta(c.Delta, c.Relative)
	if !c.CI.Valid() {
		return delta, "—", ""
	}
	ci = "[" + fmtDelta(c.CI.Lo, c.Relative) + ", " + fmtDelta(c.CI.Hi, c.Relative) + "]"
	if !c.Significant() {
		mark = "~"
	}
	return delta, ci, mark
}

func (r RunInfo) describe() string {
	m := r.Meta
	var parts []string
	if orOpen(m.Mode) == results.ModeClosed {
		parts = append(parts, fmt.Sprintf("closed loop, concurrency %d", m.Concurrency))
	} else {
		parts = append(parts, "open loop")
		if m.Rate > 0 {
			parts = append(parts, "rate "+analysis.FormatLoad(m.Rate))
		} else {
			parts = append(parts, "speedup "+analysis.FormatLoad(m.Speedup))
		}
	}
	parts = append(parts, "trace "+analysis.OrDash(short(m.TraceSHA256)))
	if m.Simulated {
		parts = append(parts, "sim "+analysis.OrDash(m.SimProfile))
	} else if m.Model != "" {
		parts = append(parts, "model "+m.Model)
	}
	if r.Repeats > 1 {
		parts = append(parts, fmt.Sprintf("%d repeats", r.Repeats))
	}
	s := strings.Join(parts, ", ")
	if r.ClientLimited {
		s += "  CLIENT-LIMITED"
	}
	if r.Overloaded {
		s += "  OVERLOADED"
	}
	return s
}

// WriteText writes the comparison as benchstat-style tables.
func (c *Comparison) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }
	if len(c.Differences) > 0 {
		p("DIFFERENT RUNS (compared with --allow-different):\n")
		for _, d := range c.Differences {
			p("  %s\n", d)
		}
		p("\n")
	}
	for k, s := range c.Sections {
		if k > 0 {
			p("\n")
		}
		if s.Point != "" {
			p("== %s ==\n", s.Point)
		}
		for _, r := range s.Runs {
			p("%s  %s  (%s)\n", r.Label, r.Path, r.describe())
		}
		p("\n")
		nameW := len("figure")
		for _, row := range s.Rows {
			nameW = max(nameW, len(row.Name))
		}
		header := []string{"figure"}
		for _, r := range s.Runs {
			header = append(header, r.Label)
		}
		for _, r := range s.Runs[1:] {
			header = append(header, r.Label+" vs A", fmt.Sprintf("%g%% CI", 100*c.Options.Bootstrap.Confidence), "")
		}
		lines := [][]string{header}
		for _, row := range s.Rows {
			l := []string{row.Name}
			for _, v := range row.Values {
				l = append(l, fmtValue(v))
			}
			for _, ch := range row.Changes[1:] {
				d, ci, mark := changeCells(ch)
				l = append(l, d, ci, mark)
			}
			lines = append(lines, l)
		}
		widths := make([]int, len(header))
		for _, l := range lines {
			for i, v := range l {
				widths[i] = max(widths[i], len([]rune(v)))
			}
		}
		for _, l := range lines {
			var b strings.Builder
			for i, v := range l {
				pad := strings.Repeat(" ", widths[i]-len([]rune(v)))
				switch {
				case i == 0:
					b.WriteString(v + pad)
				case i > len(s.Runs) && (i-len(s.Runs))%3 == 0: // the mark
					b.WriteString(" " + v + pad)
				default:
					b.WriteString("  " + pad + v)
				}
			}
			p("%s\n", strings.TrimRight(b.String(), " "))
		}
	}
	p("\n%s\n", wrap(c.Method, 100))
	for _, wn := range c.Warnings {
		p("warning: %s\n", wn)
	}
	return bw.Flush()
}

// wrap breaks s into lines of at most n characters at spaces.
func wrap(s string, n int) string {
	var b strings.Builder
	line := 0
	for i, word := range strings.Fields(s) {
		if i > 0 {
			if line+1+len(word) > n {
				b.WriteString("\n")
				line = 0
			} else {
				b.WriteString(" ")
				line++
			}
		}
		b.WriteString(word)
		line += len(word)
	}
	return b.String()
}

// The JSON shapes (docs/compare.md): keys are a contract.
type jsonComparison struct {
	Confidence  float64          `json:"confidence"`
	Resamples   int              `json:"resamples"`
	Seed        uint64           `json:"seed"`
	Method      string           `json:"method"`
	Differences []string         `json:"differences"`
	Sections    []jsonCmpSection `json:"sections"`
	Warnings    []string         `json:"warnings"`
}

type jsonCmpSection struct {
	Point   string       `json:"point,omitempty"`
	Runs    []jsonCmpRun `json:"runs"`
	Figures []jsonFigure `json:"figures"`
}

type jsonCmpRun struct {
	Label         string       `json:"label"`
	Path          string       `json:"path"`
	Files         []string     `json:"files"`
	RunID         string       `json:"run_id"`
	Repeats       int          `json:"repeats"`
	TraceSHA256   string       `json:"trace_sha256"`
	Mode          string       `json:"mode"`
	Speedup       analysis.Num `json:"speedup"`
	Rate          analysis.Num `json:"rate"`
	Concurrency   int          `json:"concurrency"`
	ClientLimited bool         `json:"client_limited"`
	Overloaded    bool         `json:"overloaded"`
}

type jsonFigure struct {
	Key      string         `json:"key"`
	Name     string         `json:"name"`
	Unit     string         `json:"unit"`
	Relative bool           `json:"relative"`
	Values   []analysis.Num `json:"values"`
	Changes  []jsonChange   `json:"changes"` // one per run after A
}

type jsonChange struct {
	Delta       analysis.Num `json:"delta"`
	Lo          analysis.Num `json:"ci_lo"`
	Hi          analysis.Num `json:"ci_hi"`
	Significant bool         `json:"significant"`
}

func (c *Comparison) toJSON() jsonComparison {
	b := c.Options.Bootstrap
	out := jsonComparison{Confidence: b.Confidence, Resamples: b.Resamples, Seed: b.Seed, Method: c.Method,
		Differences: append([]string{}, c.Differences...), Warnings: append([]string{}, c.Warnings...)}
	for _, s := range c.Sections {
		js := jsonCmpSection{Point: s.Point}
		for _, r := range s.Runs {
			m := r.Meta
			js.Runs = append(js.Runs, jsonCmpRun{Label: r.Label, Path: r.Path, Files: r.Files, RunID: m.RunID, Repeats: r.Repeats,
				TraceSHA256: m.TraceSHA256, Mode: orOpen(m.Mode), Speedup: analysis.Num(m.Speedup), Rate: analysis.Num(m.Rate), Concurrency: m.Concurrency,
				ClientLimited: r.ClientLimited, Overloaded: r.Overloaded})
		}
		for _, row := range s.Rows {
			f := jsonFigure{Key: row.Key, Name: row.Name, Unit: row.Unit, Relative: row.Relative, Changes: []jsonChange{}}
			for _, v := range row.Values {
				f.Values = append(f.Values, analysis.Num(v))
			}
			for _, ch := range row.Changes[1:] {
				f.Changes = append(f.Changes, jsonChange{analysis.Num(ch.Delta), analysis.Num(ch.CI.Lo), analysis.Num(ch.CI.Hi), ch.Significant()})
			}
			js.Figures = append(js.Figures, f)
		}
		out.Sections = append(out.Sections, js)
	}
	return out
}

// WriteJSON writes the comparison as one JSON object.
func (c *Comparison) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(c.toJSON())
}

// WriteParquetDir writes compare.parquet (one row per section, figure and run) and, through
// the analyze report code, summary.parquet and timeseries.parquet of every run.
func (c *Comparison) WriteParquetDir(dir string) error {
	if err := analysis.WriteParquetDir(dir, c.Reports()...); err != nil {
		return err
	}
	col := analysis.NewColumn
	var rows [][]analysis.Column
	for _, s := range c.Sections {
		for _, row := range s.Rows {
			for i, r := range s.Runs {
				ch := row.Changes[i]
				rows = append(rows, []analysis.Column{col("point", s.Point), col("figure", row.Key), col("unit", row.Unit), col("relative", row.Relative),
					col("run", r.Label), col("run_id", r.Meta.RunID), col("value", row.Values[i]),
					col("change", ch.Delta), col("ci_lo", ch.CI.Lo), col("ci_hi", ch.CI.Hi), col("significant", ch.Significant())})
			}
		}
	}
	return analysis.WriteColumns(filepath.Join(dir, "compare.parquet"), Format, rows)
}

// seriesClass is the plot class of run i (three colours, then dashed repeats of them).
func seriesClass(i int) string { return fmt.Sprintf("s%d", i%3+1) }

// WriteHTML writes a self-contained page: each section's table, the runs' TTFT and TPOT
// CDFs side by side and their throughput over time, drawn by the analyze report's plot code.
func (c *Comparison) WriteHTML(w io.Writer) error {
	pg := comparePage{Title: "llmreplay compare", Style: analysis.PageStyle, Script: analysis.PageScript, Differences: c.Differences, Method: c.Method, Warnings: c.Warnings}
	ci := fmt.Sprintf("%g%% CI", 100*c.Options.Bootstrap.Confidence)
	for k, s := range c.Sections {
		h := compareSectionHTML{Point: s.Point, Header: []string{"figure"}, Plots: c.plots(k, s)}
		for _, r := range s.Runs {
			h.Runs = append(h.Runs, analysis.TableRow{Head: r.Label, Cells: []analysis.TableCell{{Text: r.Path, Left: true}, {Text: r.describe(), Left: true}}})
			h.Header = append(h.Header, r.Label)
		}
		for _, r := range s.Runs[1:] {
			h.Header = append(h.Header, r.Label+" vs A", ci, "")
		}
		for _, row := range s.Rows {
			hr := analysis.DataRow(row.Name)
			for _, v := range row.Values {
				hr.Cells = append(hr.Cells, analysis.TableCell{Text: fmtValue(v)})
			}
			for _, ch := range row.Changes[1:] {
				d, ci, mark := changeCells(ch)
				cls := ""
				if ch.Significant() {
					cls = "flag"
				}
				hr.Cells = append(hr.Cells, analysis.TableCell{Text: d, Class: cls}, analysis.TableCell{Text: ci}, analysis.TableCell{Text: mark})
			}
			h.Rows = append(h.Rows, hr)
		}
		pg.Sections = append(pg.Sections, h)
	}
	bw := bufio.NewWriter(w)
	if err := compareTemplate.Execute(bw, pg); err != nil {
		return fmt.Errorf("analysis: compare html: %w", err)
	}
	return bw.Flush()
}

// comparePage is what compareTemplate reads.
type comparePage struct {
	Title       string
	Style       template.CSS
	Script      template.JS
	Differences []string
	Sections    []compareSectionHTML
	Method      string
	Warnings    []string
}

type compareSectionHTML struct {
	Point      string
	Runs, Rows []analysis.TableRow
	Header     []string
	Plots      []*analysis.Plot
}

var compareTemplate = analysis.PageTemplate(`<h1>llmreplay compare</h1>
{{with .Differences}}<p class="warn flag">Different runs (compared with --allow-different):</p><ul>{{range .}}<li class="warn">{{.}}</li>{{end}}</ul>
{{end}}{{range .Sections}}{{with .Point}}<h2>{{.}}</h2>
{{end}}<table>{{template "rows" .Runs}}</table>
<table>{{template "header" .Header}}{{template "rows" .Rows}}</table>
<div class="grid-2">
{{range .Plots}}{{template "svg" .}}
{{end}}</div>
{{end}}<p>{{.Method}}</p>
{{with .Warnings}}<h2>Warnings</h2><ul>{{range .}}<li class="warn">{{.}}</li>{{end}}</ul>
{{end}}`)

// plots draws section k's CDFs and throughput over time, every run on the same axes.
func (c *Comparison) plots(k int, s Section) []*analysis.Plot {
	var out []*analysis.Plot
	legend := func(pl *analysis.Plot) {
		var items [][2]string
		for i, r := range s.Runs {
			items = append(items, [2]string{seriesClass(i), r.Label})
		}
		pl.Legend(items...)
	}
	for _, m := range []struct {
		id, title string
		curve     func(*analysis.Report) [][2]float64
	}{
		{"ttft", "TTFT distribution (CDF)", func(r *analysis.Report) [][2]float64 { return r.Curve("ttft") }},
		// None of a run that did not reason: a comparison of such runs draws no TTFA plot.
		{"ttfa", "TTFA (time to first answer token) distribution (CDF)", func(r *analysis.Report) [][2]float64 { return r.Curve("ttfa") }},
		{"tpot", "TPOT distribution (CDF)", func(r *analysis.Report) [][2]float64 { return r.Curve("tpot") }},
		// A run that is not generation (embeddings, rerank) has this one alone.
		{"latency", "Latency distribution (CDF)", func(r *analysis.Report) [][2]float64 { return r.Curve("latency") }},
	} {
		lo, hi := math.Inf(1), 0.0
		for _, r := range s.reports {
			if cv := m.curve(r); len(cv) > 0 {
				lo, hi = math.Min(lo, math.Max(cv[0][0], 1e-3)), math.Max(hi, cv[len(cv)-1][0])
			}
		}
		if hi == 0 {
			continue
		}
		logx := hi/lo > 50
		if !logx {
			lo = 0
		}
		xlabel := "ms"
		if logx {
			xlabel += " (log scale)"
		}
		pl := plot.New(fmt.Sprintf("plot-%s-cdf-%d", m.id, k), m.title, xlabel, "fraction of requests ≤ x", lo, math.Max(hi, lo*1.01), logx, 0, 1, false)
		for i, r := range s.reports {
			pl.Line(m.curve(r), seriesClass(i))
		}
		legend(pl)
		out = append(out, pl)
	}
	var xhi, yhi float64
	for _, r := range s.reports {
		if n := len(r.Series); n > 0 {
			xhi = math.Max(xhi, r.Series[n-1].StartS+r.Options.Interval.Seconds())
			for _, iv := range r.Series {
				yhi = math.Max(yhi, seriesRate(r, iv))
			}
		}
	}
	if xhi > 0 {
		title, unit := "Output tokens/s over time", "tok/s"
		if s.reports[0].Unary != nil {
			title, unit = "Requests completed/s over time", "req/s"
		}
		pl := plot.New(fmt.Sprintf("plot-throughput-%d", k), title, "time since run start (s)", unit, 0, xhi, false, 0, yhi*1.1, false)
		for i, r := range s.reports {
			iv := r.Options.Interval.Seconds()
			var pts [][2]float64
			for _, x := range r.Series {
				pts = append(pts, [2]float64{x.StartS + iv/2, seriesRate(r, x)})
			}
			pl.Line(pts, seriesClass(i))
		}
		legend(pl)
		out = append(out, pl)
	}
	return out
}

// WriteHTMLFile writes the page to path through a temporary file.
func (c *Comparison) WriteHTMLFile(path string) error {
	return analysis.WriteFileAtomic(path, c.WriteHTML)
}

// seriesRate is what the throughput plot draws of an interval: output tokens/s, or the
// requests completed per second of a run that is not generation (it has no output).
func seriesRate(r *analysis.Report, iv analysis.Interval) float64 {
	if r.Unary != nil {
		return float64(iv.Completed) / r.Options.Interval.Seconds()
	}
	return iv.OutputTokensPerS
}
