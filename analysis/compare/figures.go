package compare

import (
	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"

	"math"
	"slices"
	"sort"
)

// The figures compare shows, one run's at a time: which, from the declaration
// (figures.go); how each is resampled, here.

// figures computes the figures compare shows (the declared figures with a CompareSpec,
// figures.go; the paired ones first) of one run (d, analysed as r) with their replicates;
// tag names the run in the random streams.
func figures(d *decode.Data, r *analysis.Report, b stats.Bootstrap, tag string) ([]Figure, map[string]stats.Estimate, []tpSeries) {
	rf := newRunFigures(d, r, b, tag)
	figs := analysis.Figures()
	for _, paired := range []bool{true, false} {
		for i := range figs {
			f := &figs[i]
			if f.Compare == nil || f.Compare.Paired != paired || !f.Defined(r) {
				continue
			}
			rf.figure(f)
		}
	}
	return rf.figs, rf.ests, rf.tps
}

// runFigures accumulates one run's compare figures.
type runFigures struct {
	d        *decode.Data
	r        *analysis.Report
	b        stats.Bootstrap
	tag      string
	figs     []Figure
	ests     map[string]stats.Estimate
	tps      []tpSeries
	minBlock int
	// series are the throughputs' per-window series (throughputSeries).
	series map[string][]float64
	// order is the requests in arrival (scheduled) order: neighbours share the server's
	// state, so the dependence between them is measured along it (effective).
	order []int
	// tpotM: TPOT's effective sample size by percentile, which ITL's resamples take.
	tpotM map[float64]int64
}

func newRunFigures(d *decode.Data, r *analysis.Report, b stats.Bootstrap, tag string) *runFigures {
	rf := &runFigures{d: d, r: r, b: b, tag: tag, ests: map[string]stats.Estimate{}, minBlock: 1, tpotM: map[float64]int64{}}
	if r.E2E.N > 0 {
		rf.minBlock = int(math.Ceil(r.E2E.P50 * 1e6 / float64(compareWindowNS)))
	}
	rf.series = throughputSeries(d, r)
	rf.order = make([]int, d.N())
	for i := range rf.order {
		rf.order[i] = i
	}
	sort.SliceStable(rf.order, func(x, y int) bool { return d.Scheduled[rf.order[x]] < d.Scheduled[rf.order[y]] })
	return rf
}

func (rf *runFigures) stream(key string) string { return rf.tag + "/" + key }

func (rf *runFigures) add(f Figure, e stats.Estimate) {
	rf.figs = append(rf.figs, f)
	rf.ests[f.Key] = e
}

// figure adds f's compare rows: a distribution's percentiles, a throughput's value with its
// series for the block bootstrap (throughputs), a share of requests, or, for a figure
// compare has no resampling for, its value alone.
func (rf *runFigures) figure(f *analysis.Figure) {
	cf := Figure{Key: f.Key, Name: f.Compare.Name, Unit: f.Unit, Relative: f.Compare.Relative}
	if f.Dist != nil && f.Units != nil {
		rf.unitQuantiles(f)
		return
	}
	if f.Dist != nil {
		rf.quantiles(f)
		return
	}
	if xs, ok := rf.series[f.Key]; ok {
		rf.figs = append(rf.figs, cf)
		rf.tps = append(rf.tps, tpSeries{f.Key, f.Float(rf.r), xs, rf.minBlock})
		return
	}
	d := rf.d
	all := func(int) bool { return true }
	switch f.Key {
	case "slo_attainment_pct":
		slo := rf.r.Options.SLO
		rf.add(cf, rf.share("attainment", func(i int) bool { return d.Status[i] != decode.StCanceled }, func(i int) bool { return analysis.Meets(d, i, slo) }))
	case "error_rate_pct":
		rf.add(cf, rf.share("errors", all, func(i int) bool {
			s := d.Status[i]
			return s != decode.StOK && s != decode.StDropped && s != decode.StCanceled
		}))
	case "drop_rate_pct":
		rf.add(cf, rf.share("drops", all, func(i int) bool { return d.Status[i] == decode.StDropped }))
	case "agent_cache_hit_rate_pct":
		rf.add(cf, rf.agentCache(f))
	case "prefix_cache_hit_rate_pct":
		if d.Cached != nil {
			rf.add(cf, rf.prefixCache(f))
		}
	default:
		rf.add(cf, stats.Estimate{Value: f.Float(rf.r)})
	}
}

