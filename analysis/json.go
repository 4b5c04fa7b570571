package analysis

import (
	"encoding/json"
	"io"
	"math"
	"strconv"

	"github.com/llmreplay/llmreplay/stats"
)

// num is a float that marshals NaN and ±Inf (undefined figures) as JSON null.
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// The JSON shapes. The top-level keys and the keys of requests, throughput, the latency
// objects, goodput and flags are a contract (docs/metrics.md): never rename them silently.
type jsonReport struct {
	Requests   jsonRequests   `json:"requests"`
	Throughput jsonThroughput `json:"throughput"`
	TTFT       jsonQuantiles  `json:"ttft_ms"`
	TPOT       jsonQuantiles  `json:"tpot_ms"`
	ITL        jsonQuantiles  `json:"itl_ms"`
	E2E        jsonQuantiles  `json:"e2e_ms"`
	Lateness   jsonQuantiles  `json:"schedule_lateness_ms"`
	Goodput    *jsonGoodput   `json:"goodput"`
	PerUser    jsonPerUser    `json:"per_user"`
	Closed     *jsonClosed    `json:"closed_loop"`
	// Conversations is absent (not null) for a run without sessions, cached-token counts
	// or prefix blocks, so that such a report is byte for byte what it was.
	Conversations *jsonConversations `json:"conversations,omitempty"`
	Server        *jsonServer        `json:"server,omitempty"` // absent, not null, when nothing was scraped
	Flags         jsonFlags          `json:"flags"`
	Breakdown     jsonBreakdown      `json:"breakdown"`
	Warnings      []string           `json:"warnings"`

	// Repeats is absent for a run that was not repeated (docs/metrics.md, "Repeats").
	Repeats *jsonRepeats `json:"repeats,omitempty"`
}

type jsonRequests struct {
	Total    int64 `json:"total"`
	OK       int64 `json:"ok"`
	Failed   int64 `json:"failed"`
	Dropped  int64 `json:"dropped"`
	Canceled int64 `json:"canceled"`
}

type jsonWindow struct {
	StartS num `json:"start_s"`
	EndS   num `json:"end_s"`
}

type jsonThroughput struct {
	RequestsPerS              num        `json:"requests_per_s"`
	OutputTokensPerS          num        `json:"output_tokens_per_s"`
	TotalTokensPerS           num        `json:"total_tokens_per_s"`
	SustainedOutputTokensPerS num        `json:"sustained_output_tokens_per_s"`
	PeakOutputTokensPerS      num        `json:"peak_output_tokens_per_s"`
	Window                    jsonWindow `json:"window"`
}

type jsonQuantiles struct {
	Mean num `json:"mean"`
	P50  num `json:"p50"`
	P90  num `json:"p90"`
	P95  num `json:"p95"`
	P99  num `json:"p99"`
	P999 num `json:"p99_9"`
	Max  num `json:"max"`
}

type jsonGoodput struct {
	RequestsPerS     num `json:"requests_per_s"`
	OutputTokensPerS num `json:"output_tokens_per_s"`
	Attainment       num `json:"attainment"`
}

// jsonSpeeds is a Speeds: n, mean, p50 and the slow tail, tokens per second.
type jsonSpeeds struct {
	N    int64 `json:"n"`
	Mean num   `json:"mean"`
	P50  num   `json:"p50"`
	P10  num   `json:"p10"`
	P1   num   `json:"p1"`
	Min  num   `json:"min"`
}

type jsonPerUser struct {
	TokensPerS jsonSpeeds `json:"tokens_per_s"`
	InvTPOT    jsonSpeeds `json:"inv_tpot_per_s"`
}

type jsonFirstWave struct {
	Requests int64         `json:"requests"`
	Sent     int64         `json:"sent"`
	SendS    num           `json:"send_s"`
	Lateness jsonQuantiles `json:"schedule_lateness_ms"`
}

type jsonSteady struct {
	Sent     int64         `json:"sent"`
	Lateness jsonQuantiles `json:"schedule_lateness_ms"`
}

type jsonClosed struct {
	Concurrency  int           `json:"concurrency"`
	RampUpS      num           `json:"ramp_up_s"`
	FirstWave    jsonFirstWave `json:"first_wave"`
	SteadyState  jsonSteady    `json:"steady_state"`
	LimitedBasis string        `json:"client_limited_basis"`
}

func js(s Speeds) jsonSpeeds {
	return jsonSpeeds{s.N, num(s.Mean), num(s.P50), num(s.P10), num(s.P1), num(s.Min)}
}

