package analysis

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/analysis/agent"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// Report is the analysis of one run (or of several pooled with AllowMixed). Durations and
// times are in seconds from the run start (the earliest run_start_unix_ns), latencies in ms.
type Report struct {
	Files      []string
	Runs       []results.RunMeta
	Mixed      bool
	BaseUnixNS int64
	Options    Options // as used, defaults filled in (SLO from the run when not given)

	Requests   Requests
	Throughput Throughput
	// Latencies of ok requests (Lateness: of every sent request), ms.
	TTFT, TPOT, ITL, E2E, Lateness stats.Quantiles
	// ITLPerToken is the per-token ITL when chunk_tokens says some chunks carry several
	// tokens; N == 0 otherwise (it would repeat ITL).
	ITLPerToken stats.Quantiles
	// Reasoning measured apart (reasoning.go), over ok requests: time to first answer
	// token, time per answer token after it (ms), reasoning tokens per request. Reasoned
	// says the run reasoned; the three are empty when it did not.
	TTFA, AnswerTPOT, ReasoningTokens stats.Quantiles
	Reasoned                          bool
	// ReasoningBy counts the ok requests by how their reasoning tokens were counted
	// (decode.ReasoningSources, then "none"); nil unless Reasoned.
	ReasoningBy map[string]int64
	Goodput     *Goodput    // nil when no SLO
	PerUser     PerUser     // each ok request's decode speed (docs/metrics.md, "Per-user speed")
	Closed      *ClosedLoop // nil for open-loop runs
	// Conversations: prefix-cache hits and session waits; nil for a run without sessions,
	// cached-token counts or a trace with prefix blocks.
	Conversations *Conversations
	// Agents: the agent-level figures (package analysis/agent); nil for a run without
	// agent calls.
	Agents *agent.Report
	// Unary: the figures of a run whose requests are not generation (embeddings, rerank;
	// unary.go); nil for a run of generations.
	Unary *Unary
	// Images: the image figures of a run of generations that sent images (images.go);
	// nil for a run without.
	Images   *Images
	Server   *Server // the scraped Prometheus endpoints (metrics files); nil when no run scraped
	Flags    Flags
	Tokens   Tokens
	ByPrompt []Bucket
	ByOutput []Bucket
	Series   []Interval
	Warnings []string

	// Buffered is the evidence behind Flags.Buffered (buffered.go).
	Buffered Buffered
	// Repeats: the figures across the repeats of a repeated run (AnalyzeRepeats); nil
	// for a run that was not repeated.
	Repeats *Repeats

	// For the HTML plots: quantile curves of TTFT and TPOT, and a sample of (prompt, TTFT).
	ttftCurve, tpotCurve [][2]float64
	ttfaCurve            [][2]float64 // nil unless the run reasoned
	promptTTFT           [][2]float64
}

// Requests counts requests by outcome. Failed = http_error + timeout + transport_error +
// stream_error; Total = OK + Failed + Dropped + Canceled.
type Requests struct {
	Total, OK, Failed, Dropped, Canceled int64
	ByStatus                             map[string]int64
}

// Throughput holds the rates, per second.
type Throughput struct {
	// DurationS = last end_ns - first sent_ns, the denominator of the overall rates (vLLM's).
	FirstSentS, LastEndS, DurationS float64
	RequestsPerS                    float64 // ok requests / DurationS
	OutputTokensPerS                float64 // output tokens of ok requests / DurationS
	TotalTokensPerS                 float64 // (prompt + output tokens of ok requests) / DurationS
	// Sustained: ok-request output tokens whose chunk arrived in [WindowStartS, WindowEndS),
	// divided by the window's length. NaN when there is no window.
	SustainedOutputTokensPerS float64
	WindowStartS, WindowEndS  float64
	WarmupS                   float64 // window start - first sent
	WarmupDetected            bool    // WarmupS came from MSER-5, not --warmup
	// Peak: the most ok-request output tokens that arrived in any 1 s window (10 ms steps);
	// NaN for runs shorter than 1 s. PeakAtS is that window's start.
	PeakOutputTokensPerS, PeakAtS float64
}

