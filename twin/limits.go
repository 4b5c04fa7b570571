package twin

import (
	"fmt"
	"math"

	"github.com/llmreplay/llmreplay/analysis/scraped"
	"github.com/llmreplay/llmreplay/sim"
)

// decodingAt is how many requests of reqs were decoding at t (first token made, last
// not yet) and the KV tokens they held at their full length (prompt + output).
func decodingAt(reqs []Req, t int64) (n, kv int) {
	for j := range reqs {
		q := &reqs[j]
		if q.Sent > t {
			break
		}
		if q.First <= t && q.End >= t {
			n++
			kv += q.Prompt + q.Output
		}
	}
	return n, kv
}

// waited reports whether q waited for admission: its TTFT exceeds three times what one
// step prefilling its whole prompt beside a full batch would take.
func waited(q *Req, cfg *sim.Config, batch int) bool {
	n := q.Prompt - max(q.Cached, 0)
	alone := cfg.StepTime(n, batch, batch*q.Prompt, sim.AttentionPairs(max(q.Cached, 0), n))
	return q.First-q.Sent > 3*int64(alone)
}

// fitMaxBatch reads max_batch off the runs: the most requests decoding at once (sampled
// at every first token, when the batch has just grown), determined when requests were
// waiting at a moment the batch was that large (their TTFT says so, or the engine's
// waiting gauge): the engine held them back at the cap.
func fitMaxBatch(runs []Run, cfg *sim.Config) sim.FitParam {
	peak, capped := 0, false
	batch := make([][]int, len(runs)) // the requests decoding at each request's first token
	for ri := range runs {
		reqs := runs[ri].Reqs
		batch[ri] = make([]int, len(reqs))
		for i := range reqs {
			batch[ri][i], _ = decodingAt(reqs, reqs[i].First)
			peak = max(peak, batch[ri][i])
		}
	}
	for ri := range runs {
		reqs := runs[ri].Reqs
		for i := range reqs {
			t := reqs[i].First
			if batch[ri][i] != peak {
				continue
			}
			for j := range reqs {
				if q := &reqs[j]; q.Sent < t && q.First > t && waited(q, cfg, peak) {
					capped = true
					break
				}
			}
		}
	}
	for ri := range runs {
		// The engine's own word where a run scraped it: requests waiting while the batch
		// was at its peak.
		for _, w := range runs[ri].Gauges[scraped.Waiting] {
			if n, _ := decodingAt(runs[ri].Reqs, w.Time()); w.Value() >= 1 && n == peak {
				capped = true
			}
		}
	}
	if capped && peak > 0 {
		cfg.MaxBatch = peak
		cfg.MaxBatchedTokens = max(cfg.MaxBatchedTokens, peak)
		return sim.FitParam{Name: "max_batch", Value: float64(peak), Determined: true}
	}
	// The twin must at least run the batches the engine was seen running.
	if peak > cfg.MaxBatch {
		cfg.MaxBatch = peak
		cfg.MaxBatchedTokens = max(cfg.MaxBatchedTokens, peak)
	}
	return undetermined("max_batch", float64(cfg.MaxBatch),
		fmt.Sprintf("no run had requests waiting while the batch was full (at most %d decoding at once): add a closed-loop run at a concurrency above %d", peak, max(peak, cfg.MaxBatch)))
}

// prefillingKV is the KV held at t by the requests admitted and still prefilling: of
// those sent with no first token yet, all but the waiting gauge's count, the earliest
// sent (the engine admits in order), each holding its prompt and output.
func prefillingKV(reqs []Req, t int64, waiting int) int {
	var pending []*Req
	for j := range reqs {
		if q := &reqs[j]; q.Sent < t && q.First > t {
			pending = append(pending, q)
		}
	}
	kv := 0
	for _, q := range pending[:max(0, len(pending)-waiting)] {
		kv += q.Prompt + q.Output
	}
	return kv
}

