package analysis

import (
	"fmt"
	"math"
	"time"

	"github.com/llmreplay/llmreplay/analysis/decode"
)

// The buffered-stream rule. The client stamps chunk_ns when a read returns, before parsing
// (docs/results-format.md), so chunks that arrived in one read share a stamp: their gap
// is exactly 0. A proxy or gateway that buffers SSE (nginx with proxy_buffering on, its
// default) forwards the stream in bursts of many chunks, one read each, with long gaps
// between: TTFT and ITL then measure the proxy, not the engine. An engine sending to the
// replayer directly writes each step's token as it is made; only when the reader falls
// behind (a busy machine, a sim lagging its model, tokens faster than a read) do several
// chunks share a read.
//
// A stream is judged when it is ok and has at least BufferedMinChunks chunks. It came in
// bursts when its chunks per read (chunks / distinct stamps) is at least
// BufferedChunksPerRead and its other (non-zero) gaps last, on average, at least the gap
// bound: the larger of BufferedGap and the schedule-lateness p99 the client-limited
// decision judges. The second test tells a proxy from a late reader: both give gaps of
// about chunks-per-read times the engine's ITL, but a reader late by L reads in one go
// what arrived in the last L, so its gaps stay within its lateness, while a proxy holds
// each burst for as long as its buffer takes to fill. A stream wholly in one read has no
// gap to judge and does not count as bursty. The run is flagged "stream buffered between
// server and client" when at least BufferedMinStreams streams were judged and a share of
// at least BufferedShare of them came in bursts. Measured figures: docs/metrics.md.
const (
	BufferedMinChunks     = decode.BufferedMinChunks
	BufferedChunksPerRead = decode.BufferedChunksPerRead
	BufferedShare         = 0.5
	BufferedMinStreams    = 5
	BufferedGap           = 10 * time.Millisecond
)

// Buffered is the evidence of the buffered-stream rule (docs/metrics.md, "Flags").
type Buffered struct {
	// Streams is the ok streams judged (>= BufferedMinChunks chunks); Bursty those whose
	// chunks per read reached BufferedChunksPerRead with other gaps of GapBoundMS or more
	// on average; BurstyShare = Bursty / Streams (NaN with no stream).
	Streams, Bursty int64
	BurstyShare     float64
	// GapBoundMS is the gap bound: max(BufferedGap, the judged schedule-lateness p99), ms.
	GapBoundMS float64
	// ZeroGapShare is the share of the judged streams' inter-chunk gaps that are 0 (two
	// chunks in one read); ChunksPerRead is their chunks over their reads, pooled;
	// OtherGapMeanMS is the mean of their other (non-zero) gaps, in ms. NaN when undefined.
	ZeroGapShare, ChunksPerRead, OtherGapMeanMS float64
	// Flagged: Streams >= BufferedMinStreams and BurstyShare >= BufferedShare.
	Flagged bool
}

// bufferedRule applies the rule to the tally of a run whose judged schedule-lateness p99 is
// latenessP99MS (NaN: none).
func bufferedRule(t *decode.BufTally, latenessP99MS float64) Buffered {
	nan := math.NaN()
	bound := float64(BufferedGap) / 1e6
	if latenessP99MS > bound { // false for NaN
		bound = latenessP99MS
	}
	b := Buffered{Streams: t.Streams, GapBoundMS: bound, BurstyShare: nan, ZeroGapShare: nan, ChunksPerRead: nan, OtherGapMeanMS: nan}
	if t.Streams == 0 {
		return b
	}
	for _, g := range t.BurstGapNS {
		if g >= bound*1e6 {
			b.Bursty++
		}
	}
	gaps := t.Chunks - t.Streams
	reads := t.Chunks - t.Zeros
	b.BurstyShare = float64(b.Bursty) / float64(t.Streams)
	b.ZeroGapShare = float64(t.Zeros) / float64(gaps)
	b.ChunksPerRead = float64(t.Chunks) / float64(reads)
	if other := gaps - t.Zeros; other > 0 {
		b.OtherGapMeanMS = float64(t.GapSumNS) / float64(other) / 1e6
	}
	b.Flagged = t.Streams >= BufferedMinStreams && b.BurstyShare >= BufferedShare
	return b
}

// Warning is the report's one-line warning for a flagged run ("" when not).
func (b Buffered) Warning() string {
	if !b.Flagged {
		return ""
	}
	return fmt.Sprintf("stream buffered between server and client: %d of %d streams (%.0f%%) arrived %g or more chunks per read, %.3f ms or more apart (%.1f chunks per read on average; %.0f%% of gaps 0, the others %.3f ms on average): a proxy or gateway buffers the SSE stream, and TTFT and ITL measure it, not the engine",
		b.Bursty, b.Streams, 100*b.BurstyShare, BufferedChunksPerRead, b.GapBoundMS, b.ChunksPerRead, 100*b.ZeroGapShare, b.OtherGapMeanMS)
}

// buffered applies the rule to the ok streams of d: Report.Buffered, Flags.Buffered and,
// when flagged, a warning. The lateness is the one the client-limited decision judged
// (a closed loop's steady state).
func (r *Report) buffered(d *decode.Data) {
	late := math.NaN()
	if c := r.Closed; c != nil {
		if c.SteadyLateness.N > 0 {
			late = c.SteadyLateness.P99
		}
	} else if r.Lateness.N > 0 {
		late = r.Lateness.P99
	}
	r.Buffered = bufferedRule(&d.Buf, late)
	r.Flags.Buffered = r.Buffered.Flagged
	if w := r.Buffered.Warning(); w != "" {
		r.Warnings = append(r.Warnings, w)
	}
}
