// Package scraped holds the engine metrics analysis knows (Metrics: vLLM, SGLang, TGI,
// llama.cpp, DCGM; docs/metrics.md, "Server metrics") and how their scraped series
// combine: Align turns a run's kept samples (decode.ServerData) into one value per role
// and scrape instant, summed, averaged or differenced by the role's rule, and Gauge,
// Increase and Mean read a role over a time range. Package analysis builds its server
// section and the time series' server columns from them.
package scraped

import (
	"math"
	"slices"
	"sort"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"
	"github.com/llmreplay/llmreplay/wire"
)

// Role is the quantity a known metric measures.
type Role uint8

const (
	Running       Role = iota // requests the engine is running (batch)
	Waiting                   // requests queued in the engine
	KVUsage                   // KV-cache usage, fraction 0..1
	Preemptions               // preemptions, counter
	PrefixQueries             // prefix-cache queries (tokens), counter
	PrefixHits                // prefix-cache hits (tokens), counter
	PrefixRate                // the engine's own prefix-cache hit rate gauge, 0..1
	GPUUtil                   // GPU utilisation, percent
	GPUPower                  // GPU power draw, W
	GPUMem                    // GPU framebuffer memory used, MiB
	NRoles
)

// How the series of one role combine at one instant: a count or a draw adds up over
// engines and GPUs, a fraction is averaged, a counter's increase adds up.
type roleAgg uint8

const (
	aggSum roleAgg = iota
	aggMean
	aggCounter
)

var roleAggs = [NRoles]roleAgg{
	Running: aggSum, Waiting: aggSum, KVUsage: aggMean, Preemptions: aggCounter,
	PrefixQueries: aggCounter, PrefixHits: aggCounter, PrefixRate: aggMean,
	GPUUtil: aggMean, GPUPower: aggSum, GPUMem: aggSum,
}

// Metric is one known metric name. Where an engine renamed a metric, both names are
// known and Rank orders them: a source that exposes a lower-ranked name for a role has its
// higher-ranked names for that role ignored, so a version exposing both is not counted twice.
type Metric struct {
	Name   string
	Engine string
	Role   Role
	Rank   int
}

// Metrics is the table docs/metrics.md ("Server metrics") documents, with the source
// of each name.
var Metrics = []Metric{
	{wire.VLLMRequestsRunning, "vllm", Running, 0},
	{wire.VLLMRequestsWaiting, "vllm", Waiting, 0},
	{wire.VLLMKVCacheUsage, "vllm", KVUsage, 0},
	{wire.VLLMGPUCacheUsage, "vllm", KVUsage, 1},
	{wire.VLLMPreemptionsTotal, "vllm", Preemptions, 0},
	{wire.VLLMPreemptions, "vllm", Preemptions, 1},
	{wire.VLLMPrefixCacheQueries, "vllm", PrefixQueries, 0},
	{wire.VLLMGPUPrefixCacheQueries, "vllm", PrefixQueries, 1},
	{wire.VLLMPrefixCacheHits, "vllm", PrefixHits, 0},
	{wire.VLLMGPUPrefixCacheHits, "vllm", PrefixHits, 1},
	{wire.VLLMGPUPrefixCacheHitRate, "vllm", PrefixRate, 0},
	{wire.SGLangRequestsRunning, "sglang", Running, 0},
	{wire.SGLangRequestsQueued, "sglang", Waiting, 0},
	{wire.SGLangTokenUsage, "sglang", KVUsage, 0},
	{wire.SGLangCacheHitRate, "sglang", PrefixRate, 0},
	{wire.TGIBatchSize, "tgi", Running, 0},
	{wire.TGIQueueSize, "tgi", Waiting, 0},
	{wire.LlamaCPPRequestsProcessing, "llamacpp", Running, 0},
	{wire.LlamaCPPRequestsDeferred, "llamacpp", Waiting, 0},
	{wire.LlamaCPPKVCacheUsage, "llamacpp", KVUsage, 0},
	{wire.DCGMGPUUtil, "dcgm", GPUUtil, 0},
	{wire.DCGMPowerUsage, "dcgm", GPUPower, 0},
	{wire.DCGMFBUsed, "dcgm", GPUMem, 0},
}

// GaugeStats summarises a gauge's aligned samples in the window: their mean, type-7 p99
// and max; N == 0 (and NaN figures) when nothing exposed it.
type GaugeStats struct {
	N              int64
	Mean, P99, Max float64
}

// Point is one aligned value of a role: its time (ns) and value; for a counter role,
// the increase between two consecutive scrapes, stamped at the later one.
type Point struct {
	t int64
	v float64
}

// Time is the point's time (ns on the run clock); Value its value.
func (p Point) Time() int64    { return p.t }
func (p Point) Value() float64 { return p.v }