type jsonFlags struct {
	ClientLimited bool `json:"client_limited"`
	Overloaded    bool `json:"overloaded"`
	// ReshapedByServer is absent without sequential sessions.
	ReshapedByServer *bool `json:"reshaped_by_server,omitempty"`
	StreamBuffered   bool  `json:"stream_buffered"`
	// StreamBufferedEvidence is the rule's evidence (analysis/buffered.go).
	StreamBufferedEvidence jsonBuffered `json:"stream_buffered_evidence"`
}

type jsonBuffered struct {
	Streams        int64 `json:"streams"`
	BurstyStreams  int64 `json:"bursty_streams"`
	BurstyShare    num   `json:"bursty_share"`
	ZeroGapShare   num   `json:"zero_gap_share"`
	ChunksPerRead  num   `json:"chunks_per_read"`
	OtherGapMeanMS num   `json:"other_gap_mean_ms"`
	GapBoundMS     num   `json:"gap_bound_ms"`
}

type jsonCacheBucket struct {
	Lo           int64  `json:"lo"`
	Hi           *int64 `json:"hi"`
	Requests     int64  `json:"requests"`
	CachedTokens int64  `json:"cached_tokens"`
	PromptTokens int64  `json:"prompt_tokens"`
	HitRate      num    `json:"hit_rate"`
}

type jsonPrefixCache struct {
	Requests     int64             `json:"requests"`
	CachedTokens int64             `json:"cached_tokens"`
	PromptTokens int64             `json:"prompt_tokens"`
	HitRate      num               `json:"hit_rate"`
	BestRate     num               `json:"best_rate"`
	BestRule     *string           `json:"best_rate_rule"`
	ByTurn       []jsonCacheBucket `json:"by_turn"`
	ByPrompt     []jsonCacheBucket `json:"by_prompt_tokens"`
}

type jsonSessions struct {
	Turns          int64         `json:"turns"`
	Waited         int64         `json:"waited"`
	WaitedShare    num           `json:"waited_share"`
	Wait           jsonQuantiles `json:"session_wait_ms"`
	OverBound      int64         `json:"waited_over_bound"`
	BoundMS        num           `json:"bound_ms"`
	ReshapedShare  num           `json:"reshaped_share"`
	ReshapedServer bool          `json:"reshaped_by_server"`
}

type jsonConversations struct {
	PrefixCache jsonPrefixCache  `json:"prefix_cache"`
	Sessions    *jsonSessions    `json:"sessions"`
	Overlap     *jsonTurnOverlap `json:"turn_overlap"`
}

type jsonTurnOverlap struct {
	Turns      int64 `json:"turns"`
	Overlapped int64 `json:"overlapped"`
	Share      num   `json:"overlapped_share"`
}

func jcb(bs []CacheBucket) []jsonCacheBucket {
	out := []jsonCacheBucket{}
	for _, b := range bs {
		x := jsonCacheBucket{Lo: b.Lo, Requests: b.Requests, CachedTokens: b.CachedTokens, PromptTokens: b.PromptTokens, HitRate: num(b.HitRate)}
		if b.Hi != 0 {
			hi := b.Hi
			x.Hi = &hi
		}
		out = append(out, x)
	}
	return out
}

type jsonBreakdown struct {
	PercentileMethod string           `json:"percentile_method"`
	Samples          map[string]int64 `json:"samples"`
	ByStatus         map[string]int64 `json:"by_status"`
	ITLPerToken      *jsonQuantiles   `json:"itl_per_token_ms"`
	Window           jsonWindowDetail `json:"window"`
	Duration         jsonDuration     `json:"duration"`
	SLO              jsonSLO          `json:"slo"`
	Tokens           jsonTokens       `json:"tokens"`
	Overload         jsonOverload     `json:"overload"`
	ByPrompt         []jsonBucket     `json:"by_prompt_tokens"`
	ByOutput         []jsonBucket     `json:"by_output_tokens"`
}

type jsonWindowDetail struct {
	WarmupS        num  `json:"warmup_s"`
	WarmupDetected bool `json:"warmup_detected"`
	PeakStartS     num  `json:"peak_start_s"`
}

type jsonDuration struct {
	FirstSentS num `json:"first_sent_s"`
	LastEndS   num `json:"last_end_s"`
	DurationS  num `json:"duration_s"`
}

type jsonSLO struct {
	TTFTMS num   `json:"ttft_ms"`
	TPOTMS num   `json:"tpot_ms"`
	E2EMS  num   `json:"e2e_ms"`
	Good   int64 `json:"good"`
}

