package analysis

import (
	"github.com/llmreplay/llmreplay/analysis/agent"
	"github.com/llmreplay/llmreplay/stats"

	"encoding/json"
	"fmt"
	"math"
	"strings"
)

// Figure is one headline figure of a run's report, declared once in reportFigures: the
// text and HTML reports, the JSON report, summary.parquet and compare read the
// declaration, so that adding a figure is adding one entry there (docs/metrics.md, "Adding
// a figure"). A figure is a scalar (Value) or a latency distribution (Dist), which every
// output shows as its quantiles.
type Figure struct {
	// Key names the figure in compare (a distribution's compare keys are Key_p50_ms ...).
	Key  string
	Unit string // "req/s", "tok/s", "ms", "s", "%", "x" (a ratio)
	// JSON is the figure's path in the JSON report, dot-separated ("throughput.requests_per_s",
	// "ttft_ms"): a top-level key, or a key of one of the objects built from figures
	// (figureObject: requests, throughput, goodput, breakdown.window, breakdown.duration).
	// "" keeps it out of the JSON report.
	JSON string
	// Column is its summary.parquet column (a distribution's is the prefix of its eight:
	// _n, _mean, _p50 ... _max); "" keeps it out of the summary.
	Column string
	// Section and Text: the text report's section ("throughput", "goodput", "latency") and the
	// figure's label there; Text "" keeps it out of the text report.
	Section, Text string
	// HTML is its label in the HTML report's headline table ("" for none); a distribution's
	// row in the HTML latency table takes Text.
	HTML string
	// Format prints a scalar in the text and HTML reports.
	Format func(float64) string
	// Note, when set, follows the value on its text line (the line has the note's column
	// even when the note is empty); HTMLNote follows it in its HTML cell.
	Note, HTMLNote func(*Report) string
	// Present reports whether the run defines the figure (nil: always). An absent figure
	// has no text line, no compare row and no JSON key (a JSON object of absent figures
	// only is null); its summary column holds Value's null.
	Present func(*Report) bool
	// Compare, when set, puts the figure in compare's table.
	Compare *CompareSpec
	// OnlyIfSampled: a distribution with no samples has no text row and is null in the
	// JSON report (it would repeat another one).
	OnlyIfSampled bool

	// Value returns a scalar: float64 (NaN when undefined), int64, bool or string.
	Value func(*Report) any
	// Dist returns a distribution, in Unit (ms unless said).
	Dist func(*Report) stats.Quantiles
	// Units, when set, are the sorted values of a distribution's independent units when
	// they are not requests (an agent figure's sessions): compare resamples them as
	// independent samples.
	Units func(*Report) []float64
}

// CompareSpec is how compare shows a figure. How it resamples the figure is compare's own
// (package analysis/compare); a figure compare has no resampling for shows its values with no interval.
type CompareSpec struct {
	Name string // the table's label; a distribution's rows add " p50 ms" ...
	// Relative: the change is in percent of run A's value; otherwise (figures that are
	// percentages themselves) in percentage points.
	Relative bool
	// Paired: paired runs resample this throughput's windows together (analysis/compare/compare.go,
	// throughputs); paired figures lead compare's table.
	Paired bool
}

// figureByKey returns the declared figure named key, or nil.
func figureByKey(key string) *Figure {
	for i := range reportFigures {
		if reportFigures[i].Key == key {
			return &reportFigures[i]
		}
	}
	return nil
}

// figureFloat reads the declared scalar figure key from a report (NaN for a key not
// declared: the goldens of whatever reads it would show it).
func figureFloat(key string) func(*Report) float64 {
	return func(r *Report) float64 {
		if f := figureByKey(key); f != nil && f.Value != nil {
			return f.float(r)
		}
		return math.NaN()
	}
}

