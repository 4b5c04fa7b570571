package analysis

import (
	"github.com/llmreplay/llmreplay/analysis/decode"

	"math"
	"slices"

	"github.com/llmreplay/llmreplay/stats"
)

// PooledIntervals bootstraps the figures of a repeated sweep point over its repeats pooled,
// from each repeat's report and loaded data (the same order): TTFT and TPOT p99 over every
// ok request's (QuantileSorted), attainment over every non-canceled request (Proportion of
// the good ones; NoCI without an SLO), and sustained output tok/s over the 1 s windows of
// every repeat's steady-state window, in repeat order (BlockMean, the block length by
// BlockLength; a partial last second is left out). Each figure draws from its own stream,
// named by the load.
func PooledIntervals(reps []*Report, data []*decode.Data, b stats.Bootstrap, load string) (sus, att, ttft, tpot stats.CI) {
	b = b.WithDefaults()
	var ttfts, tpots, series []float64
	var good, den int64
	const perSecond = int64(1e9 / decode.BinNS)
	for k, d := range data {
		rep := reps[k]
		for i, st := range d.Status {
			if st != decode.StOK {
				continue
			}
			ttfts = append(ttfts, d.TTFTMS(i))
			if v := d.TPOTMS(i); !math.IsNaN(v) {
				tpots = append(tpots, v)
			}
		}
		if g := rep.Goodput; g != nil {
			good += g.Good
			den += rep.Requests.Total - rep.Requests.Canceled
		}
		t := rep.Throughput
		if math.IsNaN(t.WindowStartS) || math.IsNaN(t.WindowEndS) {
			continue
		}
		from, to := int64(math.Round(t.WindowStartS*1e9/float64(decode.BinNS))), int64(math.Round(t.WindowEndS*1e9/float64(decode.BinNS)))
		for s := from; s+perSecond <= to && s+perSecond <= int64(len(d.TokenBins)); s += perSecond {
			var sum float64
			for _, v := range d.TokenBins[s : s+perSecond] {
				sum += v
			}
			series = append(series, sum)
		}
	}
	slices.Sort(ttfts)
	slices.Sort(tpots)
	conf := b.Confidence
	ttft = b.QuantileSorted(ttfts, 0.99, "sweep "+load+" ttft p99").CI(conf)
	tpot = b.QuantileSorted(tpots, 0.99, "sweep "+load+" tpot p99").CI(conf)
	att = stats.NoCI()
	if reps[0].Goodput != nil {
		att = b.Proportion(good, den, "sweep "+load+" attainment").CI(conf)
	}
	sus = stats.NoCI()
	if len(series) >= 2 {
		sus = b.BlockMean(series, stats.BlockLength(series, 1), "sweep "+load+" sustained").CI(conf)
		sus.Lo = max(sus.Lo, 0) // a rate; the few-blocks widening may reach below 0
	}
	return sus, att, ttft, tpot
}
