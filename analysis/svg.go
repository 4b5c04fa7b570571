package analysis

import (
	"fmt"
	"html/template"
	"math"
	"strings"
)

// The plots of the HTML pages are SVG drawn here in Go: an svgPlot collects its marks, and
// the pages' "svg" template (htmlBase) writes them, escaping every text and attribute.

const plotW, plotH = 640.0, 260.0
const padL, padR, padT, padB = 64.0, 16.0, 28.0, 40.0

// axis maps data to pixels; log axes take log10 of positive values.
type axis struct {
	lo, hi float64
	log    bool
	p0, p1 float64 // pixel range
}

func (a axis) px(v float64) float64 {
	lo, hi := a.lo, a.hi
	if a.log {
		v, lo, hi = math.Log10(math.Max(v, 1e-12)), math.Log10(lo), math.Log10(hi)
	}
	if hi == lo {
		return (a.p0 + a.p1) / 2
	}
	return a.p0 + (v-lo)/(hi-lo)*(a.p1-a.p0)
}

// niceTicks returns about n round tick values covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if !(hi > lo) {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

func logTicks(lo, hi float64) []float64 {
	var out []float64
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
				out = append(out, v)
			}
		}
	}
	return out
}

func fmtTick(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%gk", v/1e3)
	}
	return fmt.Sprintf("%g", math.Round(v*1000)/1000)
}

// Plot accumulates one chart: its frame, ticks and labels, then the marks drawn on it.
type Plot struct {
	x, y  axis
	W, H  float64 // the page geometry: plotW, plotH and padL
	PadL  float64
	ID    string
	Class string // "plot", or "plot bars" for a bar chart (its numeric x ticks hidden)
	Title string
	Elems []svgElem
}

// svgElem is one mark: exactly one of its fields is set. Coordinates are formatted
// numbers.
type svgElem struct {
	Line   *svgLine
	Text   *svgText
	Rect   *svgRect
	Poly   *svgPoly
	Circle *svgCircle
}

type svgLine struct{ Class, X1, X2, Y1, Y2 string }

// svgText is a text mark; empty attributes are left out.
type svgText struct{ Class, Transform, X, Y, Anchor, Text string }

// svgRect is a rectangle; a Title becomes its tooltip.
type svgRect struct{ Class, X, Y, W, H, Title string }

type svgPoly struct{ Class, Points string }

type svgCircle struct{ Class, CX, CY string }

// g and d1 format a coordinate as %g and %.1f.
func g(v float64) string  { return fmt.Sprintf("%g", v) }
func d1(v float64) string { return fmt.Sprintf("%.1f", v) }

// htmlBase holds what the HTML pages share: "svg" writes an svgPlot, "rows" and "header"
// a table's rows. Each page clones it
// and adds its own template (pageTemplate).
var htmlBase = template.Must(template.New("base").Funcs(template.FuncMap{"g": g}).Parse(`{{define "svg"}}` +
	`<svg class="{{.Class}}" id="{{.ID}}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {{g .W}} {{g .H}}" width="{{g .W}}" height="{{g .H}}" role="img" aria-label="{{.Title}}">` +
	`<text x="{{g .PadL}}" y="16" class="title">{{.Title}}</text>` +
	`{{range .Elems}}` +
	`{{with .Line}}<line class="{{.Class}}" x1="{{.X1}}" x2="{{.X2}}" y1="{{.Y1}}" y2="{{.Y2}}"/>{{end}}` +
	`{{with .Text}}<text class="{{.Class}}"{{with .Transform}} transform="{{.}}"{{end}}{{with .X}} x="{{.}}"{{end}}{{with .Y}} y="{{.}}"{{end}}{{with .Anchor}} text-anchor="{{.}}"{{end}}>{{.Text}}</text>{{end}}` +
	`{{with .Rect}}<rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}"{{if .Title}}><title>{{.Title}}</title></rect>{{else}}/>{{end}}{{end}}` +
	`{{with .Poly}}<polyline class="{{.Class}}" points="{{.Points}}"/>{{end}}` +
	`{{with .Circle}}<circle class="{{.Class}}" cx="{{.CX}}" cy="{{.CY}}" r="1.6"/>{{end}}` +
	`{{end}}</svg>{{end}}` +
	// rows writes htmlRows; header a row of column titles.
	`{{define "rows"}}{{range .}}<tr>{{with .Head}}<th>{{.}}</th>{{end}}{{range .Cells}}<td{{with .Class}} class="{{.}}"{{end}}{{if .Left}} style="text-align:left"{{end}}>{{.Text}}</td>{{end}}</tr>{{if .NL}}{{"\n"}}{{end}}{{end}}{{end}}` +
	`{{define "header"}}<tr>{{range .}}<th>{{.}}</th>{{end}}</tr>{{"\n"}}{{end}}`))

