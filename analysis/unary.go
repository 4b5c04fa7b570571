package analysis

import (
	"fmt"
	"math"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"
)

// Runs that are not generation: embeddings and rerank requests (records with inputs,
// results revision 1.4) are not streamed, so they have no first token, no output and no
// chunks, and their latency is end_ns − sent_ns. Their report shows latency, requests,
// inputs and prompt tokens per second, overall and sustained, and goodput on a latency
// objective, in place of TTFT, TPOT, ITL and the output token rates, which mean nothing
// there (docs/metrics.md, "Runs that are not generation").

// Unary is what a run of requests that are not generation reports besides the common
// figures (requests, requests/s, schedule lateness, goodput and attainment).
type Unary struct {
	// Latency of ok requests, end − sent, ms (the report's E2E, under its own name).
	Latency stats.Quantiles
	// Inputs and PromptTokens of ok requests (prompt tokens: the server's count when it
	// gave one, else the target, as in total_tokens_per_s).
	Inputs, PromptTokens int64
	// InputsPerS and PromptTokensPerS are over the run's duration D, as requests_per_s.
	InputsPerS, PromptTokensPerS float64
	// Sustained: ok requests whose response ended inside the steady-state window, their
	// inputs and prompt tokens, over the window's length; NaN without a window.
	SustainedRequestsPerS, SustainedInputsPerS, SustainedPromptTokensPerS float64
	// GoodInputsPerS: the inputs of the requests that met the SLO, over D; NaN without one.
	GoodInputsPerS float64

	// bins are the inputs of ok requests whose response ended in each 10 ms bin: what
	// the warm-up detector reads, as it reads output tokens of a run of generations.
	bins         []float64
	latencyCurve [][2]float64
}

// isUnary reports whether the run's requests are not generation.
func isUnary(r *Report) bool { return r.Unary != nil }

// unaryRow reports whether request i of d carries inputs (embeddings, rerank).
func unaryRow(d *decode.Data, i int) bool { return d.Inputs != nil && d.Inputs[i] != decode.Null32 }

// kind sets r.Unary when d's requests carry inputs, refusing a file (or files pooled) whose
// sent requests are some with inputs and some without: latency of the one kind and TTFT
// of the other do not pool into figures of one run. Requests never sent do not count: a
// replayer may drop a request before it knew its inputs.
func (r *Report) kind(d *decode.Data) error {
	if d.Inputs == nil {
		return nil
	}
	type first struct {
		file string
		row  int
	}
	var with, without *first
	lo := 0
	for f, end := range d.FileEnd {
		for i := lo; i < end; i++ {
			if d.Sent[i] == decode.Null64 {
				continue
			}
			at := &first{d.Files[f], i - lo}
			if unaryRow(d, i) && with == nil {
				with = at
			} else if !unaryRow(d, i) && without == nil {
				without = at
			}
		}
		lo = end
	}
	switch {
	case with == nil:
		return nil
	case without != nil && with.file == without.file:
		return fmt.Errorf("analysis: %s: row %d has inputs (embeddings or rerank) and row %d has none (a generation): a run is of one kind or the other; analyse them apart",
			with.file, with.row, without.row)
	case without != nil:
		return fmt.Errorf("analysis: %s row %d has inputs (embeddings or rerank) and %s row %d has none (a generation): a run is of one kind or the other; analyse them apart",
			with.file, with.row, without.file, without.row)
	}
	u := &Unary{}
	for i, s := range d.Status {
		if s != decode.StOK {
			continue
		}
		b := int(d.End[i] / decode.BinNS)
		for len(u.bins) <= b {
			u.bins = append(u.bins, 0)
		}
		u.bins[b] += float64(max(d.Inputs[i], 0))
	}
	r.Unary = u
	return nil
}

// promptTokens is request i's prompt tokens: the server's count when it gave one.
func promptTokens(d *decode.Data, i int) int64 {
	if d.PromptServer[i] != decode.Null32 {
		return int64(d.PromptServer[i])
	}
	return int64(d.Prompt[i])
}

