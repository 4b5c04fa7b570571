package analysis

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"strings"

	"github.com/llmreplay/llmreplay/stats"
)

// The HTML report is one self-contained page: inline CSS, SVG plots drawn here in Go, and a
// few lines of inline script that only check the plots rendered (a marker the browser test
// reads). It loads nothing from the network.

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

// svgPlot accumulates one chart.
type svgPlot struct {
	b    strings.Builder
	x, y axis
	id   string
}

func newPlot(id, title, xlabel, ylabel string, xlo, xhi float64, xlog bool, ylo, yhi float64, ylog bool) *svgPlot {
	if !(xhi > xlo) {
		xhi = xlo + 1
	}
	if !(yhi > ylo) {
		yhi = ylo + 1
	}
	p := &svgPlot{id: id,
		x: axis{lo: xlo, hi: xhi, log: xlog, p0: padL, p1: plotW - padR},
		y: axis{lo: ylo, hi: yhi, log: ylog, p0: plotH - padB, p1: padT}}
	fmt.Fprintf(&p.b, `<svg class="plot" id="%s" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %g %g" width="%g" height="%g" role="img" aria-label="%s">`,
		id, plotW, plotH, plotW, plotH, html.EscapeString(title))
	fmt.Fprintf(&p.b, `<text x="%g" y="16" class="title">%s</text>`, padL, html.EscapeString(title))
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
		fmt.Fprintf(&p.b, `<line class="grid" x1="%g" x2="%g" y1="%.1f" y2="%.1f"/><text class="tick" x="%g" y="%.1f" text-anchor="end">%s</text>`,
			padL, plotW-padR, py, py, padL-6, py+4, fmtTick(v))
	}
	for _, v := range xt {
		px := p.x.px(v)
		fmt.Fprintf(&p.b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%g" y2="%g"/><text class="tick" x="%.1f" y="%g" text-anchor="middle">%s</text>`,
			px, px, padT, plotH-padB, px, plotH-padB+16, fmtTick(v))
	}
	fmt.Fprintf(&p.b, `<rect class="frame" x="%g" y="%g" width="%g" height="%g"/>`, padL, padT, plotW-padL-padR, plotH-padT-padB)
	fmt.Fprintf(&p.b, `<text class="label" x="%g" y="%g" text-anchor="middle">%s</text>`, (padL+plotW-padR)/2, plotH-6, html.EscapeString(xlabel))
	fmt.Fprintf(&p.b, `<text class="label" transform="translate(14 %g) rotate(-90)" text-anchor="middle">%s</text>`, (padT+plotH-padB)/2, html.EscapeString(ylabel))
	return p
}