// figureQuantile reads a percentile (p picks it) of the declared distribution key.
func figureQuantile(key string, p func(stats.Quantiles) float64) func(*Report) float64 {
	return func(r *Report) float64 {
		if f := figureByKey(key); f != nil && f.Dist != nil {
			return p(f.Dist(r))
		}
		return math.NaN()
	}
}

func p50(q stats.Quantiles) float64 { return q.P50 }
func p99(q stats.Quantiles) float64 { return q.P99 }

func (f *Figure) present(r *Report) bool { return f.Present == nil || f.Present(r) }

// float returns a scalar figure's value as a float64 (NaN for a string).
func (f *Figure) float(r *Report) float64 {
	switch v := f.Value(r).(type) {
	case float64:
		return v
	case int64:
		return float64(v)
	case bool:
		if v {
			return 1
		}
		return 0
	}
	return math.NaN()
}

// reportFigures are the headline figures, in the order of summary.parquet's columns (the
// JSON objects and text sections built from them keep this order too; compare's table
// puts the paired figures first).
var reportFigures = []Figure{
	countFigure("requests_total", "requests.total", func(r *Report) int64 { return r.Requests.Total }),
	countFigure("requests_ok", "requests.ok", func(r *Report) int64 { return r.Requests.OK }),
	countFigure("requests_failed", "requests.failed", func(r *Report) int64 { return r.Requests.Failed }),
	countFigure("requests_dropped", "requests.dropped", func(r *Report) int64 { return r.Requests.Dropped }),
	countFigure("requests_canceled", "requests.canceled", func(r *Report) int64 { return r.Requests.Canceled }),
	{Key: "first_sent_s", Unit: "s", JSON: "breakdown.duration.first_sent_s", Value: func(r *Report) any { return r.Throughput.FirstSentS }},
	{Key: "last_end_s", Unit: "s", JSON: "breakdown.duration.last_end_s", Value: func(r *Report) any { return r.Throughput.LastEndS }},
	{Key: "duration_s", Unit: "s", JSON: "breakdown.duration.duration_s", Column: "duration_s", Value: func(r *Report) any { return r.Throughput.DurationS }},
	{Key: "requests_per_s", Unit: "req/s", JSON: "throughput.requests_per_s", Column: "requests_per_s", Section: "throughput", Text: "requests/s", Format: f3,
		Compare: &CompareSpec{Name: "request throughput req/s", Relative: true}, Value: func(r *Report) any { return r.Throughput.RequestsPerS }},
	generationOnly(Figure{Key: "output_tokens_per_s", Unit: "tok/s", JSON: "throughput.output_tokens_per_s", Column: "output_tokens_per_s", Section: "throughput", Text: "output tok/s", Format: f2,
		HTML: "overall output tok/s", HTMLNote: func(r *Report) string { return "(over " + f3(r.Throughput.DurationS) + " s)" },
		Compare: &CompareSpec{Name: "output token throughput tok/s", Relative: true}, Value: func(r *Report) any { return r.Throughput.OutputTokensPerS }}),
	generationOnly(Figure{Key: "total_tokens_per_s", Unit: "tok/s", JSON: "throughput.total_tokens_per_s", Column: "total_tokens_per_s", Section: "throughput", Text: "total tok/s (prompt+output)", Format: f2,
		Compare: &CompareSpec{Name: "total token throughput tok/s", Relative: true}, Value: func(r *Report) any { return r.Throughput.TotalTokensPerS }}),
	generationOnly(Figure{Key: "sustained_output_tokens_per_s", Unit: "tok/s", JSON: "throughput.sustained_output_tokens_per_s", Column: "sustained_output_tokens_per_s",
		Section: "throughput", Text: "sustained output tok/s", Format: f2, Note: windowNote,
		HTML: "sustained output tok/s", HTMLNote: func(r *Report) string {
			return "in [" + f3(r.Throughput.WindowStartS) + " s, " + f3(r.Throughput.WindowEndS) + " s)"
		},
		Compare: &CompareSpec{Name: "sustained output tok/s", Relative: true, Paired: true}, Value: func(r *Report) any { return r.Throughput.SustainedOutputTokensPerS }}),
	generationOnly(Figure{Key: "peak_output_tokens_per_s", Unit: "tok/s", JSON: "throughput.peak_output_tokens_per_s", Column: "peak_output_tokens_per_s",
		Section: "throughput", Text: "peak 1 s output tok/s", Format: f2, Note: peakNote, HTML: "peak 1 s output tok/s",
		Value: func(r *Report) any { return r.Throughput.PeakOutputTokensPerS }}),
	// A run that is not generation (embeddings, rerank): unary.go.
	unaryFigures[0], unaryFigures[1], unaryFigures[2], unaryFigures[3], unaryFigures[4], unaryFigures[5], unaryFigures[6],
	{Key: "window_start_s", Unit: "s", JSON: "throughput.window.start_s", Column: "window_start_s", Value: func(r *Report) any { return r.Throughput.WindowStartS }},
	{Key: "window_end_s", Unit: "s", JSON: "throughput.window.end_s", Column: "window_end_s", Value: func(r *Report) any { return r.Throughput.WindowEndS }},
	{Key: "warmup_s", Unit: "s", JSON: "breakdown.window.warmup_s", Column: "warmup_s", Value: func(r *Report) any { return r.Throughput.WarmupS }},
	{Key: "warmup_detected", JSON: "breakdown.window.warmup_detected", Column: "warmup_detected", Value: func(r *Report) any { return r.Throughput.WarmupDetected }},
	{Key: "peak_start_s", Unit: "s", JSON: "breakdown.window.peak_start_s", Value: func(r *Report) any { return r.Throughput.PeakAtS }},
	generationOnly(latencyFigure("ttft", "ttft_ms", "TTFT", "TTFT", func(r *Report) stats.Quantiles { return r.TTFT })),
	reasoningFigure(keyTTFA, "ms", "ttfa_ms", "latency", "TTFA (first answer)", "TTFA", func(r *Report) stats.Quantiles { return r.TTFA }),
	generationOnly(latencyFigure("tpot", "tpot_ms", "TPOT", "TPOT", func(r *Report) stats.Quantiles { return r.TPOT })),
	reasoningFigure(keyAnswerTPOT, "ms", "answer_tpot_ms", "latency", "TPOT (answer)", "answer TPOT", func(r *Report) stats.Quantiles { return r.AnswerTPOT }),
	reasoningFigure(keyReasoningTokens, "tok", "reasoning_tokens", "reasoning", "reasoning tokens", "reasoning tokens",
		func(r *Report) stats.Quantiles { return r.ReasoningTokens }),
	{Key: "reasoning_tokens_source", JSON: "reasoning_tokens_source", Present: reasoned, Value: reasoningByObject},
	generationOnly(latencyFigure("itl", "itl_ms", "ITL (per chunk)", "ITL", func(r *Report) stats.Quantiles { return r.ITL })),
	{Key: "itl_per_token", Unit: "ms", JSON: "breakdown.itl_per_token_ms", Column: "itl_per_token_ms", Section: "latency", Text: "ITL (per token)",
		OnlyIfSampled: true, Dist: func(r *Report) stats.Quantiles { return r.ITLPerToken }},
	generationOnly(latencyFigure("e2e", "e2e_ms", "E2E", "E2E", func(r *Report) stats.Quantiles { return r.E2E })),
	latencyUnary,
	// A run that sent images: images.go.
	imageFigures[0], imageFigures[1], imageFigures[2], imageFigures[3], imageFigures[4],
	{Key: "schedule_lateness", Unit: "ms", JSON: "schedule_lateness_ms", Column: "schedule_lateness_ms", Section: "latency", Text: "schedule lateness",
		Dist: func(r *Report) stats.Quantiles { return r.Lateness }},
	{Key: "slo", Column: "slo", Value: func(r *Report) any { return r.Options.SLO.String() }},
	{Key: "goodput_requests_per_s", Unit: "req/s", JSON: "goodput.requests_per_s", Column: "goodput_requests_per_s", Section: "goodput", Text: "good requests/s", Format: f3,
		Present: hasGoodput, Compare: &CompareSpec{Name: "goodput req/s", Relative: true}, Value: goodputValue(func(g *Goodput) float64 { return g.RequestsPerS })},
	generationOnly(Figure{Key: "goodput_output_tokens_per_s", Unit: "tok/s", JSON: "goodput.output_tokens_per_s", Column: "goodput_output_tokens_per_s", Section: "goodput", Text: "good output tok/s", Format: f2,
		Present: hasGoodput, Value: goodputValue(func(g *Goodput) float64 { return g.OutputTokensPerS })}),
	goodInputs,
	{Key: "slo_attainment_pct", Unit: "%", JSON: "goodput.attainment", Column: "goodput_attainment", Section: "goodput", Text: "SLO attainment", Format: pct,
		Note: func(r *Report) string { return fmt.Sprintf("%d good", r.Goodput.Good) }, Present: hasGoodput,
		Compare: &CompareSpec{Name: "SLO attainment %"}, Value: goodputValue(func(g *Goodput) float64 { return g.Attainment })},
	{Key: "client_limited", Column: "client_limited", Value: func(r *Report) any { return r.Flags.ClientLimited }},
	{Key: "overloaded", Column: "overloaded", Value: func(r *Report) any { return r.Flags.Overloaded }},
	{Key: "stream_buffered", Column: "stream_buffered", Value: func(r *Report) any { return r.Flags.Buffered }},
	{Key: "prompt_off_target", Column: "prompt_off_target", Value: func(r *Report) any { return r.Flags.PromptOffTarget }},
	{Key: "output_tokens_target", Column: "output_tokens_target", Value: func(r *Report) any { return r.Tokens.OutputTarget }},
	{Key: "output_tokens", Column: "output_tokens", Value: func(r *Report) any { return r.Tokens.Output }},
	{Key: "requests_shorter_than_target", Column: "requests_shorter_than_target", Value: func(r *Report) any { return r.Tokens.Shorter }},
	{Key: "requests_longer_than_target", Column: "requests_longer_than_target", Value: func(r *Report) any { return r.Tokens.Longer }},
	// Compare's shares of requests: resampled from the requests themselves (analysis/compare/figures.go).
	{Key: "error_rate_pct", Unit: "%", Compare: &CompareSpec{Name: "error rate %"}, Value: func(r *Report) any { return shareOf(r.Requests.Failed, r.Requests.Total) }},
	{Key: "drop_rate_pct", Unit: "%", Compare: &CompareSpec{Name: "drop rate %"}, Value: func(r *Report) any { return shareOf(r.Requests.Dropped, r.Requests.Total) }},
	{Key: "prefix_cache_hit_rate_pct", Unit: "%", Compare: &CompareSpec{Name: "prefix-cache hit rate %"},
		Present: func(r *Report) bool { return r.Conversations != nil && r.Conversations.PrefixCache.PromptTokens > 0 },
		Value:   func(r *Report) any { return 100 * r.Conversations.PrefixCache.HitRate }},
	// Agents (package analysis/agent computes them; agents.go renders the section).
	agentCount("agent_sessions", func(a *agent.Report) int64 { return a.Sessions }),
	agentCount("agent_sessions_complete", func(a *agent.Report) int64 { return a.Complete }),
	agentCount("agent_sessions_incomplete", func(a *agent.Report) int64 { return a.Incomplete }),
	agentCount("agent_calls", func(a *agent.Report) int64 { return a.Calls }),
	agentDist("agent_makespan", "s", "makespan_s", "makespan, s", &CompareSpec{Name: "agent makespan", Relative: true},
		func(a *agent.Report) stats.Quantiles { return a.Makespan }, func(a *agent.Report) []float64 { return a.MakespansS }),
	agentDist("agent_recorded_makespan", "s", "recorded_makespan_s", "recorded makespan, s", nil,
		func(a *agent.Report) stats.Quantiles { return a.RecordedMakespan }, nil),
	agentDist("agent_slowdown", "x", "slowdown", "slowdown (makespan / recorded)", &CompareSpec{Name: "agent slowdown", Relative: true},
		func(a *agent.Report) stats.Quantiles { return a.Slowdown }, func(a *agent.Report) []float64 { return a.Slowdowns }),
	agentScalar("agent_llm_share", "llm_share", "LLM share of makespan", pct100, llmShareNote, func(a *agent.Report) float64 { return a.LLMShare }),
	agentScalar("agent_recorded_llm_share", "recorded_llm_share", "", nil, nil, func(a *agent.Report) float64 { return a.RecordedLLMShare }),
	agentScalar("agent_cache_hit_rate", "cache.hit_rate", "prefix-cache hit rate", pct100, agentCacheNote, func(a *agent.Report) float64 { return a.Cache.HitRate }),
	agentScalar("agent_recorded_cache_share", "cache.recorded_share", "", nil, nil, func(a *agent.Report) float64 { return a.Cache.RecordedShare }),
	agentScalar("agent_cache_best_rate", "cache.best_rate", "", nil, nil, func(a *agent.Report) float64 { return a.Cache.BestRate }),
	agentScalar("agent_peak_live_sessions", "peak_live_sessions", "peak live sessions", f0, peakAtNote(func(a *agent.Report) float64 { return a.PeakSessionsAtS }),
		func(a *agent.Report) float64 { return float64(a.PeakSessions) }),
	agentScalar("agent_peak_calls_in_flight", "peak_calls_in_flight", "peak calls in flight", f0, peakAtNote(func(a *agent.Report) float64 { return a.PeakCallsAtS }),
		func(a *agent.Report) float64 { return float64(a.PeakCalls) }),
	// Compare's: the hit rate in percent, the sessions resampled (analysis/compare/figures.go).
	{Key: "agent_cache_hit_rate_pct", Unit: "%", Compare: &CompareSpec{Name: "agent prefix-cache hit rate %"},
		Present: func(r *Report) bool { return r.Agents != nil && r.Agents.Cache.PromptTokens > 0 },
		Value:   func(r *Report) any { return 100 * r.Agents.Cache.HitRate }},
}