// Goodput is the rate of ok requests that met every objective of SLO.
type Goodput struct {
	SLO              SLO
	Good             int64
	RequestsPerS     float64 // good requests / Throughput.DurationS
	OutputTokensPerS float64 // their output tokens / Throughput.DurationS
	// Attainment = 100 * Good / (Total - Canceled): a failed or dropped request misses.
	Attainment float64
}

// ClosedLoop is what a closed-loop run (--concurrency) adds to its report.
type ClosedLoop struct {
	Concurrency int     // workers (summed over the shards of the run)
	RampUpS     float64 // --ramp-up: worker i started at i*RampUpS/Concurrency
	// The first wave is each worker's first request: those scheduled no later than the
	// last worker's start. FirstWaveSendS runs from the run start to the last of them sent.
	FirstWaveRequests int64
	FirstWaveSendS    float64
	FirstWaveLateness stats.Quantiles
	// SteadyLateness is the schedule lateness of the requests after the first wave; a
	// closed-loop run's client-limited decision judges it (docs/metrics.md).
	SteadyLateness stats.Quantiles
}

// Flags are the run-level verdicts.
type Flags struct {
	// ClientLimited: schedule-lateness p99 > MaxLateness: the replayer did not send on time.
	ClientLimited bool
	MaxLateness   time.Duration
	// Overloaded: in-flight and TTFT both trend up through the window (docs/metrics.md).
	Overloaded bool
	// The trend tests behind Overloaded; Points == 0 when the window was too short.
	InflightTrend, TTFTTrend Trend
	// Buffered: the streams came in bursts of chunks per read, as through a proxy that
	// buffers SSE (Report.Buffered has the evidence).
	Buffered bool
	// PromptOffTarget: the server's prompt tokens in all differ from the targets by more
	// than PromptOffBound of them (promptoff.go; Tokens has the evidence).
	PromptOffTarget bool
}

// Tokens reconciles token counts over ok requests.
type Tokens struct {
	OK                    int64 // ok requests
	OutputTarget          int64 // sum of output_tokens_target
	Output                int64 // sum of output_tokens (as reported)
	OutputUsage           int64 // requests whose output_tokens came from the server's usage
	OutputTokenizer       int64 // requests whose output_tokens the client counted
	OutputUnknown         int64 // ok requests with no output_tokens
	Chunks                int64 // output chunks
	ChunkTokens           int64 // sum of chunk_tokens, over requests that have them
	WithChunkTokens       int64 // requests with chunk_tokens
	ChunkTokensMismatch   int64 // requests whose chunk_tokens sum != output_tokens
	Shorter, Longer       int64 // requests with output_tokens below / above the target
	PromptTarget          int64 // sum of prompt_tokens over requests with a server count
	PromptServer          int64 // sum of prompt_tokens_server
	PromptMismatch        int64 // requests whose server prompt count differs from the target
	PromptWithServerCount int64
	PromptOff             int64 // requests whose server prompt count is off the target by more than PromptOffBound of it
}

// Bucket is the breakdown of requests whose length is in [Lo, Hi) (Hi = 0: no upper bound).
type Bucket struct {
	Lo, Hi          int64
	Requests, OK    int64
	TTFT, TPOT, E2E stats.Quantiles
	Attainment      float64 // NaN without SLO or without requests
}

// Label is the bucket's range as text, e.g. "[512, 1024)".
func (b Bucket) Label() string {
	switch {
	case b.Hi == 0:
		return fmt.Sprintf(">= %d", b.Lo)
	case b.Lo == 0:
		return fmt.Sprintf("< %d", b.Hi)
	}
	return fmt.Sprintf("[%d, %d)", b.Lo, b.Hi)
}

// Interval is one point of the time series: [StartS, StartS + interval).
type Interval struct {
	StartS           float64
	Sent, Completed  int64   // requests sent / ok requests whose last chunk arrived in it
	Errors, Dropped  int64   // failed requests by send time (scheduled time if never sent); dropped by scheduled time
	Inflight         float64 // time-averaged requests in flight
	OutputTokensPerS float64
	TTFTP50, TTFTP99 float64 // of ok requests sent in the interval; NaN when none
	// Server metrics (docs/metrics.md, "Server metrics"): the mean of the aligned scrapes
	// stamped in the interval (running and waiting requests, KV-cache usage 0..1, GPU
	// utilisation % and power W), and the preemption counter's increase stamped in it;
	// NaN when not scraped.
	ServerRunning, ServerWaiting, KVUsage float64
	Preemptions, GPUUtil, GPUPowerW       float64
}

