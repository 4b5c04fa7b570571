package decode

import (
	"math"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// Statuses are the contract's statuses in its order; a request's status is stored in
// Data.Status as its index, named by the St* constants.
var Statuses = results.Statuses()

// StOK to StCanceled name the indexes of Statuses: ok, http_error, timeout,
// transport_error, stream_error, dropped, canceled.
const (
	StOK uint8 = iota
	StHTTPError
	StTimeout
	StTransportError
	StStreamError
	StDropped
	StCanceled
)

// BinNS is the resolution at which output tokens are attributed to time: every chunk's
// tokens go into the 10 ms bin in which the chunk arrived. Window bounds are snapped to this
// grid, so the sustained rate counts exactly the tokens that arrived between the printed bounds.
const BinNS = int64(10e6)

// MaxSpan bounds the time axis: every *_ns offset must lie in [0, MaxSpan) from the run
// start. It keeps the 10 ms token bins of a run under 140 MB and makes a corrupt offset an
// error instead of an allocation of the size it claims.
const MaxSpan = 48 * time.Hour

// Null64 and Null32 mark a missing int64 (sent_ns, first_token_ns, end_ns) or int32 value in Data's
// columns. Not results.Null (-1): analysis validates what it reads, and -1 in a file is a
// bad value to report, not a null.
const (
	Null64 = math.MinInt64
	Null32 = math.MinInt32
)

// Data is the part of one or more results files that analysis keeps: per-request scalars as
// columns (about 60 bytes a request), the inter-chunk gaps of ok requests (4 bytes a chunk)
// and the output tokens of ok requests binned at 10 ms by arrival. Chunk lists themselves are
// read batch by batch and never kept.
//
// The columns are exported for analysis's figures to read; Load alone writes them.
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
	// FileEnd is, per file, one past its last row's index in the per-request columns.
	FileEnd []int

	// Per request, in file order (Null64/Null32 for nulls): scheduled_ns, sent_ns,
	// first_token_ns and end_ns on the common time axis; prompt_tokens,
	// prompt_tokens_server, output_tokens_target, output_tokens; the source of
	// output_tokens; the status (an index in Statuses); the number of chunks.
	// FirstChunkMismatch counts the requests whose first or last chunk disagrees with
	// first_token_ns or end_ns; HasChunkT those with chunk_tokens.
	Scheduled, Sent, First, End   []int64
	Prompt, PromptServer          []int32
	OutTarget, OutTokens          []int32
	OutSource                     []uint8 // 0 none, 1 usage, 2 tokenizer
	Status                        []uint8
	NChunks                       []int32
	ChunkTokSum                   []int64 // sum of chunk_tokens; -1 when chunk_tokens is null
	FirstChunkMismatch, HasChunkT int64

	// Conversations (results revision 1.1), per request; nil when no file given holds a
	// value in the column (a file older than 1.1, or an open-loop run without sessions
	// or cached counts), so such runs cost no memory for them.
	SessionID, SessionWait []int64
	Turn, Cached           []int32
	// Agents (revision 1.2), likewise: the gap put before each call, and what the trace
	// recorded of it (arrival, duration, cache hit).
	Gap, RecArrival, RecDuration []int64
	RecCached                    []int32
	// Reasoning (revision 1.3), likewise: first_answer_ns on the common time axis (as
	// First), reasoning_tokens, and reasoning_tokens_source as its index in
	// ReasoningSources (Null32 for null).
	FirstAnswer                []int64
	Reasoning, ReasoningSource []int32
	// Images and inputs (revision 1.4), likewise: images the request sent and the prompt
	// tokens they count for (image_tokens); inputs of an embeddings request, documents of a
	// rerank (a request with inputs is not streamed: no first token, no output).
	Images, ImageTokens, Inputs []int32

	// ITL samples of ok requests: every gap between consecutive chunks, and per token (a gap
	// before a chunk of k tokens counts k times as gap/k) where chunk_tokens are known.
	ITL, ITLTok      stats.Hist
	Buf              BufTally  // the buffered-stream evidence (BufTally)
	MultiTokenChunks bool      // some chunk_tokens entry is above 1
	TokenBins        []float64 // output tokens of ok requests whose chunk arrived in [i*BinNS, (i+1)*BinNS)

	// Server: the kept samples (LoadOptions.Metrics) of the metrics files the runs name
	// (RunMeta.MetricsFile); nil when no file names one.
	Server *ServerData
}

// N returns the number of requests.
func (d *Data) N() int { return len(d.Status) }

// alloc sizes the per-request columns for n requests; row groups are decoded straight into
// their rows.
func (d *Data) alloc(n int) {
	d.Scheduled, d.Sent, d.First, d.End = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	d.Prompt, d.PromptServer, d.OutTarget, d.OutTokens = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	d.OutSource, d.Status = make([]uint8, n), make([]uint8, n)
	d.NChunks, d.ChunkTokSum = make([]int32, n), make([]int64, n)
}

