// Package plot draws the SVG plots of llmreplay's HTML pages in Go: a Plot collects its
// frame, ticks, labels and marks as data, and the pages' "svg" template (package
// analysis, htmlBase) writes them through html/template, which escapes every text and
// attribute. It loads nothing and imports nothing of llmreplay.
package plot

import (
	"fmt"
	"math"
	"strings"
)

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

func (p *Plot) add(e svgElem) { p.Elems = append(p.Elems, e) }

func (p *Plot) text(t svgText) { p.add(svgElem{Text: &t}) }

func (p *Plot) lineMark(l svgLine) { p.add(svgElem{Line: &l}) }

// New is an empty plot with id (the element's id, which the render check names), a title,
// axis labels and ranges, each axis linear or log (an empty range is widened by 1).
func New(id, title, xlabel, ylabel string, xlo, xhi float64, xlog bool, ylo, yhi float64, ylog bool) *Plot {
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

// Line draws a polyline through the finite points, in the style class (s1, s2, s3: the
// series; ref, slo: references).
func (p *Plot) Line(pts [][2]float64, class string) {
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

// Dots marks each of pts (a point at x <= 0 is left out on a log x axis).
func (p *Plot) Dots(pts [][2]float64, class string) {
	for _, q := range pts {
		if q[0] <= 0 && p.x.log || math.IsNaN(q[1]) {
			continue
		}
		p.add(svgElem{Circle: &svgCircle{class, d1(p.clip(p.x.px(q[0]), padL, plotW-padR)), d1(p.clip(p.y.px(q[1]), padT, plotH-padB))}})
	}
}

// Band shades [x0, x1) (the steady-state window); label is its tooltip.
func (p *Plot) Band(x0, x1 float64, label string) {
	a, b := p.clip(p.x.px(x0), padL, plotW-padR), p.clip(p.x.px(x1), padL, plotW-padR)
	p.add(svgElem{Rect: &svgRect{Class: "band", X: d1(a), Y: g(padT), W: d1(b - a), H: g(plotH - padT - padB), Title: label}})
}

// HLine draws a horizontal line at y = v, labelled, when v is in range.
func (p *Plot) HLine(v float64, class, label string) {
	y := p.y.px(v)
	if y < padT || y > plotH-padB {
		return
	}
	p.lineMark(svgLine{class, g(padL), g(plotW - padR), d1(y), d1(y)})
	p.text(svgText{Class: "note", X: g(plotW - padR - 4), Y: d1(y - 4), Anchor: "end", Text: label})
}

// VLine draws a vertical line at x = v, labelled ("" for none), when v is in range.
func (p *Plot) VLine(v float64, class, label string) {
	x := p.x.px(v)
	if x < padL || x > plotW-padR {
		return
	}
	p.lineMark(svgLine{class, d1(x), d1(x), g(padT), g(plotH - padB)})
	p.text(svgText{Class: "note", X: d1(x + 3), Y: g(padT + 12), Text: label})
}

// Legend names each style class: {class, label} pairs.
func (p *Plot) Legend(items ...[2]string) {
	x := padL + 8
	for _, it := range items {
		p.lineMark(svgLine{it[0], g(x), g(x + 18), g(padT + 12), g(padT + 12)})
		p.text(svgText{Class: "note", X: g(x + 22), Y: g(padT + 16), Text: it[1]})
		x += 30 + 7*float64(len(it[1]))
	}
}

// Bar draws bar i of n: its height v (0..100 on the y axis), its label under it and its
// value above it; tip is its tooltip.
func (p *Plot) Bar(i, n int, v float64, label, tip string) {
	w := (plotW - padL - padR) / float64(n)
	x := padL + float64(i)*w
	y := p.y.px(v)
	p.add(svgElem{Rect: &svgRect{Class: "bar", X: d1(x + w*0.15), Y: d1(y), W: d1(w * 0.7), H: d1(plotH - padB - y), Title: tip}})
	p.text(svgText{Class: "tick", X: d1(x + w/2), Y: g(plotH - padB + 30), Anchor: "middle", Text: label})
	p.text(svgText{Class: "note", X: d1(x + w/2), Y: d1(y - 3), Anchor: "middle", Text: fmt.Sprintf("%.0f%%", v)})
}

// MaxOf is the largest finite pts[i][k] (0 when none): a plot's range.
func MaxOf(pts [][2]float64, k int) float64 {
	m := 0.0
	for _, q := range pts {
		if !math.IsNaN(q[k]) && !math.IsInf(q[k], 0) {
			m = math.Max(m, q[k])
		}
	}
	return m
}
