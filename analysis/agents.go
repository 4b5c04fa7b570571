package analysis

import (
	"fmt"
	"math"
	"strings"

	"github.com/llmreplay/llmreplay/analysis/agent"
	"github.com/llmreplay/llmreplay/analysis/conversation"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/analysis/plot"
	"github.com/llmreplay/llmreplay/stats"
)

// The agent section of a report: package analysis/agent computes it, its headline figures
// are declared in figures.go (agent_*), and this file renders the rest. A run without
// agent calls has no section: its text, JSON and HTML reports are what they were.

func hasAgents(r *Report) bool { return r.Agents != nil }

// agentCount is a count of the agent section: agents.KEY without its agent_ prefix in the
// JSON, its key as summary column (0 without agents).
func agentCount(key string, get func(*agent.Report) int64) Figure {
	return Figure{Key: key, JSON: "agents." + strings.TrimPrefix(key, "agent_"), Column: key, Present: hasAgents,
		Value: func(r *Report) any {
			if r.Agents == nil {
				return int64(0)
			}
			return get(r.Agents)
		}}
}

// agentDist is a distribution over the complete sessions (units: their sorted values,
// which compare resamples); json is its key in agents, and with agent_ its summary column.
func agentDist(key, unit, json, text string, cmp *CompareSpec, get func(*agent.Report) stats.Quantiles, units func(*agent.Report) []float64) Figure {
	f := Figure{Key: key, Unit: unit, JSON: "agents." + json, Column: "agent_" + json, Section: "agents", Text: text, Present: hasAgents, Compare: cmp,
		Dist: func(r *Report) stats.Quantiles {
			if r.Agents == nil {
				return stats.Quantiles{}
			}
			return get(r.Agents)
		}}
	if units != nil {
		f.Units = func(r *Report) []float64 { return units(r.Agents) }
	}
	return f
}

// agentScalar is a number of the agent section (NaN without agents), at agents.JSON; text
// "" keeps it out of the text section.
func agentScalar(key, json, text string, format func(float64) string, note func(*Report) string, get func(*agent.Report) float64) Figure {
	return Figure{Key: key, JSON: "agents." + json, Column: key, Section: "agents", Text: text, Format: format, Note: note, Present: hasAgents,
		Value: func(r *Report) any {
			if r.Agents == nil {
				return math.NaN()
			}
			return get(r.Agents)
		}}
}

// pct100 prints a fraction as a percentage; f0 a whole number.
func pct100(v float64) string { return pct(100 * v) }