// Align turns the kept samples into, per role, one value per scrape instant.
// Gauges: the series of one source at one scrape combine by the role's rule; the sources
// then combine at the same grid tick (t rounded to the scrape interval), so that two
// endpoints scraped a few milliseconds apart add up. Counters: per series, the increase
// between consecutive scrapes (a drop is a reset: the new value is the increase), stamped
// at the later scrape.
func Align(sd *decode.ServerData) [NRoles][]Point {
	var out [NRoles][]Point
	// The rank used for each (source, role): the lowest exposed.
	best := map[[2]int]int{}
	for _, s := range sd.Series {
		m := Metrics[s.Metric]
		k := [2]int{s.Source, int(m.Role)}
		if r, ok := best[k]; !ok || m.Rank < r {
			best[k] = m.Rank
		}
	}
	use := make([]bool, len(sd.Series))
	for i, s := range sd.Series {
		m := Metrics[s.Metric]
		use[i] = best[[2]int{s.Source, int(m.Role)}] == m.Rank
	}
	iv := sd.IntervalNS
	if iv <= 0 {
		iv = 1e9
	}
	// Samples by series, in time order.
	bySeries := make([][]decode.ServerSample, len(sd.Series))
	for _, x := range sd.Samples {
		if use[x.Series] {
			bySeries[x.Series] = append(bySeries[x.Series], x)
		}
	}
	type acc struct {
		sum float64
		n   int
		t   int64
	}
	// Gauges: per (role, source, instant), then per (role, tick).
	perScrape := map[[3]int64]*acc{}
	for i, xs := range bySeries {
		s := sd.Series[i]
		role := Metrics[s.Metric].Role
		slices.SortStableFunc(xs, func(a, b decode.ServerSample) int { return cmpInt64(a.T, b.T) })
		if roleAggs[role] == aggCounter {
			for j := 1; j < len(xs); j++ {
				d := xs[j].V - xs[j-1].V
				if d < 0 {
					d = xs[j].V
				}
				out[role] = append(out[role], Point{xs[j].T, d})
			}
			continue
		}
		for _, x := range xs {
			if math.IsNaN(x.V) {
				continue
			}
			k := [3]int64{int64(role), int64(s.Source), x.T}
			a := perScrape[k]
			if a == nil {
				a = &acc{t: x.T}
				perScrape[k] = a
			}
			a.sum += x.V
			a.n++
		}
	}
	perTick := map[[2]int64]*acc{}
	keys := make([][3]int64, 0, len(perScrape))
	for k := range perScrape {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [3]int64) int {
		for i := range a {
			if c := cmpInt64(a[i], b[i]); c != 0 {
				return c
			}
		}
		return 0
	})
	lastTick := map[[3]int64]bool{} // (role, source, tick) already counted: a late scrape replaces nothing
	for _, k := range keys {
		a := perScrape[k]
		role := Role(k[0])
		v := a.sum
		if roleAggs[role] == aggMean {
			v /= float64(a.n)
		}
		tick := floorDiv(a.t+iv/2, iv)
		if lastTick[[3]int64{k[0], k[1], tick}] {
			continue
		}
		lastTick[[3]int64{k[0], k[1], tick}] = true
		tk := [2]int64{k[0], tick}
		b := perTick[tk]
		if b == nil {
			b = &acc{t: a.t}
			perTick[tk] = b
		}
		b.sum += v
		b.n++
		b.t = min(b.t, a.t)
	}
	for k, b := range perTick {
		role := Role(k[0])
		v := b.sum
		if roleAggs[role] == aggMean {
			v /= float64(b.n)
		}
		out[role] = append(out[role], Point{b.t, v})
	}
	for r := range out {
		slices.SortStableFunc(out[r], func(a, b Point) int { return cmpInt64(a.t, b.t) })
	}
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// within returns the points of pts (sorted by time) stamped in [lo, hi), by binary search:
// the time series asks once per interval.
func within(pts []Point, lo, hi int64) []Point {
	a := sort.Search(len(pts), func(i int) bool { return pts[i].t >= lo })
	b := sort.Search(len(pts), func(i int) bool { return pts[i].t >= hi })
	return pts[a:max(a, b)]
}

// Gauge summarises the points of pts in [lo, hi).
func Gauge(pts []Point, lo, hi int64) GaugeStats {
	var xs []float64
	for _, p := range within(pts, lo, hi) {
		xs = append(xs, p.v)
	}
	nan := math.NaN()
	if len(xs) == 0 {
		return GaugeStats{Mean: nan, P99: nan, Max: nan}
	}
	q := stats.Summarize(xs)
	return GaugeStats{N: q.N, Mean: q.Mean, P99: stats.Type7(xs, 0.99), Max: q.Max}
}

// Increase sums the increases stamped in [lo, hi); NaN when the role has none
// there (nothing exposed, or a single scrape).
func Increase(pts []Point, lo, hi int64) float64 {
	sum, n := sumWithin(pts, lo, hi)
	if n == 0 {
		return math.NaN()
	}
	return sum
}

// Mean is the mean of the points stamped in [lo, hi); NaN when none.
func Mean(pts []Point, lo, hi int64) float64 {
	sum, n := sumWithin(pts, lo, hi)
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// sumWithin is the sum and count of the points in [lo, hi).
func sumWithin(pts []Point, lo, hi int64) (float64, int) {
	sum, n := 0.0, 0
	for _, p := range within(pts, lo, hi) {
		sum += p.v
		n++
	}
	return sum, n
}

// Names are Metrics' names in its order, so that a kept series' Metric (decode.LoadOptions
// Metrics) indexes Metrics.
func Names() []string {
	names := make([]string, len(Metrics))
	for i, m := range Metrics {
		names[i] = m.Name
	}
	return names
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
