package analysis

import (
	"math"
	"slices"

	"github.com/llmreplay/llmreplay/internal/quantile"
)

// usDense is the range of the dense part of a usHist: gaps under 2^20 µs (1.05 s).
const usDense = 1 << 20

// usHist holds chunk-level samples (ITL) without keeping them: a count per microsecond
// (each sample rounded to the nearest µs) below 1.05 s, and the rare longer gaps exactly.
// Percentiles are type-7 interpolations (quantile.Rank7) between order statistics of the rounded samples,
// so they are exact to ±0.5 µs; the mean and max use the unrounded values. A million
// requests of 150 tokens give 1.5e8 gaps, which as float32s alone would be 600 MB.
type usHist struct {
	dense []int64 // len usDense, allocated on the first sample
	over  []float64
	overW []int64
	n     int64
	sumNS float64 // weighted sum of unrounded samples, ns
	maxNS float64
}

// add counts a sample of ns nanoseconds w times.
func (h *usHist) add(ns float64, w int64) {
	if h.dense == nil {
		h.dense = make([]int64, usDense)
	}
	h.n += w
	h.sumNS += ns * float64(w)
	if ns > h.maxNS || h.n == w {
		h.maxNS = ns
	}
	if us := int64(math.Round(ns / 1e3)); us < usDense {
		h.dense[max(us, 0)] += w
	} else {
		h.over = append(h.over, math.Round(ns/1e3))
		h.overW = append(h.overW, w)
	}
}

// merge adds o's samples to h.
func (h *usHist) merge(o *usHist) {
	if o == nil || o.n == 0 {
		return
	}
	if h.n == 0 || o.maxNS > h.maxNS {
		h.maxNS = o.maxNS
	}
	if h.dense == nil {
		h.dense = make([]int64, usDense)
	}
	for i, c := range o.dense {
		h.dense[i] += c
	}
	h.over, h.overW = append(h.over, o.over...), append(h.overW, o.overW...)
	h.n += o.n
	h.sumNS += o.sumNS
}

// summary returns the reported figures in milliseconds.
func (h *usHist) summary() Quantiles {
	if h == nil || h.n == 0 {
		return Quantiles{}
	}
	// The long gaps, in order, after the dense counts.
	idx := make([]int, len(h.over))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case h.over[a] < h.over[b]:
			return -1
		case h.over[a] > h.over[b]:
			return 1
		}
		return 0
	})
	// valueAt returns the rank-r order statistic (0-based) in µs.
	valueAt := func(r int64) float64 {
		var cum int64
		for us, c := range h.dense {
			if cum+c > r {
				return float64(us)
			}
			cum += c
		}
		for _, i := range idx {
			if cum+h.overW[i] > r {
				return h.over[i]
			}
			cum += h.overW[i]
		}
		return h.maxNS / 1e3
	}
	q := Quantiles{N: h.n, Mean: h.sumNS / float64(h.n) / 1e6, Max: h.maxNS / 1e6}
	var ps [len(reportedPs)]float64
	for i, p := range reportedPs {
		lo, frac := quantile.Rank7(h.n, p)
		a := valueAt(lo)
		if frac > 0 {
			a += frac * (valueAt(lo+1) - a)
		}
		ps[i] = a / 1e3
	}
	q.set(ps[:])
	return q
}