// htmlRow is a table row: an optional heading cell, then data cells; NL ends it with a
// newline in the page's source.
type htmlRow struct {
	Head  string
	Cells []htmlCell
	NL    bool
}

// htmlCell is a data cell; Left aligns it left (the style aligns data right).
type htmlCell struct {
	Text, Class string
	Left        bool
}

// dataRow is a row of data cells ending its line.
func dataRow(cells ...string) htmlRow {
	r := htmlRow{NL: true}
	for _, c := range cells {
		r.Cells = append(r.Cells, htmlCell{Text: c})
	}
	return r
}

// kvRow is a row of a heading and its value.
func kvRow(head, value string, nl bool) htmlRow {
	return htmlRow{Head: head, Cells: []htmlCell{{Text: value}}, NL: nl}
}

// pageTemplate is a page's template: htmlBase and text, which names the page "page".
func pageTemplate(text string) *template.Template {
	return template.Must(template.Must(htmlBase.Clone()).New("page").Parse(text))
}

func (p *Plot) add(e svgElem) { p.Elems = append(p.Elems, e) }

func (p *Plot) text(t svgText) { p.add(svgElem{Text: &t}) }

func (p *Plot) lineMark(l svgLine) { p.add(svgElem{Line: &l}) }

func newPlot(id, title, xlabel, ylabel string, xlo, xhi float64, xlog bool, ylo, yhi float64, ylog bool) *Plot {
	if !(xhi > xlo) {
		xhi = xlo + 1
	}
	if !(yhi > ylo) {
		yhi = ylo + 1
	}
	p := &Plot{W: plotW, H: plotH, PadL: padL, ID: id, Class: "plot", Title: title,
		x: axis{lo: xlo, hi: xhi, log: xlog, p0: padL, p1: plotW - padR},
		y: axis{lo: ylo, hi: yhi, log: ylog, p0: plotH - padB, p1: padT}}
	xt := niceTicks(xlo, xhi, 6)
	if xlog {
		xt = logTicks(xlo, xhi)
	}
	yt := niceTicks(ylo, yhi, 5)
	if ylog {
		yt = logTicks(ylo, yhi)
	}
	for _, v := range yt {
		py := p.y.px(v)
		p.lineMark(svgLine{"grid", g(padL), g(plotW - padR), d1(py), d1(py)})
		p.text(svgText{Class: "tick", X: g(padL - 6), Y: d1(py + 4), Anchor: "end", Text: fmtTick(v)})
	}
	for _, v := range xt {
		px := p.x.px(v)
		p.lineMark(svgLine{"grid", d1(px), d1(px), g(padT), g(plotH - padB)})
		p.text(svgText{Class: "tick", X: d1(px), Y: g(plotH - padB + 16), Anchor: "middle", Text: fmtTick(v)})
	}
	p.add(svgElem{Rect: &svgRect{Class: "frame", X: g(padL), Y: g(padT), W: g(plotW - padL - padR), H: g(plotH - padT - padB)}})
	p.text(svgText{Class: "label", X: g((padL + plotW - padR) / 2), Y: g(plotH - 6), Anchor: "middle", Text: xlabel})
	p.text(svgText{Class: "label", Transform: fmt.Sprintf("translate(14 %g) rotate(-90)", (padT+plotH-padB)/2), Anchor: "middle", Text: ylabel})
	return p
}

