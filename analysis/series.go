package analysis

import (
	"math"
	"slices"
	"time"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"
)

// MSER-5 parameters: the output-token series is read in 100 ms bins, averaged in batches of
// 5 (0.5 s), and needs at least 10 batches (5 s of arrivals) to choose a truncation point.
const (
	msserBinNS      = int64(100e6)
	msserBatch      = 5
	msserMinBatches = 10
)

// detectWarmup chooses the warm-up by MSER-5 (stats.MSER, White 1997; Franklin and White
// 2008) over the batch means of the ok-request output-token rate between the first send and
// the last arrival, and returns the truncation of d batches as a duration.
//
// A truncation at the limit d = m/2 is MSER's sign that the series never settled: the
// caller warns.
func detectWarmup(tokenBins []float64, firstNS, lastNS int64) (d time.Duration, ok, atLimit bool) {
	perBin := msserBinNS / decode.BinNS
	b0 := firstNS / decode.BinNS
	span := (lastNS - firstNS) / msserBinNS // whole 100 ms bins
	m := int(span) / msserBatch
	if m < msserMinBatches {
		return 0, false, false
	}
	z := make([]float64, m)
	for j := range z {
		var s float64
		for k := int64(0); k < int64(msserBatch)*perBin; k++ {
			b := b0 + int64(j*msserBatch)*perBin + k
			if b < int64(len(tokenBins)) {
				s += tokenBins[b]
			}
		}
		z[j] = s
	}
	bestD, atLimit := stats.MSER(z)
	return time.Duration(int64(bestD*msserBatch) * msserBinNS), true, atLimit
}

// Trend is an ordinary least-squares line y = a + Slope*t fitted to a series over the
// steady-state window, with a Newey-West (HAC) standard error because queue lengths and
// latencies are autocorrelated and a plain OLS t-test would find trends in noise.
type Trend struct {
	Points int     // points in the fit; 0 when the window was too short to test
	Slope  float64 // units per second
	T      float64 // Slope / its HAC standard error
	Mean   float64 // mean of y
	Rise   float64 // Slope * window length: the fitted change across the window
	Up     bool    // T > trendT and Rise > trendRise*Mean
}

// A trend is "up" when its t statistic exceeds 3 (one-sided p < 0.0014 under the normal
// approximation) and the fitted rise across the window exceeds 25% of the series mean
// (so a long run cannot flag a tiny, significant drift).
const (
	trendT         = 3.0
	trendRise      = 0.25
	trendMinPoints = 10
)

// fitTrend fits y on t (NaN y are skipped) by stats.SlopeHAC.
func fitTrend(ts, ys []float64, length float64) Trend {
	var x, y []float64
	for i := range ys {
		if !math.IsNaN(ys[i]) {
			x, y = append(x, ts[i]), append(y, ys[i])
		}
	}
	n := len(x)
	tr := Trend{Points: n}
	if n < trendMinPoints {
		tr.Points = 0
		return tr
	}
	b, t, mean, ok := stats.SlopeHAC(x, y)
	tr.Mean = mean
	if !ok {
		return tr
	}
	tr.Slope, tr.T = b, t
	tr.Rise = b * length
	tr.Up = tr.T > trendT && tr.Rise > trendRise*math.Abs(tr.Mean)
	return tr
}