// Analyze computes the report of d.
func Analyze(d *decode.Data, opts Options) (*Report, error) {
	if opts.Interval == 0 {
		opts.Interval = time.Second
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("analysis: %w", err)
	}
	r := &Report{Files: d.Files, Runs: d.Runs, Mixed: d.Mixed, BaseUnixNS: d.BaseUnixNS}
	if opts.SLO.IsZero() && len(d.Runs) > 0 && d.Runs[0].SLO != "" {
		slo, err := ParseSLO(d.Runs[0].SLO)
		if err != nil {
			r.warnf("run metadata slo %q ignored: %v", d.Runs[0].SLO, err)
		} else {
			opts.SLO = slo
		}
	}
	if opts.MaxLateness == 0 {
		opts.MaxLateness = DefaultMaxLateness
		if len(d.Runs) > 0 && d.Runs[0].MaxLatenessMS > 0 {
			opts.MaxLateness = time.Duration(d.Runs[0].MaxLatenessMS * float64(time.Millisecond))
		}
	}
	r.Options = opts
	if d.Mixed {
		r.warnf("files of different runs pooled on absolute time (--allow-mixed)")
	}
	if miss := d.MissingShards(); len(miss) > 0 {
		r.warnf("shards missing: %s; the figures cover only the shards given", strings.Join(miss, ", "))
	}
	if err := r.kind(d); err != nil {
		return nil, err
	}
	r.requests(d)
	r.latencies(d)
	r.reasoning(d)
	r.perUser(d)
	r.throughput(d)
	r.goodput(d)
	r.unary(d)
	r.images(d)
	r.tokens(d)
	r.series(d)
	r.server(d)
	r.closedLoop(d)
	r.flags(d)
	r.buffered(d)
	r.ByPrompt = r.breakdown(d, d.Prompt, opts.PromptBuckets)
	if r.Unary == nil { // a target output length means nothing without output
		r.ByOutput = r.breakdown(d, d.OutTarget, opts.OutputBuckets)
	}
	r.conversations(d)
	r.agents(d)
	r.sampleWarnings()
	return r, nil
}

func (r *Report) warnf(format string, a ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, a...))
}

func (r *Report) requests(d *decode.Data) {
	r.Requests.ByStatus = map[string]int64{}
	for _, s := range d.Status {
		r.Requests.ByStatus[string(decode.Statuses[s])]++
	}
	q := &r.Requests
	q.Total = int64(d.N())
	q.OK = q.ByStatus[string(results.StatusOK)]
	q.Dropped = q.ByStatus[string(results.StatusDropped)]
	q.Canceled = q.ByStatus[string(results.StatusCanceled)]
	q.Failed = q.Total - q.OK - q.Dropped - q.Canceled
	if q.Failed > 0 {
		var parts []string
		for _, s := range decode.Statuses[1:5] {
			if n := q.ByStatus[string(s)]; n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", n, s))
			}
		}
		r.warnf("%d of %d requests failed (%s); latencies cover ok requests only", q.Failed, q.Total, strings.Join(parts, ", "))
	}
	if q.Dropped > 0 {
		if closed := len(d.Runs) > 0 && d.Runs[0].Mode == results.ModeClosed; closed {
			r.warnf("%d requests dropped by the replayer (never sent)", q.Dropped)
		} else {
			r.warnf("%d requests dropped by the replayer (never sent): the offered load was not fully applied", q.Dropped)
		}
	}
	if q.Canceled > 0 {
		r.warnf("%d requests canceled at the end of the run", q.Canceled)
	}
	if d.FirstChunkMismatch > 0 {
		r.warnf("%d requests whose first_token_ns/end_ns disagree with their chunk_ns", d.FirstChunkMismatch)
	}
}