// throughputSeries are the per-window series of the throughputs: the output tokens of the
// steady-state window (sustained) and, over [first sent, last end), the ok requests, their
// output tokens, their prompt and output tokens and the good requests ending in each.
func throughputSeries(d *decode.Data, r *analysis.Report) map[string][]float64 {
	t := r.Throughput
	var sustained []float64
	if !math.IsNaN(t.WindowStartS) {
		lo, hi := int64(math.Round(t.WindowStartS*1e9))/decode.BinNS, int64(math.Round(t.WindowEndS*1e9))/decode.BinNS
		sustained = windows(d.TokenBins, lo, hi)
	}
	var done, good, total []float64
	var lo, hi int64
	if !math.IsNaN(t.DurationS) {
		lo, hi = int64(math.Round(t.FirstSentS*1e9))/decode.BinNS, int64(math.Round(t.LastEndS*1e9))/decode.BinNS+1
		n := int((hi - lo + 9) / 10)
		done, good, total = make([]float64, n), make([]float64, n), make([]float64, n)
		slo := r.Options.SLO
		for i, s := range d.Status {
			if s != decode.StOK {
				continue
			}
			w := int((d.End[i]/decode.BinNS - lo) / 10)
			if w < 0 || w >= n {
				continue
			}
			done[w]++
			tok := int64(d.Prompt[i])
			if d.PromptServer[i] != decode.Null32 {
				tok = int64(d.PromptServer[i])
			}
			if d.OutTokens[i] != decode.Null32 {
				tok += int64(d.OutTokens[i])
			}
			total[w] += float64(tok)
			if !slo.IsZero() && analysis.Meets(d, i, slo) {
				good[w]++
			}
		}
	}
	out := map[string][]float64{"sustained_output_tokens_per_s": sustained, "requests_per_s": done,
		"output_tokens_per_s": windows(d.TokenBins, lo, hi), "total_tokens_per_s": total, "goodput_requests_per_s": good}
	if r.Unary != nil {
		unarySeries(d, r, out)
	}
	return out
}

// unarySeries adds the per-window series of a run that is not generation (embeddings,
// rerank): its ok requests' inputs and prompt tokens by the 10 ms bin their response
// ended in, summed into windows over [first sent, last end) for the overall rates and
// over the steady-state window for the sustained ones (requests too).
func unarySeries(d *decode.Data, r *analysis.Report, out map[string][]float64) {
	t := r.Throughput
	if math.IsNaN(t.DurationS) {
		return
	}
	var req, in, tok []float64
	for i, s := range d.Status {
		if s != decode.StOK {
			continue
		}
		b := int(d.End[i] / decode.BinNS)
		for len(req) <= b {
			req, in, tok = append(req, 0), append(in, 0), append(tok, 0)
		}
		req[b], in[b], tok[b] = req[b]+1, in[b]+float64(max(d.Inputs[i], 0)), tok[b]+float64(analysis.PromptTokens(d, i))
	}
	lo, hi := int64(math.Round(t.FirstSentS*1e9))/decode.BinNS, int64(math.Round(t.LastEndS*1e9))/decode.BinNS+1
	out["inputs_per_s"], out["prompt_tokens_per_s"] = windows(in, lo, hi), windows(tok, lo, hi)
	if !math.IsNaN(t.WindowStartS) {
		lo, hi = int64(math.Round(t.WindowStartS*1e9))/decode.BinNS, int64(math.Round(t.WindowEndS*1e9))/decode.BinNS
		out["sustained_requests_per_s"], out["sustained_inputs_per_s"], out["sustained_prompt_tokens_per_s"] = windows(req, lo, hi), windows(in, lo, hi), windows(tok, lo, hi)
	}
}

// effective returns how many independent requests a sample in arrival order is worth for
// the share of its values at or below v: n / stats.VarianceInflation of that indicator.
func effective(xs []float64, below func(x float64) bool) int64 {
	ind := make([]float64, len(xs))
	for i, x := range xs {
		if below(x) {
			ind[i] = 1
		}
	}
	return max(1, int64(math.Round(float64(len(xs))/stats.VarianceInflation(ind))))
}