type jsonTokens struct {
	OutputTarget        int64 `json:"output_target"`
	Output              int64 `json:"output"`
	OutputFromUsage     int64 `json:"requests_output_from_usage"`
	OutputFromTokenizer int64 `json:"requests_output_from_tokenizer"`
	OutputUnknown       int64 `json:"requests_output_unknown"`
	Shorter             int64 `json:"requests_shorter_than_target"`
	Longer              int64 `json:"requests_longer_than_target"`
	Chunks              int64 `json:"chunks"`
	ChunkTokens         int64 `json:"chunk_tokens"`
	WithChunkTokens     int64 `json:"requests_with_chunk_tokens"`
	ChunkTokensMismatch int64 `json:"requests_chunk_tokens_mismatch"`
	PromptTarget        int64 `json:"prompt_target"`
	PromptServer        int64 `json:"prompt_server"`
	PromptWithServer    int64 `json:"requests_with_prompt_server"`
	PromptMismatch      int64 `json:"requests_prompt_mismatch"`
}

type jsonTrend struct {
	Points int  `json:"points"`
	Slope  num  `json:"slope_per_s"`
	T      num  `json:"t"`
	Rise   num  `json:"rise"`
	Mean   num  `json:"mean"`
	Up     bool `json:"up"`
}

type jsonOverload struct {
	Inflight      jsonTrend `json:"inflight"`
	TTFTP50       jsonTrend `json:"ttft_p50_ms"`
	MaxLatenessMS num       `json:"max_lateness_ms"`
}

type jsonBucket struct {
	Lo         int64         `json:"lo"`
	Hi         *int64        `json:"hi"`
	Requests   int64         `json:"requests"`
	OK         int64         `json:"ok"`
	TTFT       jsonQuantiles `json:"ttft_ms"`
	TPOT       jsonQuantiles `json:"tpot_ms"`
	E2E        jsonQuantiles `json:"e2e_ms"`
	Attainment num           `json:"attainment"`
}

func jq(q stats.Quantiles) jsonQuantiles {
	if q.N == 0 {
		n := num(math.NaN())
		return jsonQuantiles{n, n, n, n, n, n, n}
	}
	return jsonQuantiles{num(q.Mean), num(q.P50), num(q.P90), num(q.P95), num(q.P99), num(q.P999), num(q.Max)}
}

func jt(t Trend) jsonTrend {
	return jsonTrend{Points: t.Points, Slope: num(t.Slope), T: num(t.T), Rise: num(t.Rise), Mean: num(t.Mean), Up: t.Up}
}

func jb(bs []Bucket) []jsonBucket {
	out := []jsonBucket{}
	for _, b := range bs {
		x := jsonBucket{Lo: b.Lo, Requests: b.Requests, OK: b.OK, TTFT: jq(b.TTFT), TPOT: jq(b.TPOT), E2E: jq(b.E2E), Attainment: num(b.Attainment)}
		if b.Hi != 0 {
			hi := b.Hi
			x.Hi = &hi
		}
		out = append(out, x)
	}
	return out
}

func ms(d float64) num {
	if d <= 0 {
		return num(math.NaN())
	}
	return num(d / 1e6)
}