// fitKV reads kv_cache_tokens off the KV-usage gauge, where a run scraped one: at each
// scrape the requests decoding hold their prompt and output (the engine reserves both at
// admission), and so do those admitted and still prefilling (prefillingKV, where the run
// scraped the waiting gauge too), which is usage x capacity; the capacity is the least-squares slope through
// the origin of the tokens held on the usage, over the scrapes with usage above 5%.
// Without the gauge it keeps the base value, raised to the most the runs held at once: a
// twin that could not hold what the engine held would queue where it did not.
func fitKV(runs []Run, cfg *sim.Config) sim.FitParam {
	most := 0
	var sxy, sxx float64
	var obs [][2]float64
	for ri := range runs {
		reqs := runs[ri].Reqs
		for i := range reqs {
			_, kv := decodingAt(reqs, reqs[i].First)
			most = max(most, kv)
		}
		waiting := map[int64]float64{}
		for _, w := range runs[ri].Gauges[scraped.Waiting] {
			waiting[w.Time()] = w.Value()
		}
		for _, p := range runs[ri].Gauges[scraped.KVUsage] {
			if u := p.Value(); u > 0.05 && u <= 1 {
				_, kv := decodingAt(reqs, p.Time())
				if w, ok := waiting[p.Time()]; ok {
					kv += prefillingKV(reqs, p.Time(), int(w))
				}
				obs = append(obs, [2]float64{u, float64(kv)})
				sxy, sxx = sxy+u*float64(kv), sxx+u*u
			}
		}
	}
	if len(obs) >= 5 {
		k := sxy / sxx
		rss := 0.0
		for _, o := range obs {
			rss += (o[1] - k*o[0]) * (o[1] - k*o[0])
		}
		se := math.Sqrt(rss / float64(len(obs)-1) / sxx)
		if se < 0.05*k && k >= float64(most) {
			cfg.KVCacheTokens = max(int(math.Round(k)), cfg.MaxModelLen)
			return sim.FitParam{Name: "kv_cache_tokens", Value: float64(cfg.KVCacheTokens), StdErr: se, Determined: true}
		}
	}
	cfg.KVCacheTokens = max(cfg.KVCacheTokens, most)
	why := fmt.Sprintf("no run scraped the engine's KV-usage gauge above 5%% (the runs held at most %d tokens at once): add a run with replay --scrape of the engine's /metrics at a concurrency that fills the batch", most)
	if len(obs) >= 5 {
		why = fmt.Sprintf("the KV-usage gauge does not follow the tokens held (%d scrapes): add a run with replay --scrape whose requests have long outputs, at a concurrency that fills the batch", len(obs))
	}
	return undetermined("kv_cache_tokens", float64(cfg.KVCacheTokens), why)
}

// fitPrefix reads the prefix cache off the cached prompt tokens the server reported: on
// when any request read some; its block size the greatest common divisor of the counts
// (a hit is whole blocks), determined once two different counts were seen. Off when the
// server reported 0 for requests that could have hit (the run's reusable share > 0).
func fitPrefix(runs []Run, cfg *sim.Config) []sim.FitParam {
	said, hits, reusable := 0, map[int]bool{}, false
	g := 0
	for _, r := range runs {
		if r.Meta.PrefixReusableShare != nil && *r.Meta.PrefixReusableShare > 0 {
			reusable = true
		}
		for _, q := range r.Reqs {
			if q.Cached < 0 {
				continue
			}
			said++
			if q.Cached > 0 {
				hits[q.Cached] = true
				g = gcd(g, q.Cached)
			}
		}
	}
	on := float64(0)
	if cfg.PrefixCache {
		on = 1
	}
	switch {
	case said == 0:
		a := "no run's server said how many prompt tokens it read from its cache (vLLM: --enable-prompt-tokens-details): add a run against a server that does, whose requests share prefixes"
		return []sim.FitParam{undetermined("prefix_cache", on, a), undetermined("prefix_block_tokens", float64(cfg.PrefixBlockTokens), a)}
	case len(hits) == 0 && reusable:
		cfg.PrefixCache = false
		return []sim.FitParam{{Name: "prefix_cache", Value: 0, Determined: true},
			undetermined("prefix_block_tokens", float64(cfg.PrefixBlockTokens), "the prefix cache is off")}
	case len(hits) == 0:
		a := "no request read cached tokens and no run's trace had shared prefixes: add a run of a trace with shared prefixes (conversations, a common system prompt)"
		return []sim.FitParam{undetermined("prefix_cache", on, a), undetermined("prefix_block_tokens", float64(cfg.PrefixBlockTokens), a)}
	}
	cfg.PrefixCache = true
	out := []sim.FitParam{{Name: "prefix_cache", Value: 1, Determined: true}}
	if len(hits) < 2 {
		cfg.PrefixBlockTokens = g // a multiple of the block: the best the runs say
		return append(out, undetermined("prefix_block_tokens", float64(g),
			fmt.Sprintf("every hit was %d tokens: add a run whose requests share prefixes of varied lengths", g)))
	}
	cfg.PrefixBlockTokens = g
	return append(out, sim.FitParam{Name: "prefix_block_tokens", Value: float64(g), Determined: true})
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