func countFigure(column, json string, get func(*Report) int64) Figure {
	return Figure{Key: column, JSON: json, Column: column, Value: func(r *Report) any { return get(r) }}
}

// latencyFigure is a latency distribution of ok requests that compare shows (p50, p90, p99).
func latencyFigure(key, json, text, compare string, get func(*Report) stats.Quantiles) Figure {
	return Figure{Key: key, Unit: "ms", JSON: json, Column: json, Section: "latency", Text: text,
		Compare: &CompareSpec{Name: compare, Relative: true}, Dist: get}
}

func hasGoodput(r *Report) bool { return r.Goodput != nil }

func goodputValue(get func(*Goodput) float64) func(*Report) any {
	return func(r *Report) any {
		if r.Goodput == nil {
			return math.NaN()
		}
		return get(r.Goodput)
	}
}

func shareOf(k, n int64) float64 {
	if n == 0 {
		return math.NaN()
	}
	return 100 * float64(k) / float64(n)
}

// windowNote is the text report's note on sustained throughput: its steady-state window.
func windowNote(r *Report) string {
	t := r.Throughput
	win := "no steady-state window"
	if r.Repeats != nil {
		win = "over the repeats' steady-state windows"
	}
	if !math.IsNaN(t.WindowStartS) {
		how := "given"
		if t.WarmupDetected {
			how = "detected by MSER-5"
		}
		win = fmt.Sprintf("window [%s s, %s s), warm-up %s s %s", f3(t.WindowStartS), f3(t.WindowEndS), f3(t.WarmupS), how)
	}
	return win
}