// quantiles adds a latency distribution's p50, p90 and p99, over ok requests, resampled m
// out of n with m from the dependence along arrival order; ITL's gaps as many as TPOT's m.
func (rf *runFigures) quantiles(f *analysis.Figure) {
	d := rf.d
	var xs []float64
	n, at := int64(0), func(int64) float64 { return 0 }
	if f.Key == "itl" {
		n, at = d.ITL.Ranks()
	} else {
		xs = make([]float64, 0, rf.r.Requests.OK)
		for _, i := range rf.order {
			if d.Status[i] != decode.StOK {
				continue
			}
			switch f.Key {
			case "ttft":
				xs = append(xs, d.TTFTMS(i))
			case "e2e", "latency": // latency: a run that is not generation's end − sent
				xs = append(xs, d.E2EMS(i))
			case "ttft_images", "ttft_no_images": // the requests that sent images, or the others
				if analysis.SentImages(d, i) == (f.Key == "ttft_images") {
					xs = append(xs, d.TTFTMS(i))
				}
			case "tpot":
				if v := d.TPOTMS(i); !math.IsNaN(v) {
					xs = append(xs, v)
				}
			default:
				if v, ok := analysis.ReasoningSample(d, f.Key, i); ok {
					xs = append(xs, v)
				}
			}
		}
	}
	arrival := slices.Clone(xs)
	if f.Key != "itl" {
		stats.SortFloat64s(xs)
		n, at = int64(len(xs)), func(r int64) float64 { return xs[r] }
	}
	for _, p := range comparePs {
		cf := quantileFigure(f, p.name)
		key := cf.Key
		var e stats.Estimate
		switch {
		case n == 0:
			e = stats.Undefined()
		case f.Key == "itl":
			// A request's gaps are not independent: resample as many as the requests
			// TPOT's percentile is worth.
			e = rf.b.QuantileM(n, min(n, rf.tpotM[p.p]), at, p.p, rf.stream(key))
		default:
			lo, frac := stats.Rank7(n, p.p)
			v := at(lo)
			if frac > 0 {
				v += frac * (at(lo+1) - v)
			}
			eff := effective(arrival, func(x float64) bool { return x <= v })
			if f.Key == "tpot" {
				rf.tpotM[p.p] = eff
			}
			e = rf.b.QuantileM(n, eff, at, p.p, rf.stream(key))
		}
		rf.add(cf, e)
	}
}

// comparePs are the percentiles compare shows of a distribution.
var comparePs = []struct {
	name string
	p    float64
}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}}

// quantileFigure names a distribution's percentile pn ("p50") in compare: KEY_p50_ms and
// "NAME p50 ms" (the unit's suffix, s or ms; none for a ratio).
func quantileFigure(f *analysis.Figure, pn string) Figure {
	key, name := f.Key+"_"+pn, f.Compare.Name+" "+pn
	if f.Unit == "ms" || f.Unit == "s" {
		key, name = key+"_"+f.Unit, name+" "+f.Unit
	}
	return Figure{key, name, f.Unit, f.Compare.Relative}
}

// unitQuantiles adds p50, p90 and p99 of a distribution over independent units (an agent
// figure's sessions: one session's calls wait for each other, sessions do not), each
// resample drawing as many units as there are, with replacement.
func (rf *runFigures) unitQuantiles(f *analysis.Figure) {
	xs := f.Units(rf.r) // sorted
	for _, p := range comparePs {
		cf := quantileFigure(f, p.name)
		e := stats.Undefined()
		if len(xs) > 0 {
			e = rf.b.QuantileSorted(xs, p.p, rf.stream(cf.Key))
		}
		rf.add(cf, e)
	}
}

// agentCache is the agent calls' prefix-cache hit rate in percent, sessions resampled
// with their cached and prompt tokens (a ratio of sums).
func (rf *runFigures) agentCache(f *analysis.Figure) stats.Estimate {
	s := rf.r.Agents.Cache.BySession
	reps := rf.b.Resample(len(s), 1, rf.stream("agent_cache"), func(w []int32, out []float64) {
		var sc, sp float64
		for i, k := range w {
			sc += float64(k) * s[i][0]
			sp += float64(k) * s[i][1]
		}
		out[0] = 100 * sc / sp
	})
	return stats.Estimate{Value: f.Float(rf.r), Reps: reps[0]}
}

// share is a share of requests in percent, m out of n with m from the dependence along
// arrival order.
func (rf *runFigures) share(key string, in, hit func(i int) bool) stats.Estimate {
	var xs []float64
	var k int64
	for _, i := range rf.order {
		if !in(i) {
			continue
		}
		x := 0.0
		if hit(i) {
			x, k = 1, k+1
		}
		xs = append(xs, x)
	}
	n := int64(len(xs))
	eff := n
	if k > 0 && k < n {
		eff = effective(xs, func(x float64) bool { return x == 1 })
	}
	return rf.b.ProportionM(k, n, eff, rf.stream(key)).Scale(100)
}

// prefixCache is the prefix-cache hit rate in percent, its requests resampled.
func (rf *runFigures) prefixCache(f *analysis.Figure) stats.Estimate {
	d := rf.d
	var cached, prompt []float64
	for i, s := range d.Status {
		if s != decode.StOK || d.Cached[i] == decode.Null32 {
			continue
		}
		p := d.Prompt[i]
		if d.PromptServer[i] != decode.Null32 {
			p = d.PromptServer[i]
		}
		cached, prompt = append(cached, float64(d.Cached[i])), append(prompt, float64(p))
	}
	reps := rf.b.Resample(len(cached), 1, rf.stream("prefix_cache"), func(w []int32, out []float64) {
		var sc, sp float64
		for i, k := range w {
			sc += float64(k) * cached[i]
			sp += float64(k) * prompt[i]
		}
		out[0] = 100 * sc / sp
	})
	return stats.Estimate{Value: f.Float(rf.r), Reps: reps[0]}
}