// unary computes the figures of a run that is not generation, after the latencies, the
// throughput (its window) and the goodput.
func (r *Report) unary(d *decode.Data) {
	u := r.Unary
	if u == nil {
		return
	}
	t := r.Throughput
	nan := math.NaN()
	u.Latency = r.E2E
	u.InputsPerS, u.PromptTokensPerS, u.GoodInputsPerS = nan, nan, nan
	u.SustainedRequestsPerS, u.SustainedInputsPerS, u.SustainedPromptTokensPerS = nan, nan, nan
	ws, we := int64(math.Round(t.WindowStartS*1e9)), int64(math.Round(t.WindowEndS*1e9))
	var wReq, wIn, wTok, goodIn int64
	var lat []float64
	for i, s := range d.Status {
		if s != decode.StOK {
			continue
		}
		in, tok := int64(max(d.Inputs[i], 0)), promptTokens(d, i)
		u.Inputs += in
		u.PromptTokens += tok
		lat = append(lat, d.E2EMS(i))
		if !math.IsNaN(t.WindowStartS) && d.End[i] >= ws && d.End[i] < we {
			wReq, wIn, wTok = wReq+1, wIn+in, wTok+tok
		}
		if !r.Options.SLO.IsZero() && meets(d, i, r.Options.SLO) {
			goodIn += in
		}
	}
	stats.SortFloat64s(lat)
	u.latencyCurve = quantileCurve(lat)
	if dur := t.DurationS; dur > 0 {
		u.InputsPerS, u.PromptTokensPerS = float64(u.Inputs)/dur, float64(u.PromptTokens)/dur
		if r.Goodput != nil {
			u.GoodInputsPerS = float64(goodIn) / dur
		}
	}
	if w := t.WindowEndS - t.WindowStartS; w > 0 {
		u.SustainedRequestsPerS, u.SustainedInputsPerS, u.SustainedPromptTokensPerS = float64(wReq)/w, float64(wIn)/w, float64(wTok)/w
	}
}

// unaryValue reads a figure of Unary (NaN for a run of generations).
func unaryValue(get func(*Unary) float64) func(*Report) any {
	return func(r *Report) any {
		if r.Unary == nil {
			return math.NaN()
		}
		return get(r.Unary)
	}
}

// unaryCount reads a count of Unary (0 for a run of generations).
func unaryCount(get func(*Unary) int64) func(*Report) any {
	return func(r *Report) any {
		if r.Unary == nil {
			return int64(0)
		}
		return get(r.Unary)
	}
}

// unaryThroughput is a rate of a run that is not generation, in the throughput section.
func unaryThroughput(key, unit, text string, format func(float64) string, note func(*Report) string, paired bool, get func(*Unary) float64) Figure {
	return Figure{Key: key, Unit: unit, JSON: "throughput." + key, Column: key, Section: "throughput", Text: text, HTML: text, Format: format, Note: note,
		Present: isUnary, Compare: &CompareSpec{Name: text, Relative: true, Paired: paired}, Value: unaryValue(get)}
}

// unaryFigures are the figures of a run that is not generation (reportFigures places them).
var unaryFigures = []Figure{
	{Key: "inputs", JSON: "requests.inputs", Column: "inputs", Present: isUnary, Value: unaryCount(func(u *Unary) int64 { return u.Inputs })},
	{Key: "prompt_tokens", JSON: "requests.prompt_tokens", Column: "prompt_tokens", Present: isUnary,
		Value: unaryCount(func(u *Unary) int64 { return u.PromptTokens })},
	unaryThroughput("inputs_per_s", "inputs/s", "inputs/s", f2, nil, false, func(u *Unary) float64 { return u.InputsPerS }),
	unaryThroughput("prompt_tokens_per_s", "tok/s", "prompt tok/s", f2, nil, false, func(u *Unary) float64 { return u.PromptTokensPerS }),
	unaryThroughput("sustained_requests_per_s", "req/s", "sustained requests/s", f3, windowNote, true, func(u *Unary) float64 { return u.SustainedRequestsPerS }),
	unaryThroughput("sustained_inputs_per_s", "inputs/s", "sustained inputs/s", f2, nil, true, func(u *Unary) float64 { return u.SustainedInputsPerS }),
	unaryThroughput("sustained_prompt_tokens_per_s", "tok/s", "sustained prompt tok/s", f2, nil, true, func(u *Unary) float64 { return u.SustainedPromptTokensPerS }),
}