func (r *Report) latencies(d *decode.Data) {
	ok := int(r.Requests.OK)
	ttft, tpot, e2e := make([]float64, 0, ok), make([]float64, 0, ok), make([]float64, 0, ok)
	late := make([]float64, 0, d.N())
	for i, s := range d.Status {
		if d.Sent[i] != decode.Null64 {
			late = append(late, float64(d.Sent[i]-d.Scheduled[i])/1e6)
		}
		if s != decode.StOK {
			continue
		}
		e2e = append(e2e, d.E2EMS(i))
		if unaryRow(d, i) { // not streamed: no first token, no output
			continue
		}
		ttft = append(ttft, d.TTFTMS(i))
		if v := d.TPOTMS(i); !math.IsNaN(v) {
			tpot = append(tpot, v)
		}
	}
	r.TTFT, r.TPOT, r.E2E, r.Lateness = stats.Summarize(ttft), stats.Summarize(tpot), stats.Summarize(e2e), stats.Summarize(late)
	r.ttftCurve, r.tpotCurve = quantileCurve(ttft), quantileCurve(tpot) // sorted by summarize
	step := max(1, int(r.TTFT.N/3000))
	k := 0
	for i, s := range d.Status {
		if s == decode.StOK && !unaryRow(d, i) {
			if k%step == 0 {
				r.promptTTFT = append(r.promptTTFT, [2]float64{float64(d.Prompt[i]), d.TTFTMS(i)})
			}
			k++
		}
	}
	r.ITL = d.ITL.Summary()
	if d.MultiTokenChunks {
		r.ITLPerToken = d.ITLTok.Summary()
	}
}

// quantileCurve samples the empirical quantile function of sorted xs at 401 evenly spaced
// levels plus the tail (p99.5, p99.9, p99.99) as (value, p) points for a CDF plot.
func quantileCurve(sorted []float64) [][2]float64 {
	if len(sorted) == 0 {
		return nil
	}
	var out [][2]float64
	for i := 0; i <= 400; i++ {
		p := float64(i) / 400
		if p > 0.99 && p < 1 {
			continue
		}
		if p == 1 {
			for _, tp := range []float64{0.995, 0.999, 0.9999} {
				out = append(out, [2]float64{stats.Type7(sorted, tp), tp})
			}
		}
		out = append(out, [2]float64{stats.Type7(sorted, p), p})
	}
	return out
}

// meets reports whether ok request i meets slo.
func meets(d *decode.Data, i int, slo SLO) bool {
	if d.Status[i] != decode.StOK {
		return false
	}
	// A response that is not streamed comes whole: its first token is its end.
	if first := d.First[i]; slo.TTFT > 0 && (first != decode.Null64 || unaryRow(d, i)) {
		if first == decode.Null64 {
			first = d.End[i]
		}
		if first-d.Sent[i] > int64(slo.TTFT) {
			return false
		}
	}
	if slo.E2E > 0 && d.End[i]-d.Sent[i] > int64(slo.E2E) {
		return false
	}
	if slo.TPOT > 0 {
		if v := d.TPOTMS(i); !math.IsNaN(v) && v > float64(slo.TPOT)/1e6 {
			return false
		}
	}
	// A request that never answered misses a TTFA objective; answer TPOT, like TPOT,
	// applies to requests of more than one answer token.
	if slo.TTFA > 0 {
		if v := d.TTFAMS(i); math.IsNaN(v) || v > float64(slo.TTFA)/1e6 {
			return false
		}
	}
	if slo.AnswerTPOT > 0 {
		if v := d.AnswerTPOTMS(i); !math.IsNaN(v) && v > float64(slo.AnswerTPOT)/1e6 {
			return false
		}
	}
	return true
}

