package twin

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/llmreplay/llmreplay/sim"
)

// Fit estimates from the runs not held out the step model's parameters they determine,
// starting from base (whose values the others keep). It returns the fitted Config and
// one FitParam per parameter it looked at, determined or not; a parameter the runs left
// undetermined carries the advice of which run would determine it.
//
// What is read from what (docs/sim.md, "Fitting a twin"):
//   - decode: each gap between two consecutive one-token chunks of a request is one
//     decode step, step = step_base + decode_per_seq*D + context_per_token*C, with D the
//     requests decoding across the gap (first token before it, end after it) and C their
//     prompts plus the tokens each had made; gaps during which another request was
//     prefilling or waiting are left out (that step may hold a prefill).
//   - prefill: the TTFT of a request that had the engine to itself is request_overhead
//     plus PrefillTime: per chunk of max_batched_tokens, step_base +
//     context_per_token*context + prefill_per_token*tokens + attention_per_pair_ns*pairs;
//     with the decode terms known, a decode gap that held another request's whole
//     prefill is that step with the decode terms, and no overhead (prefillSteps); the
//     overhead and the last two are a least-squares fit of both.
//   - max_batch: the most requests decoding at once, when requests waited meanwhile.
//   - prefix cache: on when a request read cached tokens; the block size is the greatest
//     common divisor of the cached counts.
func Fit(runs []Run, base sim.Config) (sim.Config, []sim.FitParam) {
	cfg := base
	// The fit is of a dense step: an MoE's expert term, kept from the base, would count
	// again what the decode and prefill terms fitted here already hold.
	cfg.PerExpert, cfg.Experts, cfg.ExpertsPerToken = 0, 0, 0
	var fit []Run
	for _, r := range runs {
		if !r.Holdout {
			fit = append(fit, r)
		}
	}
	params := []sim.FitParam{undetermined("per_expert_ns", 0,
		"not fitted: the twin's step is dense (an MoE's growth of the step with the batch lands in decode_per_seq_ns and prefill_per_token_ns)")}
	dec := fitDecode(fit, &cfg)
	params = append(params, dec...)
	params = append(params, fitPrefill(fit, &cfg, !slices.ContainsFunc(dec, func(p sim.FitParam) bool { return !p.Determined }))...)
	params = append(params, fitMaxBatch(fit, &cfg))
	params = append(params, fitKV(fit, &cfg))
	params = append(params, fitPrefix(fit, &cfg)...)
	return cfg, params
}

// undetermined is a parameter kept at its base value.
func undetermined(name string, v float64, advice string) sim.FitParam {
	return sim.FitParam{Name: name, Value: v, Advice: advice}
}

// determined says whether a coefficient is pinned down: its standard error, times the
// spread of its regressor over the observations, moves the fitted figure by less than
// 5% of its mean. A term that is truly near zero is then determined as small, not
// refused for a large relative error.
func determined(se, spread, meanY float64) bool {
	return !math.IsNaN(se) && se*spread < 0.05*math.Abs(meanY)
}

// cumTokens is a request's tokens made by each chunk, cumulated.
func cumTokens(q *Req) []int {
	c := make([]int, len(q.Chunks))
	n := 0
	for k := range q.Chunks {
		if q.ChunkTokens != nil && k < len(q.ChunkTokens) {
			n += int(q.ChunkTokens[k])
		} else {
			n++
		}
		c[k] = n
	}
	return c
}

// oneTokenChunks says whether every chunk of q carried one token, so that its gaps are
// steps: a server that sends several tokens a chunk (or a proxy that buffers) does not.
func oneTokenChunks(q *Req) bool {
	if q.ChunkTokens != nil {
		return !slices.ContainsFunc(q.ChunkTokens, func(n int32) bool { return n != 1 })
	}
	return len(q.Chunks) == q.Output
}

// maxDecodeObs bounds the decode observations a run gives, spread over its gaps: beyond
// a few thousand the standard errors are already small and the overlap counts cost.
const maxDecodeObs = 20000

// decodeObs is one decode gap: its duration, the sequences decoding across it and their
// context.
type decodeObs struct{ gap, d, ctx float64 }

func decodeObservations(r *Run) []decodeObs {
	reqs := r.Reqs
	cum := make([][]int, len(reqs))
	total := 0
	for i := range reqs {
		cum[i] = cumTokens(&reqs[i])
		total += len(reqs[i].Chunks)
	}
	every := max(1, total/maxDecodeObs)
	var out []decodeObs
	k0 := 0
	for i := range reqs {
		q := &reqs[i]
		if !oneTokenChunks(q) {
			continue
		}
		for k := 1; k < len(q.Chunks); k++ {
			if k0++; k0%every != 0 {
				continue
			}
			t0, t1 := q.Chunks[k-1], q.Chunks[k]
			m := t0 + (t1-t0)/2
			if o, ok := decodeAt(reqs, cum, m, nil); ok {
				o.gap = float64(t1 - t0)
				out = append(out, o)
			}
		}
	}
	return out
}

