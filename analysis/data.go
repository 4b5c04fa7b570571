package analysis

import (
	"github.com/llmreplay/llmreplay/stats"

	"math"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
)

// statuses are the contract's statuses in its order; a request's status is stored as its
// index, named by the st* constants.
var statuses = results.Statuses()

const (
	stOK uint8 = iota
	stHTTPError
	stTimeout
	stTransportError
	stStreamError
	stDropped
	stCanceled
)

// binNS is the resolution at which output tokens are attributed to time: every chunk's
// tokens go into the 10 ms bin in which the chunk arrived. Window bounds are snapped to this
// grid, so the sustained rate counts exactly the tokens that arrived between the printed bounds.
const binNS = int64(10e6)

// MaxSpan bounds the time axis: every *_ns offset must lie in [0, MaxSpan) from the run
// start. It keeps the 10 ms token bins of a run under 140 MB and makes a corrupt offset an
// error instead of an allocation of the size it claims.
const MaxSpan = 48 * time.Hour

// null marks a missing int64 (sent_ns, first_token_ns, end_ns) or int32 value in Data's
// columns. Not results.Null (-1): analysis validates what it reads, and -1 in a file is a
// bad value to report, not a null.
const (
	null64 = math.MinInt64
	null32 = math.MinInt32
)

// read batch by batch and never kept.
type Data struct {
	Files []string          // as given to Load
	Runs  []results.RunMeta // one per file, in Files order
	// Mixed is set when files of different runs were pooled (LoadOptions.AllowMixed).
	Mixed bool
	// ShiftNS is, per file, the offset added to its *_ns columns to put every file on one
	// time axis whose zero is the earliest run_start_unix_ns.
	ShiftNS []int64
	// BaseUnixNS is the wall-clock time of the common time axis's zero.
	BaseUnixNS int64
	// fileEnd is, per file, one past its last row's index in the per-request columns.
	fileEnd []int

	// Per request, in file order (null64/null32 for nulls).
	scheduled, sent, first, end   []int64
	prompt, promptServer          []int32
	outTarget, outTokens          []int32
	outSource                     []uint8 // 0 none, 1 usage, 2 tokenizer
	status                        []uint8
	nChunks                       []int32
	chunkTokSum                   []int64 // sum of chunk_tokens; -1 when chunk_tokens is null
	firstChunkMismatch, hasChunkT int64

	// Conversations (results revision 1.1), per request; nil when no file given holds a
	// value in the column (a file older than 1.1, or an open-loop run without sessions
	// or cached counts), so such runs cost no memory for them.
	sessionID, sessionWait []int64
	turn, cached           []int32

	// ITL samples of ok requests: every gap between consecutive chunks, and per token (a gap
	// before a chunk of k tokens counts k times as gap/k) where chunk_tokens are known.
	itl, itlTok      stats.Hist
	buf              bufTally  // the buffered-stream evidence (buffered.go)
	multiTokenChunks bool      // some chunk_tokens entry is above 1
	tokenBins        []float64 // output tokens of ok requests whose chunk arrived in [i*binNS, (i+1)*binNS)

	// server: the known samples of the metrics files the runs name (RunMeta.MetricsFile);
	// nil when no file names one.
	server *serverData
}

// N returns the number of requests.
func (d *Data) N() int { return len(d.status) }

// their rows.
func (d *Data) alloc(n int) {
	d.scheduled, d.sent, d.first, d.end = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	d.prompt, d.promptServer, d.outTarget, d.outTokens = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	d.outSource, d.status = make([]uint8, n), make([]uint8, n)
	d.nChunks, d.chunkTokSum = make([]int32, n), make([]int64, n)
}

// optionalColumns are the revision-1.1 columns analysis reads when a file has them (an
// older file reads them as null), in the order of the o* constants.
var optionalColumns = []string{results.ColSessionID, results.ColTurn, results.ColSessionWaitNS, results.ColPromptTokensCached}

const (
	oSessionID = iota
	oTurn
	oSessionWait
	oCached
)

// allocOptional sizes the k-th optional column for n requests, every entry null.
func (d *Data) allocOptional(k, n int) {
	fill64 := func() []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = null64
		}
		return s
	}
	fill32 := func() []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = null32
		}
		return s
	}
	switch k {
	case oSessionID:
		d.sessionID = fill64()
	case oTurn:
		d.turn = fill32()
	case oSessionWait:
		d.sessionWait = fill64()
	case oCached:
		d.cached = fill32()
	}
}

// optional returns d's k-th optional column (nil when not allocated).
func (d *Data) optional64(k int) []int64 {
	if k == oSessionID {
		return d.sessionID
	}
	return d.sessionWait
}

func (d *Data) optional32(k int) []int32 {
	if k == oTurn {
		return d.turn
	}
	return d.cached
}

func (d *Data) optionalAllocated(k int) bool {
	if k == oSessionID || k == oSessionWait {
		return d.optional64(k) != nil
	}
	return d.optional32(k) != nil
}