func (r *Report) throughput(d *decode.Data) {
	t := &r.Throughput
	first, last := int64(math.MaxInt64), int64(math.MinInt64)
	lastSent := int64(math.MinInt64)
	var okOut, okPrompt int64
	for i, s := range d.Status {
		if d.Sent[i] != decode.Null64 {
			first = min(first, d.Sent[i])
			lastSent = max(lastSent, d.Sent[i])
		}
		if d.End[i] != decode.Null64 {
			last = max(last, d.End[i])
		}
		if s == decode.StOK {
			if d.OutTokens[i] != decode.Null32 {
				okOut += int64(d.OutTokens[i])
			}
			if d.PromptServer[i] != decode.Null32 {
				okPrompt += int64(d.PromptServer[i])
			} else {
				okPrompt += int64(d.Prompt[i])
			}
		}
	}
	nan := math.NaN()
	*t = Throughput{SustainedOutputTokensPerS: nan, WindowStartS: nan, WindowEndS: nan, WarmupS: nan, PeakOutputTokensPerS: nan, PeakAtS: nan,
		RequestsPerS: nan, OutputTokensPerS: nan, TotalTokensPerS: nan, FirstSentS: nan, LastEndS: nan, DurationS: nan}
	if first == math.MaxInt64 || last == math.MinInt64 || last <= first {
		r.warnf("no request both sent and answered: no throughput")
		return
	}
	t.FirstSentS, t.LastEndS = float64(first)/1e9, float64(last)/1e9
	t.DurationS = float64(last-first) / 1e9
	t.RequestsPerS = float64(r.Requests.OK) / t.DurationS
	t.OutputTokensPerS = float64(okOut) / t.DurationS
	t.TotalTokensPerS = float64(okOut+okPrompt) / t.DurationS

	// Peak: best 100 consecutive 10 ms bins (output tokens: none in a run that is not
	// generation).
	const perSecond = int(1e9 / decode.BinNS)
	bins := d.TokenBins
	if r.Unary != nil {
		bins = r.Unary.bins
	}
	switch {
	case r.Unary != nil:
	case len(d.TokenBins) >= perSecond && last-first >= 1e9:
		var sum float64
		best, at := -1.0, 0
		for i, v := range d.TokenBins {
			sum += v
			if i >= perSecond {
				sum -= d.TokenBins[i-perSecond]
			}
			if i >= perSecond-1 && sum > best+1e-9 {
				best, at = sum, i-perSecond+1
			}
		}
		t.PeakOutputTokensPerS, t.PeakAtS = best, float64(int64(at)*decode.BinNS)/1e9
	default:
		r.warnf("run shorter than 1 s: no peak 1 s throughput")
	}

	// Steady-state window: [first sent + warm-up, last sent), snapped inward to the 10 ms grid.
	warm := r.Options.Warmup
	if warm == WarmupDetect {
		w, ok, atLimit := detectWarmup(bins, first, lastSent)
		if ok {
			warm, t.WarmupDetected = w, true
			if atLimit {
				r.warnf("no steady state: the warm-up detector (MSER-5) cut at its limit, half the arrival span; the run is too short for its latencies, or the load kept changing")
			}
		} else {
			warm = 0
			r.warnf("arrival span under %v: warm-up not detected, none excluded", time.Duration(msserMinBatches*msserBatch*msserBinNS))
		}
	}
	startNS := ceilDiv(first+int64(warm), decode.BinNS) * decode.BinNS
	endNS := floorDiv(lastSent, decode.BinNS) * decode.BinNS
	if endNS <= startNS {
		r.warnf("no steady-state window: warm-up %v reaches past the last arrival (%.3f s)", warm, float64(lastSent)/1e9)
		return
	}
	t.WindowStartS, t.WindowEndS = float64(startNS)/1e9, float64(endNS)/1e9
	t.WarmupS = float64(startNS-first) / 1e9
	var sum float64
	for b := startNS / decode.BinNS; b < endNS/decode.BinNS && b < int64(len(d.TokenBins)); b++ {
		sum += d.TokenBins[b]
	}
	t.SustainedOutputTokensPerS = sum / (float64(endNS-startNS) / 1e9)
	if endNS-startNS < 10e9 {
		r.warnf("steady-state window only %.2f s long: sustained throughput is rough", float64(endNS-startNS)/1e9)
	}
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a > 0) == (b > 0) {
		q++
	}
	return q
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func (r *Report) goodput(d *decode.Data) {
	slo := r.Options.SLO
	if slo.IsZero() {
		return
	}
	g := &Goodput{SLO: slo, RequestsPerS: math.NaN(), OutputTokensPerS: math.NaN(), Attainment: math.NaN()}
	if (slo.TTFA > 0 || slo.AnswerTPOT > 0) && d.FirstAnswer == nil {
		r.warnf("the SLO names ttfa or answer_tpot but no request has first_answer_ns (results written before revision 1.3, or no answer came): a ttfa objective is missed by every request")
	}
	var tok int64
	for i := range d.Status {
		if meets(d, i, slo) {
			g.Good++
			if d.OutTokens[i] != decode.Null32 {
				tok += int64(d.OutTokens[i])
			}
		}
	}
	if dur := r.Throughput.DurationS; dur > 0 {
		g.RequestsPerS = float64(g.Good) / dur
		g.OutputTokensPerS = float64(tok) / dur
	}
	if den := r.Requests.Total - r.Requests.Canceled; den > 0 {
		g.Attainment = 100 * float64(g.Good) / float64(den)
	}
	r.Goodput = g
}