func (p *svgPlot) clip(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// line draws a polyline through the finite points.
func (p *svgPlot) line(pts [][2]float64, class string) {
	var sb strings.Builder
	n := 0
	for _, q := range pts {
		if math.IsNaN(q[0]) || math.IsNaN(q[1]) || math.IsInf(q[1], 0) {
			continue
		}
		x := p.clip(p.x.px(q[0]), padL, plotW-padR)
		y := p.clip(p.y.px(q[1]), padT, plotH-padB)
		fmt.Fprintf(&sb, "%.1f,%.1f ", x, y)
		n++
	}
	if n > 0 {
		fmt.Fprintf(&p.b, `<polyline class="%s" points="%s"/>`, class, strings.TrimSpace(sb.String()))
	}
}

func (p *svgPlot) dots(pts [][2]float64, class string) {
	for _, q := range pts {
		if q[0] <= 0 && p.x.log || math.IsNaN(q[1]) {
			continue
		}
		fmt.Fprintf(&p.b, `<circle class="%s" cx="%.1f" cy="%.1f" r="1.6"/>`, class,
			p.clip(p.x.px(q[0]), padL, plotW-padR), p.clip(p.y.px(q[1]), padT, plotH-padB))
	}
}

// band shades [x0, x1) (the steady-state window).
func (p *svgPlot) band(x0, x1 float64, label string) {
	a, b := p.clip(p.x.px(x0), padL, plotW-padR), p.clip(p.x.px(x1), padL, plotW-padR)
	fmt.Fprintf(&p.b, `<rect class="band" x="%.1f" y="%g" width="%.1f" height="%g"><title>%s</title></rect>`, a, padT, b-a, plotH-padT-padB, html.EscapeString(label))
}

func (p *svgPlot) hline(v float64, class, label string) {
	y := p.y.px(v)
	if y < padT || y > plotH-padB {
		return
	}
	fmt.Fprintf(&p.b, `<line class="%s" x1="%g" x2="%g" y1="%.1f" y2="%.1f"/><text class="note" x="%g" y="%.1f" text-anchor="end">%s</text>`,
		class, padL, plotW-padR, y, y, plotW-padR-4, y-4, html.EscapeString(label))
}

func (p *svgPlot) vline(v float64, class, label string) {
	x := p.x.px(v)
	if x < padL || x > plotW-padR {
		return
	}
	fmt.Fprintf(&p.b, `<line class="%s" x1="%.1f" x2="%.1f" y1="%g" y2="%g"/><text class="note" x="%.1f" y="%g">%s</text>`,
		class, x, x, padT, plotH-padB, x+3, padT+12, html.EscapeString(label))
}

func (p *svgPlot) legend(items ...[2]string) {
	x := padL + 8
	for _, it := range items {
		fmt.Fprintf(&p.b, `<line class="%s" x1="%g" x2="%g" y1="%g" y2="%g"/><text class="note" x="%g" y="%g">%s</text>`,
			it[0], x, x+18, padT+12, padT+12, x+22, padT+16, html.EscapeString(it[1]))
		x += 30 + 7*float64(len(it[1]))
	}
}

func (p *svgPlot) String() string { return p.b.String() + "</svg>" }

func maxOf(pts [][2]float64, k int) float64 {
	m := 0.0
	for _, q := range pts {
		if !math.IsNaN(q[k]) && !math.IsInf(q[k], 0) {
			m = math.Max(m, q[k])
		}
	}
	return m
}

func (r *Report) timePlots() []string {
	if len(r.Series) == 0 {
		return nil
	}
	iv := r.Options.Interval.Seconds()
	var tok, infl, ttft50, ttft99 [][2]float64
	for _, s := range r.Series {
		mid := s.StartS + iv/2
		tok = append(tok, [2]float64{mid, s.OutputTokensPerS})
		infl = append(infl, [2]float64{mid, s.Inflight})
		ttft50 = append(ttft50, [2]float64{mid, s.TTFTP50})
		ttft99 = append(ttft99, [2]float64{mid, s.TTFTP99})
	}
	xhi := r.Series[len(r.Series)-1].StartS + iv
	t := r.Throughput
	window := func(p *svgPlot) {
		if !math.IsNaN(t.WindowStartS) {
			p.band(t.WindowStartS, t.WindowEndS, "steady-state window")
		}
	}
	p1 := newPlot("plot-throughput", fmt.Sprintf("Output tokens/s per %v interval", r.Options.Interval), "time since run start (s)", "tok/s", 0, xhi, false, 0, maxOf(tok, 1)*1.1, false)
	window(p1)
	p1.line(tok, "s1")
	if !math.IsNaN(t.SustainedOutputTokensPerS) {
		p1.hline(t.SustainedOutputTokensPerS, "ref", fmt.Sprintf("sustained %.1f tok/s", t.SustainedOutputTokensPerS))
	}
	p2 := newPlot("plot-inflight", "Requests in flight (time-averaged per interval)", "time since run start (s)", "requests", 0, xhi, false, 0, maxOf(infl, 1)*1.1, false)
	window(p2)
	p2.line(infl, "s2")
	p3 := newPlot("plot-ttft-time", "TTFT of requests sent in each interval", "time since run start (s)", "ms", 0, xhi, false, 0, maxOf(ttft99, 1)*1.1, false)
	window(p3)
	p3.line(ttft50, "s1")
	p3.line(ttft99, "s3")
	p3.legend([2]string{"s1", "p50"}, [2]string{"s3", "p99"})
	return append([]string{p1.String(), p2.String(), p3.String()}, r.serverPlots(xhi, window)...)
}

func (r *Report) cdfPlot(id, title string, curve [][2]float64, q stats.Quantiles, slo float64) string {
	if len(curve) == 0 {
		return ""
	}
	lo, hi := math.Max(curve[0][0], 1e-3), curve[len(curve)-1][0]
	logx := hi/lo > 50
	if !logx {
		lo = 0
	}
	p := newPlot(id, title, "ms"+map[bool]string{true: " (log scale)", false: ""}[logx], "fraction of requests ≤ x", lo, math.Max(hi, lo*1.01), logx, 0, 1, false)
	p.line(curve, "s1")
	p.vline(q.P50, "ref", "p50")
	p.vline(q.P99, "ref", "p99")
	if slo > 0 {
		p.vline(slo, "slo", "SLO")
	}
	return p.String()
}

func (r *Report) promptPlot() string {
	if len(r.promptTTFT) == 0 {
		return ""
	}
	lo, hi := math.Inf(1), 0.0
	for _, q := range r.promptTTFT {
		lo, hi = math.Min(lo, q[0]), math.Max(hi, q[0])
	}
	lo = math.Max(1, lo)
	hi = math.Max(hi, lo*2)
	ymax := r.TTFT.P999 * 1.2
	if ymax <= 0 {
		ymax = r.TTFT.Max + 1
	}
	p := newPlot("plot-ttft-prompt", fmt.Sprintf("TTFT by prompt length (%d of %d ok requests)", len(r.promptTTFT), r.TTFT.N), "prompt tokens (log scale)", "TTFT ms", lo, hi, true, 0, ymax, false)
	p.dots(r.promptTTFT, "dot")
	var p50, p99 [][2]float64
	for _, b := range r.ByPrompt {
		if b.TTFT.N == 0 {
			continue
		}
		x := math.Max(float64(b.Lo), lo)
		if b.Hi > 0 {
			x = math.Sqrt(math.Max(float64(b.Lo), lo) * float64(b.Hi))
		}
		p50 = append(p50, [2]float64{x, b.TTFT.P50})
		p99 = append(p99, [2]float64{x, b.TTFT.P99})
	}
	p.line(p50, "s1")
	p.line(p99, "s3")
	p.legend([2]string{"s1", "bucket p50"}, [2]string{"s3", "bucket p99"})
	if r.Options.SLO.TTFT > 0 {
		p.hline(float64(r.Options.SLO.TTFT)/1e6, "slo", "TTFT SLO")
	}
	return p.String()
}

func (r *Report) attainmentPlot(id, title string, bs []Bucket) string {
	if r.Goodput == nil || len(bs) == 0 {
		return ""
	}
	p := newPlot(id, title, "", "% meeting every SLO", 0, float64(len(bs)), false, 0, 100, false)
	w := (plotW - padL - padR) / float64(len(bs))
	for i, b := range bs {
		if math.IsNaN(b.Attainment) {
			continue
		}
		x := padL + float64(i)*w
		y := p.y.px(b.Attainment)
		fmt.Fprintf(&p.b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %.1f%% of %d</title></rect>`,
			x+w*0.15, y, w*0.7, plotH-padB-y, html.EscapeString(b.Label()), b.Attainment, b.Requests)
		fmt.Fprintf(&p.b, `<text class="tick" x="%.1f" y="%g" text-anchor="middle">%s</text>`, x+w/2, plotH-padB+30, html.EscapeString(b.Label()))
		fmt.Fprintf(&p.b, `<text class="note" x="%.1f" y="%.1f" text-anchor="middle">%.0f%%</text>`, x+w/2, y-3, b.Attainment)
	}
	// The x ticks of a bar chart are the labels above, not numbers: hide the numeric ones.
	return strings.Replace(p.String(), `<svg class="plot"`, `<svg class="plot bars"`, 1)
}

const htmlStyle = `body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0}td,th{padding:3px 10px;text-align:right;border-bottom:1px solid #ddd}
th:first-child,td:first-child{text-align:left}.grid-2{display:flex;flex-wrap:wrap;gap:16px}
svg.plot{background:#fff;border:1px solid #ddd}svg .title{font-weight:600;font-size:13px}
svg .tick,svg .note{font-size:10px;fill:#555}svg .label{font-size:11px;fill:#333}
svg .grid{stroke:#eee}svg .frame{fill:none;stroke:#999}svg .band{fill:#2a7;opacity:.08}
svg .s1,svg .s2,svg .s3,svg .ref,svg .slo{fill:none;stroke-width:1.6}svg .s1{stroke:#1f5fbf}svg .s2{stroke:#2a7f3f}svg .s3{stroke:#d0542a}
svg .ref{stroke:#888;stroke-dasharray:4 3;stroke-width:1}svg .slo{stroke:#c00;stroke-dasharray:6 3;stroke-width:1.2}
svg .dot{fill:#1f5fbf;opacity:.35}svg .bar{fill:#1f5fbf}svg.bars>text.tick[y="236"]{display:none}
.warn{color:#a40}.flag{font-weight:600}`

// The check script: every plot must have a laid-out box and drawn marks; the result goes into
// #render-check for the headless-browser test.
const htmlScript = `(function(){var ps=document.querySelectorAll('svg.plot'),ok=0,bad=[];
ps.forEach(function(s){var b=s.getBBox(),m=s.querySelectorAll('polyline,circle,rect.bar').length;
if(b.width>0&&b.height>0&&m>0){ok++}else{bad.push(s.id)}});
var e=document.getElementById('render-check');e.textContent='plots rendered: '+ok+' of '+ps.length+(bad.length?' (empty: '+bad.join(', ')+')':'');
e.setAttribute('data-rendered',String(ok));e.setAttribute('data-plots',String(ps.length));})();`

// WriteHTML writes the self-contained HTML report.
func (r *Report) WriteHTML(w io.Writer) error {
	bw := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }
	e := html.EscapeString
	var text strings.Builder
	r.WriteText(&text)
	title := "llmreplay report"
	if len(r.Runs) > 0 && r.Runs[0].Model != "" {
		title += ": " + r.Runs[0].Model
	}
	p("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>%s</title>\n", e(title))
	p("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n")
	p("<style>%s</style></head><body>\n<h1>%s</h1>\n", htmlStyle, e(title))
	t := r.Throughput
	q := r.Requests
	p("<table><tr><th>requests</th><td>%d total, %d ok, %d failed, %d dropped, %d canceled</td></tr>\n", q.Total, q.OK, q.Failed, q.Dropped, q.Canceled)
	p("<tr><th>overall output tok/s</th><td>%s (over %s s)</td></tr>\n", f2(t.OutputTokensPerS), f3(t.DurationS))
	p("<tr><th>sustained output tok/s</th><td>%s in [%s s, %s s)</td></tr>\n", f2(t.SustainedOutputTokensPerS), f3(t.WindowStartS), f3(t.WindowEndS))
	p("<tr><th>peak 1 s output tok/s</th><td>%s</td></tr>\n", f2(t.PeakOutputTokensPerS))
	if g := r.Goodput; g != nil {
		p("<tr><th>goodput (%s)</th><td>%s req/s, %s tok/s, attainment %s</td></tr>\n", e(g.SLO.String()), f3(g.RequestsPerS), f2(g.OutputTokensPerS), pct(g.Attainment))
	}
	if r.Closed != nil {
		p("<tr><th>client-limited</th><td class=\"flag\">%s</td><td>judged on the %s</td></tr>", yesno(r.Flags.ClientLimited), e(r.basis()))
	} else {
		p("<tr><th>client-limited</th><td class=\"flag\">%s</td></tr>", yesno(r.Flags.ClientLimited))
	}
	p("<tr><th>overloaded</th><td class=\"flag\">%s</td></tr>", yesno(r.Flags.Overloaded))
	if b := r.Buffered; b.Streams > 0 {
		p("<tr><th>stream buffered</th><td class=\"flag\">%s</td><td>%d of %d streams arrived %g or more chunks per read, %s ms or more apart</td></tr>", yesno(b.Flagged), b.Bursty, b.Streams, BufferedChunksPerRead, f3(b.GapBoundMS))
	}
	if c := r.Conversations; c != nil && c.Sessions != nil {
		p("<tr><th>reshaped by the server</th><td class=\"flag\">%s</td></tr>", yesno(c.Sessions.Reshaped))
	}
	p("</table>\n")
	if rp := r.Repeats; rp != nil {
		rp.writeHTML(p, e)
	}
	p("<h2>Latency, ms</h2><table><tr><th></th><th>n</th><th>mean</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>p99.9</th><th>max</th></tr>\n")
	for _, m := range []struct {
		n string
		q stats.Quantiles
	}{{"TTFT", r.TTFT}, {"TPOT", r.TPOT}, {"ITL (per chunk)", r.ITL}, {"ITL (per token)", r.ITLPerToken}, {"E2E", r.E2E}, {"schedule lateness", r.Lateness}} {
		if m.q.N == 0 {
			continue
		}
		p("<tr><td>%s</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
			m.n, m.q.N, f3(m.q.Mean), f3(m.q.P50), f3(m.q.P90), f3(m.q.P95), f3(m.q.P99), f3(m.q.P999), f3(m.q.Max))
	}
	p("</table><p>Percentiles: %s.</p>\n", e(PercentileMethod))
	p("<h2>Per-user speed, tok/s</h2><table><tr><th></th><th>n</th><th>mean</th><th>p50</th><th>p10</th><th>p1</th><th>min</th></tr>\n")
	for _, m := range []struct {
		n string
		s Speeds
	}{{"output tokens / (E2E − TTFT)", r.PerUser.TokensPerS}, {"1 / TPOT", r.PerUser.InvTPOT}} {
		p("<tr><td>%s</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
			m.n, m.s.N, f2(m.s.Mean), f2(m.s.P50), f2(m.s.P10), f2(m.s.P1), f2(m.s.Min))
	}
	p("</table><p>Each ok request with more than one output token; the slow tail (p10, p1, min) is the one that matters for a speed.</p>\n")
	if c := r.Closed; c != nil {
		u := r.PerUser
		p("<h2>Closed loop</h2><table><tr><th>concurrency</th><td>%d</td></tr><tr><th>ramp-up</th><td>%s s</td></tr>\n", c.Concurrency, f3(c.RampUpS))
		p("<tr><th>requests/s</th><td>%s</td></tr><tr><th>output tok/s</th><td>%s overall, %s sustained</td></tr>\n",
			f3(t.RequestsPerS), f2(t.OutputTokensPerS), f2(t.SustainedOutputTokensPerS))
		p("<tr><th>per-user tok/s</th><td>%s mean, %s p50 (1/TPOT %s mean, %s p50)</td></tr>\n", f2(u.TokensPerS.Mean), f2(u.TokensPerS.P50), f2(u.InvTPOT.Mean), f2(u.InvTPOT.P50))
		p("<tr><th>first wave</th><td>%d requests, sent in %s ms</td></tr></table>\n", c.FirstWaveRequests, f1(c.FirstWaveSendS*1e3))
		p("<table><tr><th>schedule lateness, ms</th><th>n</th><th>mean</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>p99.9</th><th>max</th></tr>\n")
		for _, m := range []struct {
			n string
			q stats.Quantiles
		}{{"first wave", c.FirstWaveLateness}, {"steady state (judged for client-limited)", c.SteadyLateness}} {
			if m.q.N == 0 {
				p("<tr><td>%s</td><td>0</td><td>-</td></tr>\n", m.n)
				continue
			}
			p("<tr><td>%s</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
				m.n, m.q.N, f3(m.q.Mean), f3(m.q.P50), f3(m.q.P90), f3(m.q.P95), f3(m.q.P99), f3(m.q.P999), f3(m.q.Max))
		}
		p("</table>\n")
	}
	if c := r.Conversations; c != nil {
		pc := c.PrefixCache
		best := "unknown (the trace has no prefix blocks)"
		if !math.IsNaN(pc.BestRate) {
			best = pct(100*pc.BestRate) + " (" + bestRuleText(pc.BestRule) + ")"
			if pc.AboveBest() {
				best += ": the measured rate is ABOVE it (the server had these prompts cached before the run, or a bug)"
			}
		}
		p("<h2>Conversations</h2><table><tr><th>prefix-cache hit rate</th><td>%s of %d prompt tokens over %d ok requests whose server said</td></tr>\n",
			pct(100*pc.HitRate), pc.PromptTokens, pc.Requests)
		p("<tr><th>best the replay allows</th><td>%s</td></tr>\n", e(best))
		if o := c.Overlap; o != nil {
			p("<tr><th>turns sent before their predecessor's answer ended</th><td>%d of %d later turns (%s)</td></tr>\n",
				o.Overlapped, o.Turns, pct(100*o.Share))
		}
		if w := c.Sessions; w != nil {
			p("<tr><th>turns that waited</th><td>%d of %d (%s); p50 %s ms, p99 %s ms; %d over %v</td></tr>\n",
				w.Waited, w.Turns, pct(100*w.WaitedShare), f3(w.Wait.P50), f3(w.Wait.P99), w.OverBound, w.Bound)
		}
		p("</table>\n")
		for _, bd := range []struct {
			title string
			bs    []CacheBucket
		}{{"turn", pc.ByTurn}, {"prompt tokens", pc.ByPrompt}} {
			if len(bd.bs) == 0 || pc.Requests == 0 {
				continue
			}
			p("<table><tr><th>%s</th><th>n</th><th>cached</th><th>prompt</th><th>hit rate</th></tr>\n", bd.title)
			for _, b := range bd.bs {
				label := Bucket{Lo: b.Lo, Hi: b.Hi}.Label()
				if bd.title == "turn" {
					label = fmt.Sprint(b.Lo)
					if b.Hi == 0 {
						label = fmt.Sprintf(">= %d", b.Lo)
					}
				}
				p("<tr><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td></tr>\n", e(label), b.Requests, b.CachedTokens, b.PromptTokens, pct(100*b.HitRate))
			}
			p("</table>\n")
		}
	}
	if len(r.Warnings) > 0 {
		p("<h2>Warnings</h2><ul>")
		for _, w := range r.Warnings {
			p("<li class=\"warn\">%s</li>", e(w))
		}
		p("</ul>\n")
	}
	p("<h2>Over time</h2><div class=\"grid-2\">\n")
	for _, s := range r.timePlots() {
		p("%s\n", s)
	}
	p("</div><h2>Distributions</h2><div class=\"grid-2\">\n")
	p("%s\n", r.cdfPlot("plot-ttft-cdf", "TTFT distribution (CDF)", r.ttftCurve, r.TTFT, float64(r.Options.SLO.TTFT)/1e6))
	p("%s\n", r.cdfPlot("plot-tpot-cdf", "TPOT distribution (CDF)", r.tpotCurve, r.TPOT, float64(r.Options.SLO.TPOT)/1e6))
	p("%s\n", r.promptPlot())
	p("</div>\n")
	if r.Goodput != nil {
		p("<h2>SLO attainment by bucket</h2><div class=\"grid-2\">\n%s\n%s\n</div>\n",
			r.attainmentPlot("plot-att-prompt", "SLO attainment by prompt length (tokens)", r.ByPrompt),
			r.attainmentPlot("plot-att-output", "SLO attainment by target output length (tokens)", r.ByOutput))
	} else {
		p("<h2>SLO attainment by bucket</h2><p>No SLO given (use --slo ttft=..,tpot=..,e2e=..).</p>\n")
	}
	p("<h2>Full text report</h2><pre>%s</pre>\n", e(text.String()))
	p("<p id=\"render-check\" data-rendered=\"0\">plots not checked (scripts disabled)</p>\n<script>%s</script>\n</body></html>\n", htmlScript)
	return bw.Flush()
}

// WriteHTMLFile writes the HTML report to path through a temporary file.
func (r *Report) WriteHTMLFile(path string) error {
	return writeAtomic(path, r.WriteHTML)
}