// latencyUnary is the latency distribution of a run that is not generation.
var latencyUnary = Figure{Key: "latency", Unit: "ms", JSON: "latency_ms", Column: "latency_ms", Section: "latency", Text: "latency",
	Present: isUnary, Compare: &CompareSpec{Name: "latency", Relative: true},
	Dist: func(r *Report) stats.Quantiles {
		if r.Unary == nil {
			return stats.Quantiles{}
		}
		return r.Unary.Latency
	}}

// goodInputs is the goodput in inputs of a run that is not generation.
var goodInputs = Figure{Key: "goodput_inputs_per_s", Unit: "inputs/s", JSON: "goodput.inputs_per_s", Column: "goodput_inputs_per_s", Section: "goodput",
	Text: "good inputs/s", Format: f2, Present: func(r *Report) bool { return r.Goodput != nil && r.Unary != nil },
	Value: unaryValue(func(u *Unary) float64 { return u.GoodInputsPerS })}

// generationOnly keeps a figure out of a run that is not generation (TTFT, TPOT, ITL, the
// output token rates), its own Present still deciding for a run of generations.
func generationOnly(f Figure) Figure {
	own := f.Present
	f.Present = func(r *Report) bool { return r.Unary == nil && (own == nil || own(r)) }
	return f
}

// unaryPlots are the HTML plots of a run that is not generation: the latency CDF.
func (r *Report) unaryPlots() []*Plot {
	u := r.Unary
	return []*Plot{r.cdfPlot("plot-latency-cdf", "Latency distribution (CDF)", u.latencyCurve, u.Latency, float64(r.Options.SLO.E2E)/1e6)}
}

// writeTextUnaryTokens is the tokens section of a run that is not generation.
func (r *Report) writeTextUnaryTokens(p func(string, ...any)) {
	u := r.Unary
	per := math.NaN()
	if r.Requests.OK > 0 {
		per = float64(u.Inputs) / float64(r.Requests.OK)
	}
	p("\nInputs (ok requests; not generation: no output)\n")
	p("  inputs: %d (%s per request); prompt tokens: %d\n", u.Inputs, f2(per), u.PromptTokens)
}

// firstName names what the time series' TTFT columns and the overload test's second trend
// hold: TTFT, or the latency of a run that is not generation (its response comes whole).
func (r *Report) firstName() string {
	if r.Unary != nil {
		return "latency"
	}
	return "TTFT"
}

// poolUnary replaces the rates of a pooled run that is not generation as poolRates does
// the others: the repeats' numerators over their summed durations and windows.
func (r *Report) poolUnary(reps []*Report) {
	u := r.Unary
	if u == nil {
		return
	}
	var dur, win, in, tok, good, sReq, sIn, sTok float64
	for _, p := range reps {
		t, pu := p.Throughput, p.Unary
		if pu == nil {
			continue
		}
		if t.DurationS > 0 {
			dur += t.DurationS
			in, tok = in+pu.InputsPerS*t.DurationS, tok+pu.PromptTokensPerS*t.DurationS
			if !math.IsNaN(pu.GoodInputsPerS) {
				good += pu.GoodInputsPerS * t.DurationS
			}
		}
		if w := t.WindowEndS - t.WindowStartS; w > 0 && !math.IsNaN(pu.SustainedRequestsPerS) {
			win += w
			sReq, sIn, sTok = sReq+pu.SustainedRequestsPerS*w, sIn+pu.SustainedInputsPerS*w, sTok+pu.SustainedPromptTokensPerS*w
		}
	}
	div := func(a, b float64) float64 {
		if b > 0 {
			return a / b
		}
		return math.NaN()
	}
	u.InputsPerS, u.PromptTokensPerS = div(in, dur), div(tok, dur)
	if r.Goodput != nil {
		u.GoodInputsPerS = div(good, dur)
	}
	u.SustainedRequestsPerS, u.SustainedInputsPerS, u.SustainedPromptTokensPerS = div(sReq, win), div(sIn, win), div(sTok, win)
}
