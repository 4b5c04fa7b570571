package stats

import (
	"math"
	"slices"
	"sort"
)

// usDense is the range of the dense part of a Hist: samples under 2^20 µs (1.05 s).
const usDense = 1 << 20

// Hist holds duration samples (chunk gaps: ITL) without keeping them: a count per
// microsecond (each sample rounded to the nearest µs) below 1.05 s, and the rare longer
// samples exactly (rounded likewise). Percentiles are type-7 interpolations (Rank7) between
// order statistics of the rounded samples, so they are exact to ±0.5 µs; the mean and max
// use the unrounded values. A million requests of 150 tokens give 1.5e8 gaps, which as
// float32s alone would be 600 MB; the counts take 8 MiB. The zero value is empty.
type Hist struct {
	dense []int64 // len usDense, allocated on the first sample
	over  []float64
	overW []int64
	n     int64
	sumNS float64 // weighted sum of unrounded samples, ns
	maxNS float64
}

// Add counts a sample of ns nanoseconds w times.
func (h *Hist) Add(ns float64, w int64) {
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

// CountUS counts one sample of us microseconds (us >= 0, already rounded) in the
// percentiles only, not in N, the mean or the max: a loop over many samples calls it per
// sample and AddTotals once for the lot, keeping the per-sample cost to one increment.
// Add(ns, 1) is CountUS(round(ns/1000)) plus AddTotals(1, ns, ns).
func (h *Hist) CountUS(us int64) {
	if d := h.dense; us < int64(len(d)) {
		d[us]++
		return
	}
	h.countSlow(us)
}

// countSlow is CountUS's rare path, kept out of line so that the common one inlines small.
//
//go:noinline
func (h *Hist) countSlow(us int64) {
	if us < usDense {
		h.dense = make([]int64, usDense)
		h.dense[us]++
		return
	}
	h.over = append(h.over, float64(us))
	h.overW = append(h.overW, 1)
}

// AddTotals adds n samples, counted with CountUS, whose unrounded values sum to sumNS and
// peak at maxNS nanoseconds, to N, the mean and the max.
func (h *Hist) AddTotals(n int64, sumNS, maxNS float64) {
	if h.n == 0 || maxNS > h.maxNS {
		h.maxNS = maxNS
	}
	h.n += n
	h.sumNS += sumNS
}

// Merge adds o's samples to h.
func (h *Hist) Merge(o *Hist) {
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

// Summary returns the reported figures (Summarize's) of h's samples in milliseconds.
func (h *Hist) Summary() Quantiles {
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
		lo, frac := Rank7(h.n, p)
		a := valueAt(lo)
		if frac > 0 {
			a += frac * (valueAt(lo+1) - a)
		}
		ps[i] = a / 1e3
	}
	q.set(ps[:])
	return q
}

// Ranks returns the number of samples and the rank-r order statistic (0-based, ms) of h's
// rounded samples, through a cumulative count over its dense part: O(log n) a lookup.
// Bootstrap.Quantile takes the two as its n and at.
func (h *Hist) Ranks() (int64, func(int64) float64) {
	if h == nil || h.n == 0 {
		return 0, nil
	}
	cum := make([]int64, 0, len(h.dense))
	var c int64
	for _, v := range h.dense {
		c += v
		cum = append(cum, c)
	}
	idx := make([]int, len(h.over))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return h.over[idx[a]] < h.over[idx[b]] })
	var ocum []int64
	for _, i := range idx {
		c += h.overW[i]
		ocum = append(ocum, c)
	}
	dense := c - sumOver(h.overW)
	return h.n, func(r int64) float64 {
		if r < dense {
			us := sort.Search(len(cum), func(i int) bool { return cum[i] > r })
			return float64(us) / 1e3
		}
		k := sort.Search(len(ocum), func(i int) bool { return ocum[i] > r })
		if k < len(idx) {
			return h.over[idx[k]] / 1e3
		}
		return h.maxNS / 1e6
	}
}

func sumOver(ws []int64) int64 {
	var s int64
	for _, w := range ws {
		s += w
	}
	return s
}