func (r *Report) toJSON() jsonReport {
	t := r.Throughput
	j := jsonReport{
		Requests: jsonRequests{r.Requests.Total, r.Requests.OK, r.Requests.Failed, r.Requests.Dropped, r.Requests.Canceled},
		Throughput: jsonThroughput{
			RequestsPerS: num(t.RequestsPerS), OutputTokensPerS: num(t.OutputTokensPerS), TotalTokensPerS: num(t.TotalTokensPerS),
			SustainedOutputTokensPerS: num(t.SustainedOutputTokensPerS), PeakOutputTokensPerS: num(t.PeakOutputTokensPerS),
			Window: jsonWindow{num(t.WindowStartS), num(t.WindowEndS)},
		},
		TTFT: jq(r.TTFT), TPOT: jq(r.TPOT), ITL: jq(r.ITL), E2E: jq(r.E2E), Lateness: jq(r.Lateness),
		Flags: jsonFlags{ClientLimited: r.Flags.ClientLimited, Overloaded: r.Flags.Overloaded, StreamBuffered: r.Flags.Buffered,
			StreamBufferedEvidence: jsonBuffered{r.Buffered.Streams, r.Buffered.Bursty, num(r.Buffered.BurstyShare),
				num(r.Buffered.ZeroGapShare), num(r.Buffered.ChunksPerRead), num(r.Buffered.OtherGapMeanMS), num(r.Buffered.GapBoundMS)}},
		Warnings: append([]string{}, r.Warnings...),
	}
	if r.Repeats != nil {
		j.Repeats = r.Repeats.toJSON()
	}
	if g := r.Goodput; g != nil {
		j.Goodput = &jsonGoodput{num(g.RequestsPerS), num(g.OutputTokensPerS), num(g.Attainment)}
	}
	j.PerUser = jsonPerUser{js(r.PerUser.TokensPerS), js(r.PerUser.InvTPOT)}
	if c := r.Closed; c != nil {
		j.Closed = &jsonClosed{Concurrency: c.Concurrency, RampUpS: num(c.RampUpS),
			FirstWave:    jsonFirstWave{c.FirstWaveRequests, c.FirstWaveLateness.N, num(c.FirstWaveSendS), jq(c.FirstWaveLateness)},
			SteadyState:  jsonSteady{c.SteadyLateness.N, jq(c.SteadyLateness)},
			LimitedBasis: ClosedBasis}
	}
	if c := r.Conversations; c != nil {
		pc := c.PrefixCache
		j.Conversations = &jsonConversations{PrefixCache: jsonPrefixCache{Requests: pc.Requests, CachedTokens: pc.CachedTokens,
			PromptTokens: pc.PromptTokens, HitRate: num(pc.HitRate), BestRate: num(pc.BestRate), ByTurn: jcb(pc.ByTurn), ByPrompt: jcb(pc.ByPrompt)}}
		if pc.BestRule != "" {
			rule := pc.BestRule
			j.Conversations.PrefixCache.BestRule = &rule
		}
		if o := c.Overlap; o != nil {
			j.Conversations.Overlap = &jsonTurnOverlap{Turns: o.Turns, Overlapped: o.Overlapped, Share: num(o.Share)}
		}
		if w := c.Sessions; w != nil {
			j.Conversations.Sessions = &jsonSessions{Turns: w.Turns, Waited: w.Waited, WaitedShare: num(w.WaitedShare), Wait: jq(w.Wait),
				OverBound: w.OverBound, BoundMS: num(float64(w.Bound) / 1e6), ReshapedShare: ReshapedShare, ReshapedServer: w.Reshaped}
			reshaped := w.Reshaped
			j.Flags.ReshapedByServer = &reshaped
		}
	}
	if s := r.Server; s != nil {
		j.Server = s.toJSON()
	}
	b := &j.Breakdown
	b.PercentileMethod = PercentileMethod
	b.Samples = map[string]int64{"ttft_ms": r.TTFT.N, "tpot_ms": r.TPOT.N, "itl_ms": r.ITL.N, "e2e_ms": r.E2E.N, "schedule_lateness_ms": r.Lateness.N, "itl_per_token_ms": r.ITLPerToken.N}
	b.ByStatus = map[string]int64{}
	for _, s := range statuses {
		b.ByStatus[string(s)] = r.Requests.ByStatus[string(s)]
	}
	if r.ITLPerToken.N > 0 {
		q := jq(r.ITLPerToken)
		b.ITLPerToken = &q
	}
	b.Window = jsonWindowDetail{num(t.WarmupS), t.WarmupDetected, num(t.PeakAtS)}
	b.Duration = jsonDuration{num(t.FirstSentS), num(t.LastEndS), num(t.DurationS)}
	slo := r.Options.SLO
	b.SLO = jsonSLO{TTFTMS: ms(float64(slo.TTFT)), TPOTMS: ms(float64(slo.TPOT)), E2EMS: ms(float64(slo.E2E))}
	if r.Goodput != nil {
		b.SLO.Good = r.Goodput.Good
	}
	k := r.Tokens
	b.Tokens = jsonTokens{k.OutputTarget, k.Output, k.OutputUsage, k.OutputTokenizer, k.OutputUnknown, k.Shorter, k.Longer,
		k.Chunks, k.ChunkTokens, k.WithChunkTokens, k.ChunkTokensMismatch, k.PromptTarget, k.PromptServer, k.PromptWithServerCount, k.PromptMismatch}
	b.Overload = jsonOverload{jt(r.Flags.InflightTrend), jt(r.Flags.TTFTTrend), num(float64(r.Flags.MaxLateness) / 1e6)}
	b.ByPrompt, b.ByOutput = jb(r.ByPrompt), jb(r.ByOutput)
	return j
}

// WriteJSON writes the report as one indented JSON object (docs/metrics.md lists the keys).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.toJSON())
}
