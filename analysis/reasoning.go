package analysis

import (
	"fmt"
	"math"
	"strings"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"
)

// The reasoning figures (docs/metrics.md, "Reasoning"): a model that thinks before it
// answers streams reasoning first, so TTFT stamps its first thought; these say when the
// answer began (TTFA), how fast the answer streamed (answer TPOT) and how many tokens the
// thinking took. They are shown for a run that reasoned only (Report.Reasoned), so that a
// run without reasoning reports exactly what it did before they existed.

// Reasoning figure keys: the figures' keys in reportFigures, the samples reasoningSample
// takes, compare's keys.
const (
	keyTTFA            = "ttfa"
	keyAnswerTPOT      = "answer_tpot"
	keyReasoningTokens = "reasoning_tokens"
)

// reasoningSample is ok request i's sample of the reasoning figure key: TTFA and answer
// TPOT in ms, reasoning tokens; ok is false when the request has none (no first answer,
// at most one answer token, no reasoning count).
func reasoningSample(d *decode.Data, key string, i int) (v float64, ok bool) {
	switch key {
	case keyTTFA:
		v = d.TTFAMS(i)
	case keyAnswerTPOT:
		v = d.AnswerTPOTMS(i)
	case keyReasoningTokens:
		if d.Reasoning == nil || d.Reasoning[i] == decode.Null32 {
			return 0, false
		}
		v = float64(d.Reasoning[i])
	default:
		return 0, false
	}
	return v, !math.IsNaN(v)
}

// reasoning computes the reasoning figures over ok requests, and whether the run
// reasoned: some ok request counted reasoning tokens, or answered after its first token.
func (r *Report) reasoning(d *decode.Data) {
	if d.FirstAnswer == nil && d.Reasoning == nil {
		return
	}
	var ttfa, tpot, tok []float64
	by := map[string]int64{}
	for i, s := range d.Status {
		if s != decode.StOK {
			continue
		}
		by[reasoningSource(d, i)]++
		if v, ok := reasoningSample(d, keyTTFA, i); ok {
			ttfa = append(ttfa, v)
			r.Reasoned = r.Reasoned || d.FirstAnswer[i] != d.First[i]
		}
		if v, ok := reasoningSample(d, keyAnswerTPOT, i); ok {
			tpot = append(tpot, v)
		}
		if v, ok := reasoningSample(d, keyReasoningTokens, i); ok {
			tok = append(tok, v)
			r.Reasoned = r.Reasoned || v > 0
		}
	}
	if !r.Reasoned {
		return
	}
	r.TTFA, r.AnswerTPOT, r.ReasoningTokens = stats.Summarize(ttfa), stats.Summarize(tpot), stats.Summarize(tok)
	r.ReasoningBy = by
	r.ttfaCurve = quantileCurve(ttfa) // sorted by Summarize
}

func reasoned(r *Report) bool { return r.Reasoned }

// reasoningSource names how ok request i's reasoning tokens were counted: a value of
// reasoning_tokens_source, or "none".
func reasoningSource(d *decode.Data, i int) string {
	if d.ReasoningSource == nil || d.ReasoningSource[i] == decode.Null32 {
		return "none"
	}
	return decode.ReasoningSources[d.ReasoningSource[i]]
}

// reasoningByObject is the JSON report's reasoning_tokens_source: the ok requests by how
// their reasoning was counted, every source named.
func reasoningByObject(r *Report) any {
	var o Object
	for _, s := range append(decode.ReasoningSources[:len(decode.ReasoningSources):len(decode.ReasoningSources)], "none") {
		o = append(o, jsonField{s, r.ReasoningBy[s]})
	}
	return o
}

// reasoningByText is the text report's note of the same: "usage 160, none 40", the
// sources with requests.
func reasoningByText(r *Report) string {
	var parts []string
	for _, s := range append(decode.ReasoningSources[:len(decode.ReasoningSources):len(decode.ReasoningSources)], "none") {
		if n := r.ReasoningBy[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	return strings.Join(parts, ", ")
}

// reasoningFigure is a reasoning distribution of ok requests, shown and compared (p50, p90,
// p99) when the run reasoned.
func reasoningFigure(key, unit, json, section, text, compare string, get func(*Report) stats.Quantiles) Figure {
	return Figure{Key: key, Unit: unit, JSON: json, Column: json, Section: section, Text: text, Present: reasoned,
		Compare: &CompareSpec{Name: compare, Relative: true}, Dist: get}
}

// writeTextReasoning writes the text report's reasoning section: the reasoning tokens per
// ok request (TTFA and answer TPOT are rows of the latency table).
func (r *Report) writeTextReasoning(p func(string, ...any)) {
	fs := sectionFigures(r, "reasoning")
	if len(fs) == 0 {
		return
	}
	p("\nReasoning, tokens per ok request (answer tokens = output_tokens - reasoning_tokens; counted by %s)\n", reasoningByText(r))
	p("  %-22s %9s %10s %10s %10s %10s %10s %10s %10s\n", "", "n", "mean", "p50", "p90", "p95", "p99", "p99.9", "max")
	for _, f := range fs {
		latencyRow(p, f.Text, f.Dist(r))
	}
}

// ttfaPlot is the HTML report's TTFA CDF, drawn as TTFT's is; nil when the run did not
// reason.
func (r *Report) ttfaPlot() *Plot {
	return r.cdfPlot("plot-ttfa-cdf", "TTFA (time to first answer token) distribution (CDF)", r.ttfaCurve, r.TTFA, float64(r.Options.SLO.TTFA)/1e6)
}