func (p *Plot) clip(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// line draws a polyline through the finite points.
func (p *Plot) line(pts [][2]float64, class string) {
	var xy []string
	for _, q := range pts {
		if math.IsNaN(q[0]) || math.IsNaN(q[1]) || math.IsInf(q[1], 0) {
			continue
		}
		x := p.clip(p.x.px(q[0]), padL, plotW-padR)
		y := p.clip(p.y.px(q[1]), padT, plotH-padB)
		xy = append(xy, d1(x)+","+d1(y))
	}
	if len(xy) > 0 {
		p.add(svgElem{Poly: &svgPoly{class, strings.Join(xy, " ")}})
	}
}

func (p *Plot) dots(pts [][2]float64, class string) {
	for _, q := range pts {
		if q[0] <= 0 && p.x.log || math.IsNaN(q[1]) {
			continue
		}
		p.add(svgElem{Circle: &svgCircle{class, d1(p.clip(p.x.px(q[0]), padL, plotW-padR)), d1(p.clip(p.y.px(q[1]), padT, plotH-padB))}})
	}
}

// band shades [x0, x1) (the steady-state window).
func (p *Plot) band(x0, x1 float64, label string) {
	a, b := p.clip(p.x.px(x0), padL, plotW-padR), p.clip(p.x.px(x1), padL, plotW-padR)
	p.add(svgElem{Rect: &svgRect{Class: "band", X: d1(a), Y: g(padT), W: d1(b - a), H: g(plotH - padT - padB), Title: label}})
}

func (p *Plot) hline(v float64, class, label string) {
	y := p.y.px(v)
	if y < padT || y > plotH-padB {
		return
	}
	p.lineMark(svgLine{class, g(padL), g(plotW - padR), d1(y), d1(y)})
	p.text(svgText{Class: "note", X: g(plotW - padR - 4), Y: d1(y - 4), Anchor: "end", Text: label})
}

func (p *Plot) vline(v float64, class, label string) {
	x := p.x.px(v)
	if x < padL || x > plotW-padR {
		return
	}
	p.lineMark(svgLine{class, d1(x), d1(x), g(padT), g(plotH - padB)})
	p.text(svgText{Class: "note", X: d1(x + 3), Y: g(padT + 12), Text: label})
}

func (p *Plot) legend(items ...[2]string) {
	x := padL + 8
	for _, it := range items {
		p.lineMark(svgLine{it[0], g(x), g(x + 18), g(padT + 12), g(padT + 12)})
		p.text(svgText{Class: "note", X: g(x + 22), Y: g(padT + 16), Text: it[1]})
		x += 30 + 7*float64(len(it[1]))
	}
}

// bar draws bar i of n: its height v (0..100 on the y axis), its label under it and its
// value above it; tip is its tooltip.
func (p *Plot) bar(i, n int, v float64, label, tip string) {
	w := (plotW - padL - padR) / float64(n)
	x := padL + float64(i)*w
	y := p.y.px(v)
	p.add(svgElem{Rect: &svgRect{Class: "bar", X: d1(x + w*0.15), Y: d1(y), W: d1(w * 0.7), H: d1(plotH - padB - y), Title: tip}})
	p.text(svgText{Class: "tick", X: d1(x + w/2), Y: g(plotH - padB + 30), Anchor: "middle", Text: label})
	p.text(svgText{Class: "note", X: d1(x + w/2), Y: d1(y - 3), Anchor: "middle", Text: fmt.Sprintf("%.0f%%", v)})
}
