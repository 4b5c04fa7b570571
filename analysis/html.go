package analysis

import (
	"github.com/llmreplay/llmreplay/analysis/plot"
	"slices"

	"github.com/llmreplay/llmreplay/stats"

	"bufio"
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
)

// The HTML report is one self-contained page: inline CSS, SVG plots drawn here in Go, and a
// few lines of inline script that only check the plots rendered (a marker the browser test
// reads). It loads nothing from the network.

func (r *Report) timePlots() []*Plot {
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
	window := func(p *Plot) {
		if !math.IsNaN(t.WindowStartS) {
			p.Band(t.WindowStartS, t.WindowEndS, "steady-state window")
		}
	}
	title, unit, sustained := fmt.Sprintf("Output tokens/s per %v interval", r.Options.Interval), "tok/s", t.SustainedOutputTokensPerS
	if u := r.Unary; u != nil { // no output: the requests completed
		tok = tok[:0]
		for _, s := range r.Series {
			tok = append(tok, [2]float64{s.StartS + iv/2, float64(s.Completed) / iv})
		}
		title, unit, sustained = fmt.Sprintf("Requests completed/s per %v interval", r.Options.Interval), "req/s", u.SustainedRequestsPerS
	}
	p1 := plot.New("plot-throughput", title, "time since run start (s)", unit, 0, xhi, false, 0, plot.MaxOf(tok, 1)*1.1, false)
	window(p1)
	p1.Line(tok, "s1")
	if !math.IsNaN(sustained) {
		p1.HLine(sustained, "ref", fmt.Sprintf("sustained %.1f %s", sustained, unit))
	}
	p2 := plot.New("plot-inflight", "Requests in flight (time-averaged per interval)", "time since run start (s)", "requests", 0, xhi, false, 0, plot.MaxOf(infl, 1)*1.1, false)
	window(p2)
	p2.Line(infl, "s2")
	p3 := plot.New("plot-ttft-time", r.firstName()+" of requests sent in each interval", "time since run start (s)", "ms", 0, xhi, false, 0, plot.MaxOf(ttft99, 1)*1.1, false)
	window(p3)
	p3.Line(ttft50, "s1")
	p3.Line(ttft99, "s3")
	p3.Legend([2]string{"s1", "p50"}, [2]string{"s3", "p99"})
	ps := append([]*Plot{p1, p2, p3}, r.serverPlots(xhi, window)...)
	if p := r.agentPlot(); p != nil {
		ps = append(ps, p)
	}
	return ps
}

func (r *Report) cdfPlot(id, title string, curve [][2]float64, q stats.Quantiles, slo float64) *Plot {
	if len(curve) == 0 {
		return nil
	}
	lo, hi := math.Max(curve[0][0], 1e-3), curve[len(curve)-1][0]
	logx := hi/lo > 50
	if !logx {
		lo = 0
	}
	p := plot.New(id, title, "ms"+map[bool]string{true: " (log scale)", false: ""}[logx], "fraction of requests ≤ x", lo, math.Max(hi, lo*1.01), logx, 0, 1, false)
	p.Line(curve, "s1")
	p.VLine(q.P50, "ref", "p50")
	p.VLine(q.P99, "ref", "p99")
	if slo > 0 {
		p.VLine(slo, "slo", "SLO")
	}
	return p
}