// decodeAt counts the sequences decoding at m and their context; ok is false when a
// request was prefilling or waiting at m, unless idle (non-nil) says of its index that
// it had no part in the step.
func decodeAt(reqs []Req, cum [][]int, m int64, idle func(j int) bool) (decodeObs, bool) {
	var o decodeObs
	for j := range reqs {
		q := &reqs[j]
		if q.Sent >= m {
			break // by sent time: none later was in flight
		}
		if q.First > m {
			if idle != nil && idle(j) {
				continue
			}
			return o, false
		}
		if q.End < m {
			continue
		}
		made := sort.Search(len(q.Chunks), func(k int) bool { return q.Chunks[k] >= m })
		gen := 0
		if made > 0 {
			gen = cum[j][made-1]
		}
		o.d++
		o.ctx += float64(q.Prompt + gen)
	}
	return o, o.d > 0
}

func fitDecode(runs []Run, cfg *sim.Config) []sim.FitParam {
	var obs []decodeObs
	for i := range runs {
		obs = append(obs, decodeObservations(&runs[i])...)
	}
	names := []string{"step_base_ns", "decode_per_seq_ns", "context_per_token_ns"}
	keep := func(advice string) []sim.FitParam {
		return []sim.FitParam{undetermined(names[0], float64(cfg.StepBase), advice),
			undetermined(names[1], float64(cfg.DecodePerSeq), advice),
			undetermined(names[2], float64(cfg.ContextPerToken), advice)}
	}
	if len(obs) < 20 {
		return keep(fmt.Sprintf("only %d decode gaps free of prefill: add a run of streamed requests with outputs of 32 tokens or more, sent one at a time or a few at once", len(obs)))
	}
	x := make([][]float64, len(obs))
	y := make([]float64, len(obs))
	minD, maxD, minC, maxC, meanY := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1), 0.0
	for i, o := range obs {
		x[i], y[i] = []float64{1, o.d, o.ctx}, o.gap
		minD, maxD, minC, maxC = min(minD, o.d), max(maxD, o.d), min(minC, o.ctx), max(maxC, o.ctx)
		meanY += o.gap / float64(len(obs))
	}
	if maxD == minD {
		return keep(fmt.Sprintf("every decode step had %g sequences: add a closed-loop run at a concurrency of %g or more", minD, max(4, 2*minD)))
	}
	fields := []*time.Duration{&cfg.StepBase, &cfg.DecodePerSeq, &cfg.ContextPerToken}
	terms := []term{{base: float64(cfg.StepBase), spread: 1}, {base: float64(cfg.DecodePerSeq), spread: maxD - minD},
		{base: float64(cfg.ContextPerToken), spread: maxC - minC}}
	f, fitted, err := fitTerms(x, y, terms, meanY)
	if err != nil {
		return keep("decode steps: " + err.Error() + ": add runs at more concurrencies with prompts of varied length")
	}
	var out []sim.FitParam
	advice := []string{"the decode gaps are too noisy: add a longer run at concurrency 1", "add closed-loop runs at more concurrencies (1, 4, 8)",
		"add runs whose prompts vary in length (from 100 to 4,000 tokens)"}
	for j, name := range names {
		if !fitted[j] {
			out = append(out, undetermined(name, float64(*fields[j]), advice[j]))
			continue
		}
		p := sim.FitParam{Name: name, Value: math.Max(0, f.Coef[j]), StdErr: f.StdErr[j], Determined: true}
		*fields[j] = time.Duration(math.Round(p.Value))
		out = append(out, p)
	}
	return out
}

// idle reports whether request i had the engine to itself from its send to its first
// token: no other request in flight at any moment of that span.
func idle(reqs []Req, i int) bool {
	q := &reqs[i]
	for j := range reqs {
		o := &reqs[j]
		if j != i && o.Sent < q.First && o.End > q.Sent {
			return false
		}
	}
	return true
}