func f0(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

func llmShareNote(r *Report) string {
	a := r.Agents
	return fmt.Sprintf("recorded %s; LLM time %s s, gap time %s s (recorded %s s, %s s)", pct100(a.RecordedLLMShare),
		f3(a.LLMTimeS), f3(a.GapTimeS), f3(a.RecordedLLMTimeS), f3(a.RecordedGapTimeS))
}

func agentCacheNote(r *Report) string {
	c := r.Agents.Cache
	return fmt.Sprintf("over %d calls whose server said; production %s over %d calls; the replay allows %s",
		c.Calls, pct100(c.RecordedShare), c.RecordedCalls, pct100(c.BestRate))
}

func peakAtNote(at func(*agent.Report) float64) func(*Report) string {
	return func(r *Report) string {
		if t := at(r.Agents); !math.IsNaN(t) {
			return "at " + f3(t) + " s"
		}
		return ""
	}
}

// agents computes r.Agents, with its warnings; it runs after conversations.
func (r *Report) agents(d *decode.Data) {
	best, _ := conversation.BestRate(d)
	a := agent.Analyze(d, r.Options.Interval, best)
	if a == nil {
		return
	}
	r.Agents = a
	if a.Incomplete > 0 {
		r.warnf("%d of %d agent sessions incomplete (%d with a failed call, %d with a dropped call, %d with a canceled call): left out of the makespan, slowdown and LLM-time figures",
			a.Incomplete, a.Sessions, a.WithFailed, a.WithDropped, a.WithCanceled)
	}
	if len(d.Runs) > 0 && d.Runs[0].Speedup > 0 && d.Runs[0].Speedup != 1 {
		r.warnf("agent slowdown is against the trace's own times, but this run was replayed at speedup %gx: first calls came earlier, and scaled gaps shorter, than recorded", d.Runs[0].Speedup)
	}
	if a.Cache.Calls > 0 && !math.IsNaN(a.Cache.BestRate) && a.Cache.HitRate > a.Cache.BestRate+0.005 {
		r.warnf("agent prefix-cache hit rate %s above the best the replay allows (%s): a server that cached these prompts before the run, or a bug",
			pct100(a.Cache.HitRate), pct100(a.Cache.BestRate))
	}
}

// contextLabel is a context bucket's label: "<= 8k", "> 128k".
func contextLabel(b agent.ContextBucket) string {
	if b.Hi == 0 {
		return fmt.Sprintf("> %dk", b.Lo>>10)
	}
	return fmt.Sprintf("<= %dk", b.Hi>>10)
}

// writeTextAgents writes the agent section.
func (r *Report) writeTextAgents(p func(string, ...any)) {
	a := r.Agents
	if a == nil {
		return
	}
	p("\nAgents: %d sessions (%d complete; %d incomplete: %d with a failed call, %d with a dropped call, %d with a canceled call), %d calls\n",
		a.Sessions, a.Complete, a.Incomplete, a.WithFailed, a.WithDropped, a.WithCanceled, a.Calls)
	p("  makespan: first sent to last end of a complete session; recorded: the trace's arrivals and durations; LLM time: the union of its calls\n")
	p("  %-32s %9s %10s %10s %10s %10s %10s %10s %10s\n", "", "n", "mean", "p50", "p90", "p95", "p99", "p99.9", "max")
	for _, f := range sectionFigures(r, "agents") {
		if f.Dist != nil {
			latencyRowW(p, 32, f.Text, f.Dist(r))
		}
	}
	r.writeSection(p, "agents")
	p("  TTFT by context length (prompt tokens), ms\n")
	p("  %-12s %9s %10s %10s %10s\n", "", "n", "p50", "p90", "p99")
	for _, b := range a.TTFTByContext {
		if b.TTFT.N == 0 {
			p("  %-12s %9d %10s %10s %10s\n", contextLabel(b), 0, "-", "-", "-")
			continue
		}
		p("  %-12s %9d %10s %10s %10s\n", contextLabel(b), b.TTFT.N, f3(b.TTFT.P50), f3(b.TTFT.P90), f3(b.TTFT.P99))
	}
}

// agentsJSON is the JSON report's "agents" object: the declared figures under agents,
// then the section's other members.
func (r *Report) agentsJSON() Object {
	a := r.Agents
	o := figureObject(r, "agents")
	set := func(path string, v any) { o.setPath(path, v) }
	set("incomplete.with_failed", a.WithFailed)
	set("incomplete.with_dropped", a.WithDropped)
	set("incomplete.with_canceled", a.WithCanceled)
	for _, t := range []struct {
		key string
		v   float64
	}{{"llm_time_s", a.LLMTimeS}, {"gap_time_s", a.GapTimeS}, {"recorded_llm_time_s", a.RecordedLLMTimeS}, {"recorded_gap_time_s", a.RecordedGapTimeS},
		{"peak_live_sessions_at_s", a.PeakSessionsAtS}, {"peak_calls_in_flight_at_s", a.PeakCallsAtS}} {
		set(t.key, Num(t.v))
	}
	c := a.Cache
	set("cache.calls", c.Calls)
	set("cache.cached_tokens", c.CachedTokens)
	set("cache.prompt_tokens", c.PromptTokens)
	set("cache.recorded_calls", c.RecordedCalls)
	set("cache.recorded_cached_tokens", c.RecordedCachedTokens)
	set("cache.recorded_prompt_tokens", c.RecordedPromptTokens)
	type bucket struct {
		Lo    int64         `json:"lo"`
		Hi    *int64        `json:"hi"`
		Calls int64         `json:"calls"`
		TTFT  jsonQuantiles `json:"ttft_ms"`
	}
	bs := []bucket{}
	for _, b := range a.TTFTByContext {
		x := bucket{Lo: b.Lo, Calls: b.TTFT.N, TTFT: jq(b.TTFT)}
		if b.Hi != 0 {
			hi := b.Hi
			x.Hi = &hi
		}
		bs = append(bs, x)
	}
	set("ttft_by_context", bs)
	type point struct {
		StartS        Num `json:"start_s"`
		LiveSessions  Num `json:"live_sessions"`
		CallsInFlight Num `json:"calls_in_flight"`
	}
	pts := []point{}
	for _, q := range a.Series {
		pts = append(pts, point{Num(q.StartS), Num(q.LiveSessions), Num(q.CallsInFlight)})
	}
	set("series_interval_s", Num(a.IntervalS))
	set("series", pts)
	return o
}

// agentsHTML is the HTML report's agent section; nil without agents.
type agentsHTML struct {
	Rows, Dists, Contexts []htmlRow
}

func (agentsHTML) Header() []string {
	return []string{"", "n", "mean", "p50", "p90", "p95", "p99", "p99.9", "max"}
}

func (agentsHTML) ContextHeader() []string {
	return []string{"TTFT by context length (prompt tokens), ms", "n", "p50", "p90", "p99"}
}

func (r *Report) agentsHTML() *agentsHTML {
	a := r.Agents
	if a == nil {
		return nil
	}
	h := &agentsHTML{Rows: []htmlRow{kvRow("sessions", fmt.Sprintf("%d (%d complete; %d incomplete: %d with a failed call, %d with a dropped call, %d with a canceled call), %d calls",
		a.Sessions, a.Complete, a.Incomplete, a.WithFailed, a.WithDropped, a.WithCanceled, a.Calls), true)}}
	for _, f := range sectionFigures(r, "agents") {
		if f.Dist != nil {
			h.Dists = append(h.Dists, quantileRow(f.Text, f.Dist(r)))
			continue
		}
		cell := f.Format(f.float(r))
		if f.Note != nil {
			cell += " (" + f.Note(r) + ")"
		}
		h.Rows = append(h.Rows, kvRow(f.Text, cell, true))
	}
	for _, b := range a.TTFTByContext {
		if b.TTFT.N == 0 {
			h.Contexts = append(h.Contexts, dataRow(contextLabel(b), "0", "-", "-", "-"))
			continue
		}
		h.Contexts = append(h.Contexts, dataRow(contextLabel(b), fmt.Sprint(b.TTFT.N), f3(b.TTFT.P50), f3(b.TTFT.P90), f3(b.TTFT.P99)))
	}
	return h
}

// agentPlot is live sessions and calls in flight over time; nil without agents.
func (r *Report) agentPlot() *Plot {
	a := r.Agents
	if a == nil || len(a.Series) == 0 {
		return nil
	}
	var live, calls [][2]float64
	for _, q := range a.Series {
		mid := q.StartS + a.IntervalS/2
		live, calls = append(live, [2]float64{mid, q.LiveSessions}), append(calls, [2]float64{mid, q.CallsInFlight})
	}
	xhi := a.Series[len(a.Series)-1].StartS + a.IntervalS
	p := plot.New("plot-agents", "Agent sessions live and calls in flight (time-averaged per interval)", "time since run start (s)", "count",
		0, xhi, false, 0, math.Max(plot.MaxOf(live, 1), plot.MaxOf(calls, 1))*1.1, false)
	p.Line(live, "s1")
	p.Line(calls, "s2")
	p.Legend([2]string{"s1", "live sessions"}, [2]string{"s2", "calls in flight"})
	return p
}