// optionalColumns are the columns of revisions 1.1 to 1.4 analysis reads when a file has
// them (an older file reads them as null), in the order of the o* constants.
var optionalColumns = []string{results.ColSessionID, results.ColTurn, results.ColSessionWaitNS, results.ColPromptTokensCached,
	results.ColGapNS, results.ColRecordedArrivalNS, results.ColRecordedDurationNS, results.ColRecordedCachedTokens,
	results.ColFirstAnswerNS, results.ColReasoningTokens, results.ColReasoningTokensSource,
	results.ColImages, results.ColImageTokens, results.ColInputs}

// ReasoningSources are the values of reasoning_tokens_source, which Data.ReasoningSource
// holds as indexes.
var ReasoningSources = []string{results.SourceUsage, results.SourceChunkUsage, results.SourceTokenizer}

const (
	oSessionID = iota
	oTurn
	oSessionWait
	oCached
	oGap
	oRecArrival
	oRecDuration
	oRecCached
	oFirstAnswer
	oReasoning
	oReasoningSource // a string column, held as its index in ReasoningSources
	oImages
	oImageTokens
	oInputs
)

// is64 reports whether the k-th optional column holds int64 values (else int32).
func is64(k int) bool {
	switch k {
	case oSessionID, oSessionWait, oGap, oRecArrival, oRecDuration, oFirstAnswer:
		return true
	}
	return false
}

// allocOptional sizes the k-th optional column for n requests, every entry null.
func (d *Data) allocOptional(k, n int) {
	fill64 := func() []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = Null64
		}
		return s
	}
	fill32 := func() []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = Null32
		}
		return s
	}
	if is64(k) {
		*d.ref64(k) = fill64()
	} else {
		*d.ref32(k) = fill32()
	}
}

// ref64 and ref32 point at d's k-th optional column.
func (d *Data) ref64(k int) *[]int64 {
	switch k {
	case oSessionID:
		return &d.SessionID
	case oSessionWait:
		return &d.SessionWait
	case oGap:
		return &d.Gap
	case oRecArrival:
		return &d.RecArrival
	case oFirstAnswer:
		return &d.FirstAnswer
	}
	return &d.RecDuration
}

func (d *Data) ref32(k int) *[]int32 {
	switch k {
	case oTurn:
		return &d.Turn
	case oCached:
		return &d.Cached
	case oReasoning:
		return &d.Reasoning
	case oReasoningSource:
		return &d.ReasoningSource
	case oImages:
		return &d.Images
	case oImageTokens:
		return &d.ImageTokens
	case oInputs:
		return &d.Inputs
	}
	return &d.RecCached
}

// optional64 and optional32 return d's k-th optional column (nil when not allocated).
func (d *Data) optional64(k int) []int64 { return *d.ref64(k) }
func (d *Data) optional32(k int) []int32 { return *d.ref32(k) }

func (d *Data) optionalAllocated(k int) bool {
	if is64(k) {
		return d.optional64(k) != nil
	}
	return d.optional32(k) != nil
}

// TTFTMS, E2EMS and TPOTMS are request i's time to first token, end-to-end latency and time
// per output token after the first, in ms: (end-first)/(output_tokens-1). They are defined
// for ok requests only; TPOTMS is NaN when output_tokens is null or at most 1.
func (d *Data) TTFTMS(i int) float64 { return float64(d.First[i]-d.Sent[i]) / 1e6 }
func (d *Data) E2EMS(i int) float64  { return float64(d.End[i]-d.Sent[i]) / 1e6 }
func (d *Data) TPOTMS(i int) float64 {
	n := d.OutTokens[i]
	if n == Null32 || n <= 1 {
		return math.NaN()
	}
	return float64(d.End[i]-d.First[i]) / 1e6 / float64(n-1)
}

// TTFAMS is request i's time to first answer token in ms, first_answer_ns - sent_ns: NaN
// when it has no first answer (it only reasoned, or the file predates the column).
func (d *Data) TTFAMS(i int) float64 {
	if d.FirstAnswer == nil || d.FirstAnswer[i] == Null64 {
		return math.NaN()
	}
	return float64(d.FirstAnswer[i]-d.Sent[i]) / 1e6
}

// ReasoningTokens is request i's reasoning_tokens, 0 when null: a request nobody counted
// reasoning in is taken as all answer.
func (d *Data) ReasoningTokens(i int) int32 {
	if d.Reasoning == nil || d.Reasoning[i] == Null32 {
		return 0
	}
	return d.Reasoning[i]
}

// AnswerTPOTMS is request i's time per answer token after the first answer token, in ms:
// (end_ns - first_answer_ns) / (answer tokens - 1), answer tokens = output_tokens -
// reasoning_tokens; NaN without a first answer or output_tokens, or for at most one
// answer token.
func (d *Data) AnswerTPOTMS(i int) float64 {
	n := d.OutTokens[i]
	if n == Null32 || d.FirstAnswer == nil || d.FirstAnswer[i] == Null64 {
		return math.NaN()
	}
	if a := n - d.ReasoningTokens(i); a > 1 {
		return float64(d.End[i]-d.FirstAnswer[i]) / 1e6 / float64(a-1)
	}
	return math.NaN()
}