// prefillSteps finds in r the engine steps that held one request's whole prefill beside
// decoding requests, as rows of the prefill fit: a decoding request's gap that ends with
// the other's first token (within a quarter of the gap: both leave the same step), begun
// after the other was sent, after a gap that was a decode step alone (at most twice the
// decode terms' step, so no part of the prompt came before), while no third request was
// prefilling, or waiting ahead of it. Such a gap is step_base, the decode terms and the
// prompt's prefill and attention, with no request overhead: the engine's own prefill
// time, which the idle TTFTs hold only summed with the overhead. Without them, the two
// were not told apart over Ollama's 16-600-token prompts in four fits of five: prefill
// was held at tiny's 10 µs a token (32-51 fitted since), and attention and the overhead
// made up the rest (docs/sim.md, "How large the error was on each engine"). The rows
// are x (uncached tokens, attention pairs, 0 for the overhead) and y (the gap less the
// known terms).
func prefillSteps(r *Run, cfg *sim.Config) (x [][]float64, y []float64) {
	reqs := r.Reqs
	cum := make([][]int, len(reqs))
	for i := range reqs {
		cum[i] = cumTokens(&reqs[i])
	}
	for bi := range reqs {
		b := &reqs[bi]
		cached := max(b.Cached, 0)
		n := b.Prompt - cached
		if n <= 0 {
			continue
		}
		for ai := range reqs {
			a := &reqs[ai]
			if a.Sent >= b.First {
				break // by sent time: none later was decoding
			}
			if ai == bi || a.End <= b.First || !oneTokenChunks(a) {
				continue
			}
			k := sort.Search(len(a.Chunks), func(k int) bool { return a.Chunks[k] >= b.First })
			if k == len(a.Chunks) || (k > 0 && b.First-a.Chunks[k-1] < a.Chunks[k]-b.First) {
				k--
			}
			if k < 2 {
				continue
			}
			t0, t1 := a.Chunks[k-1], a.Chunks[k]
			if gap := t1 - t0; 4*max(t1-b.First, b.First-t1) > gap || b.Sent >= t0 {
				continue
			}
			// A request sent after b, whose first token came after this step, waited
			// behind it (FCFS) and had no part in the step, if its whole prompt would
			// have fitted the budget beside b's (had it been admitted, it would have
			// had its first token in this step too).
			behind := 0
			o, ok := decodeAt(reqs, cum, t0+(t1-t0)/2, func(j int) bool {
				if j == bi {
					return true
				}
				q := &reqs[j]
				behind = max(behind, q.Prompt-max(q.Cached, 0))
				return j > bi && 4*(q.First-t1) > t1-t0
			})
			if !ok || n+behind+int(o.d) > cfg.MaxBatchedTokens {
				continue
			}
			decode := float64(cfg.StepBase) + float64(cfg.DecodePerSeq)*o.d + float64(cfg.ContextPerToken)*o.ctx
			if float64(t0-a.Chunks[k-2]) > 2*decode {
				continue
			}
			x = append(x, []float64{float64(n), float64(sim.AttentionPairs(cached, n)), 0})
			y = append(y, float64(t1-t0)-decode-float64(cfg.ContextPerToken)*float64(b.Prompt))
			break
		}
	}
	return x, y
}

// weighByKind weighs the rows of a fit of two kinds, the first split rows and the rest,
// each by the inverse of its residual standard deviation under coef (feasible weighted
// least squares). The prefill fit's kinds are not equally noisy (a TTFT holds the
// request's trip through the server, a gap one step), and weighed alike the noisier
// pulls the other's terms: with TTFTs that vary by 12 ms and gaps by 40 µs, the
// unweighted fit put prefill 2.1% off, the weighted 0.03% (TestFitTellsPrefillFromOverhead).
// ok is false when a kind is fitted exactly (its weight would be infinite).
func weighByKind(x [][]float64, y, coef []float64, split int) (xw [][]float64, yw []float64, ok bool) {
	kind := func(i int) int { return min(i/split, 1) }
	var ss [2]float64
	for i := range y {
		r := y[i]
		for j, v := range x[i] {
			r -= coef[j] * v
		}
		ss[kind(i)] += r * r
	}
	if ss[0] == 0 || ss[1] == 0 {
		return nil, nil, false
	}
	w := [2]float64{math.Sqrt(float64(split) / ss[0]), math.Sqrt(float64(len(y)-split) / ss[1])}
	xw, yw = make([][]float64, len(y)), make([]float64, len(y))
	for i := range y {
		k := w[kind(i)]
		yw[i] = k * y[i]
		for _, v := range x[i] {
			xw[i] = append(xw[i], k*v)
		}
	}
	return xw, yw, true
}