func (r *Report) promptPlot() *Plot {
	if len(r.promptTTFT) == 0 {
		return nil
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
	p := plot.New("plot-ttft-prompt", fmt.Sprintf("TTFT by prompt length (%d of %d ok requests)", len(r.promptTTFT), r.TTFT.N), "prompt tokens (log scale)", "TTFT ms", lo, hi, true, 0, ymax, false)
	p.Dots(r.promptTTFT, "dot")
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
	p.Line(p50, "s1")
	p.Line(p99, "s3")
	p.Legend([2]string{"s1", "bucket p50"}, [2]string{"s3", "bucket p99"})
	if r.Options.SLO.TTFT > 0 {
		p.HLine(float64(r.Options.SLO.TTFT)/1e6, "slo", "TTFT SLO")
	}
	return p
}

func (r *Report) attainmentPlot(id, title string, bs []Bucket) *Plot {
	if r.Goodput == nil || len(bs) == 0 {
		return nil
	}
	p := plot.New(id, title, "", "% meeting every SLO", 0, float64(len(bs)), false, 0, 100, false)
	// The x ticks of a bar chart are the labels under the bars, not numbers: the style
	// hides the numeric ones.
	p.Class = "plot bars"
	for i, b := range bs {
		if math.IsNaN(b.Attainment) {
			continue
		}
		p.Bar(i, len(bs), b.Attainment, b.Label(), fmt.Sprintf("%s: %.1f%% of %d", b.Label(), b.Attainment, b.Requests))
	}
	return p
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

// reportPage is what reportTemplate reads.
type reportPage struct {
	Title string
	// Alerts are sentences shown before any figure: a verdict that changes what every
	// figure means (promptOffAlert).
	Alerts           []string
	Style            template.CSS
	Script           template.JS
	Summary          []htmlRow
	Repeats          *repeatsHTML
	Latency, PerUser []htmlRow
	PercentileMethod string
	Closed           *closedHTML
	Conversations    *conversationsHTML
	Agents           *agentsHTML
	Warnings         []string
	TimePlots        []*Plot
	Distributions    []*Plot // nil ones are left out
	SLO              bool
	Attainment       []*Plot
	Text             string
}

type closedHTML struct{ Rows, Lateness []htmlRow }

// conversationsHTML: Overlap is the turn-overlap row's value ("" for none), between Rows
// and Sessions.
type conversationsHTML struct {
	Rows, Sessions []htmlRow
	Overlap        string
	Buckets        []bucketTable
}

type bucketTable struct {
	Title string
	Rows  []htmlRow
}

// htmlHead is the head of every page.
const htmlHead = `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<style>{{.Style}}</style></head><body>
`

// htmlFoot is the render check's marker and script, and the page's end.
const htmlFoot = `<p id="render-check" data-rendered="0">plots not checked (scripts disabled)</p>
<script>{{.Script}}</script>
</body></html>
`

var reportTemplate = pageTemplate(htmlHead + `<h1>{{.Title}}</h1>
{{range .Alerts}}<p class="warn flag">{{.}}</p>
{{end}}<table>{{template "rows" .Summary}}</table>
{{with .Repeats}}<h2>Repeats: {{.N}} of {{.Count}}, group {{.Group}}</h2><table>{{template "header" .Header}}{{template "rows" .Rows}}` +
	`</table><p>Pooled: latencies over every repeat's requests, rates over the repeats' own windows and durations; median and range across the repeats (docs/metrics.md, "Repeats").</p>
{{end}}<h2>Latency, ms</h2><table>{{template "header" .LatencyHeader}}{{template "rows" .Latency}}</table><p>Percentiles: {{.PercentileMethod}}.</p>
{{if .PerUser}}<h2>Per-user speed, tok/s</h2><table>{{template "header" .PerUserHeader}}{{template "rows" .PerUser}}` +
	`</table><p>Each ok request with more than one output token; the slow tail (p10, p1, min) is the one that matters for a speed.</p>
{{end}}{{with .Closed}}<h2>Closed loop</h2><table>{{template "rows" .Rows}}</table>
<table>{{template "header" .Header}}{{template "rows" .Lateness}}</table>
{{end}}{{with .Conversations}}<h2>Conversations</h2><table>{{template "rows" .Rows}}` +
	`{{with .Overlap}}<tr><th>turns sent before their predecessor's answer ended</th><td>{{.}}</td></tr>{{"\n"}}{{end}}{{template "rows" .Sessions}}</table>
{{range .Buckets}}<table>{{template "header" .Header}}{{template "rows" .Rows}}</table>
{{end}}{{end}}{{with .Agents}}<h2>Agents</h2><table>{{template "rows" .Rows}}</table>
<table>{{template "header" .Header}}{{template "rows" .Dists}}</table>
<table>{{template "header" .ContextHeader}}{{template "rows" .Contexts}}</table>
{{end}}{{with .Warnings}}<h2>Warnings</h2><ul>{{range .}}<li class="warn">{{.}}</li>{{end}}</ul>
{{end}}<h2>Over time</h2><div class="grid-2">
{{range .TimePlots}}{{template "svg" .}}
{{end}}</div><h2>Distributions</h2><div class="grid-2">
{{range .Distributions}}{{with .}}{{template "svg" .}}{{end}}
{{end}}</div>
{{if .SLO}}<h2>SLO attainment by bucket</h2><div class="grid-2">
{{range .Attainment}}{{with .}}{{template "svg" .}}{{end}}
{{end}}</div>
{{else}}<h2>SLO attainment by bucket</h2><p>No SLO given (use --slo ttft=..,tpot=..,e2e=..).</p>
{{end}}<h2>Full text report</h2><pre>{{.Text}}</pre>
` + htmlFoot)

// WriteHTML writes the self-contained HTML report.
func (r *Report) WriteHTML(w io.Writer) error {
	var text strings.Builder
	if err := r.WriteText(&text); err != nil {
		return err
	}
	title := "llmreplay report"
	if len(r.Runs) > 0 && r.Runs[0].Model != "" {
		title += ": " + r.Runs[0].Model
	}
	var alerts []string
	if a := r.promptOffAlert(); a != "" {
		alerts = append(alerts, a)
	}
	pg := reportPage{Title: title, Alerts: alerts, Style: htmlStyle, Script: htmlScript, Summary: r.summaryRows(), PercentileMethod: PercentileMethod,
		Closed: r.closedHTML(), Conversations: r.conversationsHTML(), Agents: r.agentsHTML(), Warnings: r.Warnings, TimePlots: r.timePlots(),
		Distributions: []*Plot{
			r.cdfPlot("plot-ttft-cdf", "TTFT distribution (CDF)", r.ttftCurve, r.TTFT, float64(r.Options.SLO.TTFT)/1e6),
			r.cdfPlot("plot-tpot-cdf", "TPOT distribution (CDF)", r.tpotCurve, r.TPOT, float64(r.Options.SLO.TPOT)/1e6),
			r.promptPlot()},
		SLO: r.Goodput != nil, Text: text.String()}
	if p := r.ttfaPlot(); p != nil { // beside TTFT's; no entry at all for a run that did not reason
		pg.Distributions = slices.Insert(pg.Distributions, 1, p)
	}
	if r.Unary != nil { // latency in place of TTFT and TPOT
		pg.Distributions = r.unaryPlots()
	}
	if rp := r.Repeats; rp != nil {
		pg.Repeats = rp.html()
	}
	for _, f := range sectionFigures(r, "latency") {
		if q := f.Dist(r); q.N > 0 {
			pg.Latency = append(pg.Latency, quantileRow(f.Text, q))
		}
	}
	for _, f := range sectionFigures(r, "reasoning") { // tokens, not ms: said in the label
		if q := f.Dist(r); q.N > 0 {
			pg.Latency = append(pg.Latency, quantileRow(f.Text+" per request (tokens)", q))
		}
	}
	for _, m := range []struct {
		n string
		s Speeds
	}{{"output tokens / (E2E − TTFT)", r.PerUser.TokensPerS}, {"1 / TPOT", r.PerUser.InvTPOT}} {
		if r.Unary != nil { // no output: no decode speed
			break
		}
		pg.PerUser = append(pg.PerUser, dataRow(m.n, fmt.Sprint(m.s.N), f2(m.s.Mean), f2(m.s.P50), f2(m.s.P10), f2(m.s.P1), f2(m.s.Min)))
	}
	if pg.SLO {
		pg.Attainment = []*Plot{r.attainmentPlot("plot-att-prompt", "SLO attainment by prompt length (tokens)", r.ByPrompt),
			r.attainmentPlot("plot-att-output", "SLO attainment by target output length (tokens)", r.ByOutput)}
	}
	bw := bufio.NewWriter(w)
	if err := reportTemplate.Execute(bw, pg); err != nil {
		return fmt.Errorf("analysis: html report: %w", err)
	}
	return bw.Flush()
}

// LatencyHeader and PerUserHeader are the column titles of the latency and per-user tables.
func (reportPage) LatencyHeader() []string {
	return []string{"", "n", "mean", "p50", "p90", "p95", "p99", "p99.9", "max"}
}

func (reportPage) PerUserHeader() []string {
	return []string{"", "n", "mean", "p50", "p10", "p1", "min"}
}

// Header is the closed loop's lateness table's column titles.
func (closedHTML) Header() []string {
	return []string{"schedule lateness, ms", "n", "mean", "p50", "p90", "p95", "p99", "p99.9", "max"}
}

// Header is a prefix-cache breakdown's column titles.
func (b bucketTable) Header() []string { return []string{b.Title, "n", "cached", "prompt", "hit rate"} }

// quantileRow is a latency table's row, ms.
func quantileRow(name string, q stats.Quantiles) htmlRow {
	return dataRow(name, fmt.Sprint(q.N), f3(q.Mean), f3(q.P50), f3(q.P90), f3(q.P95), f3(q.P99), f3(q.P999), f3(q.Max))
}

// summaryRows are the headline table: requests, the declared figures with an HTML label,
// goodput and the flags.
func (r *Report) summaryRows() []htmlRow {
	q := r.Requests
	rows := []htmlRow{kvRow("requests", fmt.Sprintf("%d total, %d ok, %d failed, %d dropped, %d canceled", q.Total, q.OK, q.Failed, q.Dropped, q.Canceled), true)}
	for i := range reportFigures {
		if f := &reportFigures[i]; f.HTML != "" && f.present(r) {
			cell := f.Format(f.float(r))
			if f.HTMLNote != nil {
				cell += " " + f.HTMLNote(r)
			}
			rows = append(rows, kvRow(f.HTML, cell, true))
		}
	}
	if g := r.Goodput; g != nil && r.Unary != nil {
		rows = append(rows, kvRow("goodput ("+g.SLO.String()+")", fmt.Sprintf("%s req/s, %s inputs/s, attainment %s", f3(g.RequestsPerS), f2(r.Unary.GoodInputsPerS), pct(g.Attainment)), true))
	} else if g != nil {
		rows = append(rows, kvRow("goodput ("+g.SLO.String()+")", fmt.Sprintf("%s req/s, %s tok/s, attainment %s", f3(g.RequestsPerS), f2(g.OutputTokensPerS), pct(g.Attainment)), true))
	}
	flag := func(head string, v bool, note string) {
		row := htmlRow{Head: head, Cells: []htmlCell{{Text: yesno(v), Class: "flag"}}}
		if note != "" {
			row.Cells = append(row.Cells, htmlCell{Text: note})
		}
		rows = append(rows, row)
	}
	if r.Closed != nil {
		flag("client-limited", r.Flags.ClientLimited, "judged on the "+r.basis())
	} else {
		flag("client-limited", r.Flags.ClientLimited, "")
	}
	flag("overloaded", r.Flags.Overloaded, "")
	if b := r.Buffered; b.Streams > 0 {
		flag("stream buffered", b.Flagged, fmt.Sprintf("%d of %d streams arrived %g or more chunks per read, %s ms or more apart", b.Bursty, b.Streams, BufferedChunksPerRead, f3(b.GapBoundMS)))
	}
	if t := r.Tokens; t.PromptWithServerCount > 0 {
		flag("prompt tokens off target", r.Flags.PromptOffTarget, fmt.Sprintf("server %d vs target %d prompt tokens, %s; %d of %d requests off by more than %s each",
			t.PromptServer, t.PromptTarget, signedPct(t.PromptDiffShare()), t.PromptOff, t.PromptWithServerCount, pct(100*PromptOffBound)))
	}
	if c := r.Conversations; c != nil && c.Sessions != nil {
		flag("reshaped by the server", c.Sessions.Reshaped, "")
	}
	return rows
}

// closedHTML is a closed-loop run's section; nil for an open loop.
func (r *Report) closedHTML() *closedHTML {
	c := r.Closed
	if c == nil {
		return nil
	}
	t, u := r.Throughput, r.PerUser
	h := &closedHTML{Rows: []htmlRow{kvRow("concurrency", fmt.Sprint(c.Concurrency), false), kvRow("ramp-up", f3(c.RampUpS)+" s", true),
		kvRow("requests/s", f3(t.RequestsPerS), false),
		kvRow("output tok/s", f2(t.OutputTokensPerS)+" overall, "+f2(t.SustainedOutputTokensPerS)+" sustained", true),
		kvRow("per-user tok/s", fmt.Sprintf("%s mean, %s p50 (1/TPOT %s mean, %s p50)", f2(u.TokensPerS.Mean), f2(u.TokensPerS.P50), f2(u.InvTPOT.Mean), f2(u.InvTPOT.P50)), true),
		kvRow("first wave", fmt.Sprintf("%d requests, sent in %s ms", c.FirstWaveRequests, f1(c.FirstWaveSendS*1e3)), false)}}
	for _, m := range []struct {
		n string
		q stats.Quantiles
	}{{"first wave", c.FirstWaveLateness}, {"steady state (judged for client-limited)", c.SteadyLateness}} {
		if m.q.N == 0 {
			h.Lateness = append(h.Lateness, dataRow(m.n, "0", "-"))
			continue
		}
		h.Lateness = append(h.Lateness, quantileRow(m.n, m.q))
	}
	return h
}

// conversationsHTML is the prefix cache, turn overlap and session waits; nil without them.
func (r *Report) conversationsHTML() *conversationsHTML {
	c := r.Conversations
	if c == nil {
		return nil
	}
	pc := c.PrefixCache
	best := "unknown (the trace has no prefix blocks)"
	if !math.IsNaN(pc.BestRate) {
		best = pct(100*pc.BestRate) + " (" + bestRuleText(pc.BestRule) + ")"
		if pc.AboveBest() {
			best += ": the measured rate is ABOVE it (the server had these prompts cached before the run, or a bug)"
		}
	}
	h := &conversationsHTML{Rows: []htmlRow{
		kvRow("prefix-cache hit rate", fmt.Sprintf("%s of %d prompt tokens over %d ok requests whose server said", pct(100*pc.HitRate), pc.PromptTokens, pc.Requests), true),
		kvRow("best the replay allows", best, true)}}
	if o := c.Overlap; o != nil {
		h.Overlap = fmt.Sprintf("%d of %d later turns (%s)", o.Overlapped, o.Turns, pct(100*o.Share))
	}
	if w := c.Sessions; w != nil {
		h.Sessions = append(h.Sessions, kvRow("turns that waited", fmt.Sprintf("%d of %d (%s); p50 %s ms, p99 %s ms; %d over %v",
			w.Waited, w.Turns, pct(100*w.WaitedShare), f3(w.Wait.P50), f3(w.Wait.P99), w.OverBound, w.Bound), true))
	}
	for _, bd := range []struct {
		title string
		bs    []CacheBucket
	}{{"turn", pc.ByTurn}, {"prompt tokens", pc.ByPrompt}} {
		if len(bd.bs) == 0 || pc.Requests == 0 {
			continue
		}
		t := bucketTable{Title: bd.title}
		for _, b := range bd.bs {
			label := Bucket{Lo: b.Lo, Hi: b.Hi}.Label()
			if bd.title == "turn" {
				label = fmt.Sprint(b.Lo)
				if b.Hi == 0 {
					label = fmt.Sprintf(">= %d", b.Lo)
				}
			}
			t.Rows = append(t.Rows, dataRow(label, fmt.Sprint(b.Requests), fmt.Sprint(b.CachedTokens), fmt.Sprint(b.PromptTokens), pct(100*b.HitRate)))
		}
		h.Buckets = append(h.Buckets, t)
	}
	return h
}

// WriteHTMLFile writes the HTML report to path through a temporary file.
func (r *Report) WriteHTMLFile(path string) error {
	return writeAtomic(path, r.WriteHTML)
}
