package analysis

import (
	"fmt"
	"math"
	"time"
)

// The buffered-stream rule. The client stamps chunk_ns when a read returns, before parsing
// (docs/results-format.md), so chunks that arrived in one read share a stamp: their gap
// is exactly 0. A proxy or gateway that buffers SSE (nginx with proxy_buffering on, its
// default) forwards the stream in bursts of many chunks, one read each, with long gaps
// between: TTFT and ITL then measure the proxy, not the engine. An engine sending to the
// replayer directly writes each step's token as it is made; only when the reader falls
// behind (a busy machine, a sim lagging its model) do a few chunks share a read.
//
// A stream is judged when it is ok and has at least BufferedMinChunks chunks; it is
// delivered in bursts when its chunks per read (chunks / distinct stamps) is at least
// BufferedChunksPerRead and its other (non-zero) gaps last BufferedGap or more on
// average. The second test tells a proxy from a reader merely slower than the tokens:
// both give gaps of about chunks-per-read times the engine's ITL, but a reader that
// keeps its schedule (not client-limited) reads within the lateness bound, while a proxy
// holds a burst for as long as its buffer takes to fill. A stream wholly in one read has
// no gap to judge and is not counted in bursts. The run is flagged "stream buffered between server and client"
// when at least BufferedMinStreams streams were judged and a share of at least
// BufferedShare of them came in bursts, unless the run is client-limited: a replayer that
// cannot send on time cannot read on time either, and its own backlog of unread chunks
// bunches them exactly as a proxy's buffer does (measured on this project's 2-core test
// machine: a saturated fixed-profile run read 3.6 chunks per read; docs/metrics.md).
const (
	BufferedMinChunks     = 8
	BufferedChunksPerRead = 3.0
	BufferedShare         = 0.5
	BufferedMinStreams    = 5
	BufferedGap           = 10 * time.Millisecond
)

// Buffered is the evidence of the buffered-stream rule (docs/metrics.md, "Flags").
type Buffered struct {
	// Streams is the ok streams judged (>= BufferedMinChunks chunks); Bursty those whose
	// chunks per read reached BufferedChunksPerRead with other gaps of BufferedGap or more
	// on average; BurstyShare = Bursty / Streams (NaN
	// with no stream).
	Streams, Bursty int64
	BurstyShare     float64
	// ZeroGapShare is the share of the judged streams' inter-chunk gaps that are 0 (two
	// chunks in one read); ChunksPerRead is their chunks over their reads, pooled;
	// OtherGapMeanMS is the mean of their other (non-zero) gaps, in ms. NaN when undefined.
	ZeroGapShare, ChunksPerRead, OtherGapMeanMS float64
	// ClientLimited: the run was client-limited, so the rule was not applied (the figures
	// above are still given).
	ClientLimited bool
	// Flagged: not ClientLimited, Streams >= BufferedMinStreams and BurstyShare >=
	// BufferedShare.
	Flagged bool
}

// bufTally accumulates the evidence over streams, one addStream each; tallies of
// different workers merge.
type bufTally struct {
	streams, bursty, chunks, zeros, gapSumNS int64
}

// addStream counts one ok stream of nc chunks, zeros of whose gaps were 0, the gaps
// summing to gapSumNS.
func (t *bufTally) addStream(nc, zeros int, gapSumNS int64) {
	if nc < BufferedMinChunks {
		return
	}
	t.streams++
	reads := nc - zeros
	if reads >= 2 && float64(nc) >= BufferedChunksPerRead*float64(reads) && gapSumNS >= int64(BufferedGap)*int64(reads-1) {
		t.bursty++
	}
	t.chunks += int64(nc)
	t.zeros += int64(zeros)
	t.gapSumNS += gapSumNS
}

func (t *bufTally) merge(o *bufTally) {
	t.streams += o.streams
	t.bursty += o.bursty
	t.chunks += o.chunks
	t.zeros += o.zeros
	t.gapSumNS += o.gapSumNS
}

// buffered applies the rule to the tally of a run, client-limited or not.
func (t *bufTally) buffered(clientLimited bool) Buffered {
	nan := math.NaN()
	b := Buffered{Streams: t.streams, Bursty: t.bursty, BurstyShare: nan, ZeroGapShare: nan, ChunksPerRead: nan, OtherGapMeanMS: nan, ClientLimited: clientLimited}
	if t.streams == 0 {
		return b
	}
	gaps := t.chunks - t.streams
	reads := t.chunks - t.zeros
	b.BurstyShare = float64(t.bursty) / float64(t.streams)
	b.ZeroGapShare = float64(t.zeros) / float64(gaps)
	b.ChunksPerRead = float64(t.chunks) / float64(reads)
	if other := gaps - t.zeros; other > 0 {
		b.OtherGapMeanMS = float64(t.gapSumNS) / float64(other) / 1e6
	}
	b.Flagged = !clientLimited && t.streams >= BufferedMinStreams && b.BurstyShare >= BufferedShare
	return b
}

// Warning is the report's one-line warning for a flagged run ("" when not).
func (b Buffered) Warning() string {
	if !b.Flagged {
		return ""
	}
	return fmt.Sprintf("stream buffered between server and client: %d of %d streams (%.0f%%) arrived %g or more chunks per read, %v or more apart (%.1f chunks per read on average; %.0f%% of gaps 0, the others %.3f ms on average): a proxy or gateway buffers the SSE stream, and TTFT and ITL measure it, not the engine",
		b.Bursty, b.Streams, 100*b.BurstyShare, BufferedChunksPerRead, BufferedGap, b.ChunksPerRead, 100*b.ZeroGapShare, b.OtherGapMeanMS)
}

// buffered applies the rule to the ok streams of d: Report.Buffered, Flags.Buffered and,
// when flagged, a warning.
func (r *Report) buffered(d *Data) {
	r.Buffered = d.buf.buffered(r.Flags.ClientLimited)
	r.Flags.Buffered = r.Buffered.Flagged
	if w := r.Buffered.Warning(); w != "" {
		r.Warnings = append(r.Warnings, w)
	}
}