// fitPrefill fits the prefill terms and the request overhead from the idle TTFTs and,
// when the decode terms are determined (steps), from the prefills beside decodes.
func fitPrefill(runs []Run, cfg *sim.Config, steps bool) []sim.FitParam {
	var x [][]float64
	var y []float64
	minP, maxP := math.Inf(1), math.Inf(-1)
	meanY := 0.0
	for ri := range runs {
		reqs := runs[ri].Reqs
		for i := range reqs {
			if !idle(reqs, i) {
				continue
			}
			q := &reqs[i]
			cached := max(q.Cached, 0)
			// The known terms of PrefillTime's chunks: step_base and context.
			rest := float64(q.First - q.Sent)
			var pairs float64
			for done := cached; done < q.Prompt; {
				n := min(q.Prompt-done, cfg.MaxBatchedTokens)
				rest -= float64(cfg.StepBase) + float64(cfg.ContextPerToken)*float64(done+n)
				pairs += float64(sim.AttentionPairs(done, n))
				done += n
			}
			n := float64(q.Prompt - cached)
			// The constant is the request's overhead (the network, the server's parsing,
			// templating and tokenizing): no step of the engine's, but part of every
			// measured TTFT, and in a closed loop a slot's idle time per request.
			x, y = append(x, []float64{n, pairs, 1}), append(y, rest)
			minP, maxP = min(minP, n), max(maxP, n)
			meanY += float64(q.First - q.Sent)
		}
	}
	names := []string{"prefill_per_token_ns", "attention_per_pair_ns", "request_overhead_ns"}
	keep := func(advice string) []sim.FitParam {
		return []sim.FitParam{undetermined(names[0], float64(cfg.PrefillPerToken), advice),
			undetermined(names[1], cfg.AttentionPerPairNs, advice), undetermined(names[2], float64(cfg.RequestOverhead), advice)}
	}
	if len(y) < 6 || maxP < 2*minP {
		seen := "no request found the engine idle"
		if len(y) > 0 {
			seen = fmt.Sprintf("%d requests found the engine idle, their prompts from %g to %g uncached tokens", len(y), minP, maxP)
		}
		return keep(seen + ": add a run at concurrency 1 whose prompts vary from 100 to 4,000 tokens")
	}
	idleRows := len(y)
	for ri := range runs {
		if !steps {
			break
		}
		sx, sy := prefillSteps(&runs[ri], cfg)
		x, y = append(x, sx...), append(y, sy...)
		for i := range sx {
			minP, maxP = min(minP, sx[i][0]), max(maxP, sx[i][0])
		}
	}
	// What a term must move by less than 5% of to be determined: the mean idle TTFT,
	// the figure these terms predict.
	meanY /= float64(idleRows)
	terms := []term{{base: float64(cfg.PrefillPerToken), spread: maxP - minP},
		{base: cfg.AttentionPerPairNs, spread: float64(sim.AttentionPairs(0, int(maxP)))}, {always: true}}
	f, fitted, err := fitTermsWith(x, y, terms, meanY, true)
	if err == nil && len(y)-idleRows > len(terms) {
		if xw, yw, ok := weighByKind(x, y, f.Coef, idleRows); ok {
			f, fitted, err = fitTermsWith(xw, yw, terms, meanY, true)
		}
	}
	if err != nil {
		return keep("prefill: " + err.Error() + ": add a run at concurrency 1 whose prompts vary from 100 to 4,000 tokens")
	}
	out := []sim.FitParam{undetermined(names[0], float64(cfg.PrefillPerToken), "the idle TTFTs (and prefills beside decodes) are too noisy: add a longer run at concurrency 1 or 2"),
		undetermined(names[1], cfg.AttentionPerPairNs, "add a run at concurrency 1 with prompts of 4,000 tokens or more, where attention shows"),
		undetermined(names[2], float64(cfg.RequestOverhead), "the idle TTFTs are too noisy to tell the overhead from zero: add a longer run at concurrency 1 with short prompts")}
	if fitted[0] {
		out[0] = sim.FitParam{Name: names[0], Value: math.Max(0, f.Coef[0]), StdErr: f.StdErr[0], Determined: true}
		cfg.PrefillPerToken = time.Duration(math.Round(out[0].Value))
	}
	if fitted[1] {
		out[1] = sim.FitParam{Name: names[1], Value: math.Max(0, f.Coef[1]), StdErr: f.StdErr[1], Determined: true}
		cfg.AttentionPerPairNs = out[1].Value
	}
	// The overhead is always estimated (fixing it would move its part into prefill's
	// terms); it replaces the base's when it is determined.
	if determined(f.StdErr[2], 1, meanY) {
		out[2] = sim.FitParam{Name: names[2], Value: math.Max(0, f.Coef[2]), StdErr: f.StdErr[2], Determined: true}
		cfg.RequestOverhead = time.Duration(math.Round(out[2].Value))
	}
	return out
}
