package decode

// BufferedMinChunks and BufferedChunksPerRead are the thresholds of the buffered-stream
// rule (analysis/buffered.go, docs/metrics.md) that a stream is tallied by as it is
// decoded: its chunks are not kept, so the tally cannot be judged afterwards.
const (
	BufferedMinChunks     = 8
	BufferedChunksPerRead = 3.0
)

// BufTally accumulates the buffered-stream rule's evidence over ok streams, one AddStream
// each; tallies of different workers merge. The gap bound depends on the whole run's
// lateness, so the streams with enough chunks per read keep their mean other gap
// (BurstGapNS) until the rule is applied. Streams, Chunks and Zeros count the streams of
// at least BufferedMinChunks chunks, their chunks and their gaps of 0; GapSumNS sums their
// gaps.
type BufTally struct {
	Streams, Chunks, Zeros, GapSumNS int64
	BurstGapNS                       []float64
}

// AddStream counts one ok stream of nc chunks, zeros of whose gaps were 0, the gaps
// summing to gapSumNS.
func (t *BufTally) AddStream(nc, zeros int, gapSumNS int64) {
	if nc < BufferedMinChunks {
		return
	}
	t.Streams++
	t.Chunks += int64(nc)
	t.Zeros += int64(zeros)
	t.GapSumNS += gapSumNS
	if reads := nc - zeros; reads >= 2 && float64(nc) >= BufferedChunksPerRead*float64(reads) {
		t.BurstGapNS = append(t.BurstGapNS, float64(gapSumNS)/float64(reads-1))
	}
}

// Merge adds o's tally to t.
func (t *BufTally) Merge(o *BufTally) {
	t.Streams += o.Streams
	t.Chunks += o.Chunks
	t.Zeros += o.Zeros
	t.GapSumNS += o.GapSumNS
	t.BurstGapNS = append(t.BurstGapNS, o.BurstGapNS...)
}