func (r *Report) tokens(d *decode.Data) {
	t := &r.Tokens
	for i, s := range d.Status {
		if d.PromptServer[i] != decode.Null32 {
			t.PromptWithServerCount++
			t.PromptTarget += int64(d.Prompt[i])
			t.PromptServer += int64(d.PromptServer[i])
			if d.PromptServer[i] != d.Prompt[i] {
				t.PromptMismatch++
				if promptOffEach(d.PromptServer[i], d.Prompt[i]) {
					t.PromptOff++
				}
			}
		}
		if s != decode.StOK {
			continue
		}
		t.OK++
		t.OutputTarget += int64(d.OutTarget[i])
		t.Chunks += int64(d.NChunks[i])
		out := d.OutTokens[i]
		switch {
		case out == decode.Null32:
			t.OutputUnknown++
		case d.OutSource[i] == 2:
			t.OutputTokenizer++
		default:
			t.OutputUsage++
		}
		if out != decode.Null32 {
			t.Output += int64(out)
			if out < d.OutTarget[i] {
				t.Shorter++
			} else if out > d.OutTarget[i] {
				t.Longer++
			}
		}
		if cs := d.ChunkTokSum[i]; cs >= 0 {
			t.WithChunkTokens++
			t.ChunkTokens += cs
			if out != decode.Null32 && cs != int64(out) {
				t.ChunkTokensMismatch++
			}
		}
	}
	if t.Shorter+t.Longer > 0 {
		r.warnf("%d of %d ok requests missed their target output length (%d shorter, %d longer)", t.Shorter+t.Longer, t.OK, t.Shorter, t.Longer)
	}
	if t.OutputUnknown > 0 && r.Unary == nil {
		r.warnf("%d ok requests have no output token count: left out of TPOT and token throughput", t.OutputUnknown)
	}
	if t.ChunkTokensMismatch > 0 {
		r.warnf("%d ok requests whose chunk_tokens do not add up to output_tokens", t.ChunkTokensMismatch)
	}
	if t.PromptMismatch > 0 {
		r.warnf("%d requests whose server prompt count differs from the target (server %d vs target %d tokens in all)", t.PromptMismatch, t.PromptServer, t.PromptTarget)
	}
	r.promptOff()
}

// sampleWarnings says when a tail percentile rests on too few samples to have any above it.
func (r *Report) sampleWarnings() {
	ms := []struct {
		name string
		q    stats.Quantiles
	}{{"ttft", r.TTFT}, {"tpot", r.TPOT}, {"itl", r.ITL}, {"e2e", r.E2E}, {"schedule lateness", r.Lateness}}
	if r.Unary != nil {
		ms[3].name = "latency"
	}
	if c := r.Closed; c != nil {
		// The closed loop's client-limited decision rests on this p99.
		ms = append(ms, struct {
			name string
			q    stats.Quantiles
		}{"steady-state schedule lateness", c.SteadyLateness})
	}
	if a := r.Agents; a != nil {
		// Agent figures are per session: their tails rest on the sessions.
		for _, m := range []struct {
			name string
			q    stats.Quantiles
		}{{"agent makespan", a.Makespan}, {"agent slowdown", a.Slowdown}} {
			if m.q.N > 0 && m.q.N < 100 {
				r.warnf("%s p99 from %d sessions (under 100: it is near the max)", m.name, m.q.N)
			}
		}
	}
	for _, m := range ms {
		if w := tailWarning(m.q.N); w != "" {
			r.warnf("%s %s", m.name, w)
		}
	}
}