// peakNote is the text report's note on peak throughput: its 1 s window.
func peakNote(r *Report) string {
	if at := r.Throughput.PeakAtS; !math.IsNaN(at) {
		return fmt.Sprintf("[%s s, %s s)", f3(at), f3(at+1))
	}
	return ""
}

// sectionFigures returns the figures of a text section that r defines, in order.
func sectionFigures(r *Report, section string) []*Figure {
	var out []*Figure
	for i := range reportFigures {
		f := &reportFigures[i]
		if f.Section == section && f.Text != "" && f.present(r) {
			out = append(out, f)
		}
	}
	return out
}

// summaryFigureCols are the summary.parquet columns of the declared figures, in order.
func (r *Report) summaryFigureCols() []Column {
	var cs []Column
	for i := range reportFigures {
		f := &reportFigures[i]
		switch {
		case f.Column == "":
		case f.Dist != nil:
			cs = append(cs, quantileCols(f.Column, f.Dist(r))...)
		default:
			cs = append(cs, Column{f.Column, f.Value(r)})
		}
	}
	return cs
}

// Object is a JSON object whose keys keep their order; a nil one is null.
type Object []jsonField

type jsonField struct {
	key   string
	value any
}

func (o Object) MarshalJSON() ([]byte, error) {
	if o == nil {
		return []byte("null"), nil
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(f.key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(f.value)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// set sets key's value, appending the key when new.
func (o *Object) set(key string, v any) {
	for i := range *o {
		if (*o)[i].key == key {
			(*o)[i].value = v
			return
		}
	}
	*o = append(*o, jsonField{key, v})
}

// setPath sets the value at a dot-separated path, making the objects on the way.
func (o *Object) setPath(path string, v any) {
	parts := strings.Split(path, ".")
	for _, k := range parts[:len(parts)-1] {
		o = o.child(k)
	}
	o.set(parts[len(parts)-1], v)
}

// child returns the object at key, appending an empty one when new.
func (o *Object) child(key string) *Object {
	for i := range *o {
		if (*o)[i].key == key {
			if c, ok := (*o)[i].value.(*Object); ok {
				return c
			}
		}
	}
	c := &Object{}
	*o = append(*o, jsonField{key, c})
	return c
}

// jsonValue is a figure's JSON value: num for floats (null when undefined); a
// distribution's quantiles (null when OnlyIfSampled and it has no samples).
func (f *Figure) jsonValue(r *Report) any {
	if f.Dist != nil {
		q := f.Dist(r)
		if f.OnlyIfSampled && q.N == 0 {
			return (*jsonQuantiles)(nil)
		}
		return jq(q)
	}
	if v, ok := f.Value(r).(float64); ok {
		return Num(v)
	}
	return f.Value(r)
}

// figureObject is the JSON object at path (dot-separated; "" for the top level) built from
// the present figures under it, nested by their paths' further parts, in declaration
// order; null when none is present. The top level holds the figures whose path has no dot.
func figureObject(r *Report, path string) Object {
	var o Object
	prefix := path + "."
	if path == "" {
		prefix = ""
	}
	for i := range reportFigures {
		f := &reportFigures[i]
		rest, ok := strings.CutPrefix(f.JSON, prefix)
		if f.JSON == "" || !ok || !f.present(r) || (path == "" && strings.Contains(rest, ".")) {
			continue
		}
		o.setPath(rest, f.jsonValue(r))
	}
	return o
}

// distributionSamples is the JSON report's breakdown.samples: each distribution's count
// by its JSON key.
func distributionSamples(r *Report) map[string]int64 {
	out := map[string]int64{}
	for i := range reportFigures {
		f := &reportFigures[i]
		if f.Dist != nil && f.JSON != "" && f.present(r) {
			out[f.JSON[strings.LastIndex(f.JSON, ".")+1:]] = f.Dist(r).N
		}
	}
	return out
}