// series builds the time series at Options.Interval from time zero (the run start).
func (r *Report) series(d *decode.Data) {
	iv := int64(r.Options.Interval)
	var maxT int64
	for i := range d.Status {
		maxT = max(maxT, d.Scheduled[i], d.Sent[i], d.End[i])
	}
	if d.N() == 0 {
		return
	}
	n := int(maxT/iv) + 1
	s := make([]Interval, n)
	partial := make([]float64, n) // in-flight ns inside the request's first and last interval
	diff := make([]int64, n+1)    // requests in flight through whole intervals
	ttfts := make([][]float64, n)
	for i, st := range d.Status {
		at := d.Sent[i]
		if at == decode.Null64 {
			at = d.Scheduled[i]
		}
		k := int(max(at, 0) / iv)
		switch st {
		case decode.StOK:
			// A response that is not streamed comes whole: its latency is its first token's.
			if unaryRow(d, i) {
				ttfts[k] = append(ttfts[k], d.E2EMS(i))
			} else {
				ttfts[k] = append(ttfts[k], d.TTFTMS(i))
			}
			s[int(d.End[i]/iv)].Completed++
		case decode.StDropped:
			s[int(max(d.Scheduled[i], 0)/iv)].Dropped++
		case decode.StCanceled:
		default:
			s[k].Errors++
		}
		if d.Sent[i] == decode.Null64 {
			continue
		}
		s[k].Sent++
		// In flight from sent to end (a failed request with no output leaves when sent:
		// the results format has no time for its failure).
		a, b := max(d.Sent[i], 0), d.End[i]
		if b == decode.Null64 || b < a {
			continue
		}
		ka, kb := a/iv, b/iv
		if ka == kb {
			partial[ka] += float64(b - a)
			continue
		}
		partial[ka] += float64((ka+1)*iv - a)
		partial[kb] += float64(b - kb*iv)
		diff[ka+1]++
		diff[kb]--
	}
	var full int64
	perBins := iv / decode.BinNS
	for k := range s {
		full += diff[k]
		s[k].StartS = float64(int64(k)*iv) / 1e9
		s[k].Inflight = (partial[k] + float64(full*iv)) / float64(iv)
		var tok float64
		for b := int64(k) * perBins; b < int64(k+1)*perBins && b < int64(len(d.TokenBins)); b++ {
			tok += d.TokenBins[b]
		}
		s[k].OutputTokensPerS = tok / (float64(iv) / 1e9)
		s[k].TTFTP50, s[k].TTFTP99 = math.NaN(), math.NaN()
		s[k].noServerColumns()
		if len(ttfts[k]) > 0 {
			slices.Sort(ttfts[k])
			s[k].TTFTP50, s[k].TTFTP99 = stats.Type7(ttfts[k], 0.5), stats.Type7(ttfts[k], 0.99)
		}
	}
	r.Series = s
}

// ClientLimited is the one client-limited decision, the report's flag and `replay
// --strict`'s exit status alike: the schedule lateness judged (sent_ns − scheduled_ns, ms,
// as Summarize gives it: of every sent request in open loop, of the steady state after the
// first wave in closed loop, ClosedLoop.SteadyLateness) has a type-7 p99 above bound, so the
// endpoint was not offered the load the schedule asked for.
func ClientLimited(lateness stats.Quantiles, bound time.Duration) bool {
	return lateness.N > 0 && lateness.P99 > float64(bound)/1e6
}

func (r *Report) flags(d *decode.Data) {
	f := &r.Flags
	f.MaxLateness = r.Options.MaxLateness
	if c := r.Closed; c != nil {
		// A closed loop's first wave is due at once (or over the ramp-up): its lateness is
		// the time to put C requests on the wire, not a client that cannot keep up.
		if ClientLimited(c.SteadyLateness, f.MaxLateness) {
			f.ClientLimited = true
			r.warnf("client-limited (%s): schedule lateness p99 %.3f ms > %v: the replayer did not keep its %d workers busy, so the endpoint saw less concurrency than asked",
				r.basis(), c.SteadyLateness.P99, f.MaxLateness, c.Concurrency)
		} else if c.SteadyLateness.N == 0 {
			r.warnf("closed loop: no request after the first wave of %d: client-limited not judged", c.FirstWaveRequests)
		}
	} else if ClientLimited(r.Lateness, f.MaxLateness) {
		f.ClientLimited = true
		r.warnf("client-limited: schedule lateness p99 %.3f ms > %v: the replayer did not send on time, so the load applied was lower and burstier than the trace's", r.Lateness.P99, f.MaxLateness)
	}
	t := r.Throughput
	if math.IsNaN(t.WindowStartS) {
		return
	}
	ivS := r.Options.Interval.Seconds()
	var ts, inflight, ttft []float64
	for _, p := range r.Series {
		if p.StartS >= t.WindowStartS-1e-9 && p.StartS+ivS <= t.WindowEndS+1e-9 {
			ts = append(ts, p.StartS+ivS/2)
			inflight = append(inflight, p.Inflight)
			ttft = append(ttft, p.TTFTP50)
		}
	}
	length := t.WindowEndS - t.WindowStartS
	f.InflightTrend = fitTrend(ts, inflight, length)
	f.TTFTTrend = fitTrend(ts, ttft, length)
	if f.InflightTrend.Points == 0 || f.TTFTTrend.Points == 0 {
		r.warnf("window holds fewer than %d intervals of %v: overload not tested", trendMinPoints, r.Options.Interval)
		return
	}
	if f.InflightTrend.Up && f.TTFTTrend.Up {
		f.Overloaded = true
		r.warnf("overloaded: in-flight (+%.1f/s, t=%.1f) and %s p50 (+%.1f ms/s, t=%.1f) grow through the window: throughput is what the endpoint gave, not what it sustains",
			f.InflightTrend.Slope, f.InflightTrend.T, r.firstName(), f.TTFTTrend.Slope, f.TTFTTrend.T)
	}
}