// tailWarning: a p-quantile needs n(1-p) >= 1, i.e. at least one sample above it, to be
// more than a relabelled maximum; p99 needs 100 samples, p99.9 needs 1000.
func tailWarning(n int64) string {
	switch {
	case n == 0:
		return ""
	case n < 100:
		return fmt.Sprintf("p99 and p99.9 from %d samples (under 100: they are near the max)", n)
	case n < 1000:
		return fmt.Sprintf("p99.9 from %d samples (under 1000: it is near the max)", n)
	}
	return ""
}

// defaultEdges are powers of two spanning [lo, hi], the step doubled in exponent until
// there are at most 8 buckets.
func defaultEdges(lo, hi int64) []int64 {
	if lo < 1 {
		lo = 1
	}
	a := bits.Len64(uint64(lo)) - 1 // 2^a <= lo
	b := bits.Len64(uint64(hi))     // hi < 2^b
	step := 1
	for (b-a+step-1)/step > 8 {
		step++
	}
	var edges []int64
	for e := a + step; e < b; e += step {
		edges = append(edges, int64(1)<<e)
	}
	return edges
}

func (r *Report) breakdown(d *decode.Data, length []int32, edges []int64) []Bucket {
	if d.N() == 0 {
		return nil
	}
	if edges == nil {
		lo, hi := int64(math.MaxInt64), int64(0)
		for _, v := range length {
			lo, hi = min(lo, int64(v)), max(hi, int64(v))
		}
		edges = defaultEdges(lo, hi)
	}
	nb := len(edges) + 1
	which := func(v int64) int { return sort.Search(len(edges), func(k int) bool { return edges[k] > v }) }
	type acc struct {
		reqs, ok, good, den int64
		ttft, tpot, e2e     []float64
	}
	accs := make([]acc, nb)
	slo := r.Options.SLO
	bucket := make([]uint8, d.N())
	okIn := make([]int, nb)
	for i, s := range d.Status {
		bucket[i] = uint8(which(int64(length[i])))
		if s == decode.StOK {
			okIn[bucket[i]]++
		}
	}
	for k := range accs {
		accs[k].ttft, accs[k].tpot, accs[k].e2e = make([]float64, 0, okIn[k]), make([]float64, 0, okIn[k]), make([]float64, 0, okIn[k])
	}
	for i, s := range d.Status {
		a := &accs[bucket[i]]
		a.reqs++
		if s != decode.StCanceled {
			a.den++
		}
		if s != decode.StOK {
			continue
		}
		a.ok++
		a.e2e = append(a.e2e, d.E2EMS(i))
		if !unaryRow(d, i) {
			a.ttft = append(a.ttft, d.TTFTMS(i))
		}
		if v := d.TPOTMS(i); !math.IsNaN(v) {
			a.tpot = append(a.tpot, v)
		}
		if !slo.IsZero() && meets(d, i, slo) {
			a.good++
		}
	}
	var out []Bucket
	for k := range accs {
		a := &accs[k]
		if a.reqs == 0 {
			continue
		}
		b := Bucket{Requests: a.reqs, OK: a.ok, TTFT: stats.Summarize(a.ttft), TPOT: stats.Summarize(a.tpot), E2E: stats.Summarize(a.e2e), Attainment: math.NaN()}
		if k > 0 {
			b.Lo = edges[k-1]
		}
		if k < len(edges) {
			b.Hi = edges[k]
		}
		if !slo.IsZero() && a.den > 0 {
			b.Attainment = 100 * float64(a.good) / float64(a.den)
		}
		out = append(out, b)
	}
	return out
}

// AnalyzeFiles loads paths (shards of one run; see Load) and analyses them: what `replay`
// calls to print the report at the end of a run.
func AnalyzeFiles(ctx context.Context, opts Options, paths ...string) (*Report, error) {
	d, err := Load(ctx, decode.LoadOptions{}, paths...)
	if err != nil {
		return nil, err
	}
	return Analyze(d, opts)
}
