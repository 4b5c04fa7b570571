package analysis

import (
	"encoding/json"
	"io"
	"math"
	"strconv"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"
)

// Num is a float that marshals NaN and ±Inf (undefined figures) as JSON null.
type Num float64

func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// The JSON shapes. The top-level keys and the keys of requests, throughput, the latency
// objects, goodput and flags are a contract (docs/metrics.md): never rename them silently.
// The report's headline figures come from their declaration (figures.go, figureObject);
// the shapes below are the rest.

type jsonWindow struct {
	StartS Num `json:"start_s"`
	EndS   Num `json:"end_s"`
}

type jsonQuantiles struct {
	Mean Num `json:"mean"`
	P50  Num `json:"p50"`
	P90  Num `json:"p90"`
	P95  Num `json:"p95"`
	P99  Num `json:"p99"`
	P999 Num `json:"p99_9"`
	Max  Num `json:"max"`
}

// jsonSpeeds is a Speeds: n, mean, p50 and the slow tail, tokens per second.
type jsonSpeeds struct {
	N    int64 `json:"n"`
	Mean Num   `json:"mean"`
	P50  Num   `json:"p50"`
	P10  Num   `json:"p10"`
	P1   Num   `json:"p1"`
	Min  Num   `json:"min"`
}

type jsonPerUser struct {
	TokensPerS jsonSpeeds `json:"tokens_per_s"`
	InvTPOT    jsonSpeeds `json:"inv_tpot_per_s"`
}

type jsonFirstWave struct {
	Requests int64         `json:"requests"`
	Sent     int64         `json:"sent"`
	SendS    Num           `json:"send_s"`
	Lateness jsonQuantiles `json:"schedule_lateness_ms"`
}

type jsonSteady struct {
	Sent     int64         `json:"sent"`
	Lateness jsonQuantiles `json:"schedule_lateness_ms"`
}

type jsonClosed struct {
	Concurrency  int           `json:"concurrency"`
	RampUpS      Num           `json:"ramp_up_s"`
	FirstWave    jsonFirstWave `json:"first_wave"`
	SteadyState  jsonSteady    `json:"steady_state"`
	LimitedBasis string        `json:"client_limited_basis"`
}

func js(s Speeds) jsonSpeeds {
	return jsonSpeeds{s.N, Num(s.Mean), Num(s.P50), Num(s.P10), Num(s.P1), Num(s.Min)}
}

type jsonFlags struct {
	ClientLimited bool `json:"client_limited"`
	Overloaded    bool `json:"overloaded"`
	// ReshapedByServer is absent without sequential sessions.
	ReshapedByServer *bool `json:"reshaped_by_server,omitempty"`
	StreamBuffered   bool  `json:"stream_buffered"`
	// StreamBufferedEvidence is the rule's evidence (analysis/buffered.go).
	StreamBufferedEvidence jsonBuffered `json:"stream_buffered_evidence"`
	PromptOffTarget        bool         `json:"prompt_off_target"`
	// PromptOffTargetEvidence is the rule's evidence (analysis/promptoff.go).
	PromptOffTargetEvidence jsonPromptOff `json:"prompt_off_target_evidence"`
}

// jsonPromptOff: Requests have a server prompt count; RequestsOff are off their target by
// more than BoundShare of it each; DifferenceShare is (server − target) / target over
// them, null with none.
type jsonPromptOff struct {
	Requests        int64   `json:"requests"`
	RequestsOff     int64   `json:"requests_off"`
	DifferenceShare Num     `json:"difference_share"`
	BoundShare      float64 `json:"bound_share"`
}

type jsonBuffered struct {
	Streams        int64 `json:"streams"`
	BurstyStreams  int64 `json:"bursty_streams"`
	BurstyShare    Num   `json:"bursty_share"`
	ZeroGapShare   Num   `json:"zero_gap_share"`
	ChunksPerRead  Num   `json:"chunks_per_read"`
	OtherGapMeanMS Num   `json:"other_gap_mean_ms"`
	GapBoundMS     Num   `json:"gap_bound_ms"`
}

type jsonCacheBucket struct {
	Lo           int64  `json:"lo"`
	Hi           *int64 `json:"hi"`
	Requests     int64  `json:"requests"`
	CachedTokens int64  `json:"cached_tokens"`
	PromptTokens int64  `json:"prompt_tokens"`
	HitRate      Num    `json:"hit_rate"`
}

type jsonPrefixCache struct {
	Requests     int64             `json:"requests"`
	CachedTokens int64             `json:"cached_tokens"`
	PromptTokens int64             `json:"prompt_tokens"`
	HitRate      Num               `json:"hit_rate"`
	BestRate     Num               `json:"best_rate"`
	BestRule     *string           `json:"best_rate_rule"`
	ByTurn       []jsonCacheBucket `json:"by_turn"`
	ByPrompt     []jsonCacheBucket `json:"by_prompt_tokens"`
}

type jsonSessions struct {
	Turns          int64         `json:"turns"`
	Waited         int64         `json:"waited"`
	WaitedShare    Num           `json:"waited_share"`
	Wait           jsonQuantiles `json:"session_wait_ms"`
	OverBound      int64         `json:"waited_over_bound"`
	BoundMS        Num           `json:"bound_ms"`
	ReshapedShare  Num           `json:"reshaped_share"`
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
	Share      Num   `json:"overlapped_share"`
}

func jcb(bs []CacheBucket) []jsonCacheBucket {
	out := []jsonCacheBucket{}
	for _, b := range bs {
		x := jsonCacheBucket{Lo: b.Lo, Requests: b.Requests, CachedTokens: b.CachedTokens, PromptTokens: b.PromptTokens, HitRate: Num(b.HitRate)}
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
	ITLPerToken      any              `json:"itl_per_token_ms"`
	Window           Object           `json:"window"`
	Duration         Object           `json:"duration"`
	SLO              jsonSLO          `json:"slo"`
	Tokens           jsonTokens       `json:"tokens"`
	Overload         jsonOverload     `json:"overload"`
	ByPrompt         []jsonBucket     `json:"by_prompt_tokens"`
	ByOutput         []jsonBucket     `json:"by_output_tokens"`
}

type jsonSLO struct {
	TTFTMS Num `json:"ttft_ms"`
	TPOTMS Num `json:"tpot_ms"`
	E2EMS  Num `json:"e2e_ms"`
	// The reasoning objectives: absent when not set, so that a report without them is
	// what it was before they existed.
	TTFAMS       *Num  `json:"ttfa_ms,omitempty"`
	AnswerTPOTMS *Num  `json:"answer_tpot_ms,omitempty"`
	Good         int64 `json:"good"`
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
	Slope  Num  `json:"slope_per_s"`
	T      Num  `json:"t"`
	Rise   Num  `json:"rise"`
	Mean   Num  `json:"mean"`
	Up     bool `json:"up"`
}

type jsonOverload struct {
	Inflight      jsonTrend `json:"inflight"`
	TTFTP50       jsonTrend `json:"ttft_p50_ms"`
	MaxLatenessMS Num       `json:"max_lateness_ms"`
}

type jsonBucket struct {
	Lo         int64         `json:"lo"`
	Hi         *int64        `json:"hi"`
	Requests   int64         `json:"requests"`
	OK         int64         `json:"ok"`
	TTFT       jsonQuantiles `json:"ttft_ms"`
	TPOT       jsonQuantiles `json:"tpot_ms"`
	E2E        jsonQuantiles `json:"e2e_ms"`
	Attainment Num           `json:"attainment"`
}

func jq(q stats.Quantiles) jsonQuantiles {
	if q.N == 0 {
		n := Num(math.NaN())
		return jsonQuantiles{n, n, n, n, n, n, n}
	}
	return jsonQuantiles{Num(q.Mean), Num(q.P50), Num(q.P90), Num(q.P95), Num(q.P99), Num(q.P999), Num(q.Max)}
}

func jt(t Trend) jsonTrend {
	return jsonTrend{Points: t.Points, Slope: Num(t.Slope), T: Num(t.T), Rise: Num(t.Rise), Mean: Num(t.Mean), Up: t.Up}
}

func jb(bs []Bucket) []jsonBucket {
	out := []jsonBucket{}
	for _, b := range bs {
		x := jsonBucket{Lo: b.Lo, Requests: b.Requests, OK: b.OK, TTFT: jq(b.TTFT), TPOT: jq(b.TPOT), E2E: jq(b.E2E), Attainment: Num(b.Attainment)}
		if b.Hi != 0 {
			hi := b.Hi
			x.Hi = &hi
		}
		out = append(out, x)
	}
	return out
}

func ms(d float64) Num {
	if d <= 0 {
		return Num(math.NaN())
	}
	return Num(d / 1e6)
}

// toJSON is the report's JSON object: the headline figures where their declaration puts
// them (figureObject), the other sections in their shapes.
func (r *Report) toJSON() Object {
	j := Object{{"requests", figureObject(r, "requests")}, {"throughput", figureObject(r, "throughput")}}
	j = append(j, figureObject(r, "")...)
	j = append(j, jsonField{"goodput", figureObject(r, "goodput")},
		jsonField{"per_user", PerUserJSON(r.PerUser)})
	var closed *jsonClosed
	if c := r.Closed; c != nil {
		closed = &jsonClosed{Concurrency: c.Concurrency, RampUpS: Num(c.RampUpS),
			FirstWave:    jsonFirstWave{c.FirstWaveRequests, c.FirstWaveLateness.N, Num(c.FirstWaveSendS), jq(c.FirstWaveLateness)},
			SteadyState:  jsonSteady{c.SteadyLateness.N, jq(c.SteadyLateness)},
			LimitedBasis: ClosedBasis}
	}
	j = append(j, jsonField{"closed_loop", closed})
	flags := jsonFlags{ClientLimited: r.Flags.ClientLimited, Overloaded: r.Flags.Overloaded, StreamBuffered: r.Flags.Buffered,
		StreamBufferedEvidence: jsonBuffered{r.Buffered.Streams, r.Buffered.Bursty, Num(r.Buffered.BurstyShare),
			Num(r.Buffered.ZeroGapShare), Num(r.Buffered.ChunksPerRead), Num(r.Buffered.OtherGapMeanMS), Num(r.Buffered.GapBoundMS)},
		PromptOffTarget:         r.Flags.PromptOffTarget,
		PromptOffTargetEvidence: jsonPromptOff{r.Tokens.PromptWithServerCount, r.Tokens.PromptOff, Num(r.Tokens.PromptDiffShare()), PromptOffBound}}
	// Conversations and server are absent (not null) for a run without them, so that such
	// a report is byte for byte what it was before they existed.
	if c := r.Conversations; c != nil {
		j = append(j, jsonField{"conversations", r.conversationsJSON()})
		if w := c.Sessions; w != nil {
			reshaped := w.Reshaped
			flags.ReshapedByServer = &reshaped
		}
	}
	if r.Agents != nil {
		j = append(j, jsonField{"agents", r.agentsJSON()})
	}
	if r.Images != nil { // absent for a run without images, as conversations
		j = append(j, jsonField{"images", figureObject(r, "images")})
	}
	if s := r.Server; s != nil {
		j = append(j, jsonField{"server", s.toJSON()})
	}
	j = append(j, jsonField{"flags", flags}, jsonField{"breakdown", r.breakdownJSON()}, jsonField{"warnings", append([]string{}, r.Warnings...)})
	if r.Repeats != nil { // absent for a run that was not repeated (docs/metrics.md, "Repeats")
		j = append(j, jsonField{"repeats", r.Repeats.toJSON()})
	}
	return j
}

func (r *Report) conversationsJSON() *jsonConversations {
	c := r.Conversations
	pc := c.PrefixCache
	j := &jsonConversations{PrefixCache: jsonPrefixCache{Requests: pc.Requests, CachedTokens: pc.CachedTokens,
		PromptTokens: pc.PromptTokens, HitRate: Num(pc.HitRate), BestRate: Num(pc.BestRate), ByTurn: jcb(pc.ByTurn), ByPrompt: jcb(pc.ByPrompt)}}
	if pc.BestRule != "" {
		rule := pc.BestRule
		j.PrefixCache.BestRule = &rule
	}
	if o := c.Overlap; o != nil {
		j.Overlap = &jsonTurnOverlap{Turns: o.Turns, Overlapped: o.Overlapped, Share: Num(o.Share)}
	}
	if w := c.Sessions; w != nil {
		j.Sessions = &jsonSessions{Turns: w.Turns, Waited: w.Waited, WaitedShare: Num(w.WaitedShare), Wait: jq(w.Wait),
			OverBound: w.OverBound, BoundMS: Num(float64(w.Bound) / 1e6), ReshapedShare: ReshapedShare, ReshapedServer: w.Reshaped}
	}
	return j
}

func (r *Report) breakdownJSON() jsonBreakdown {
	var b jsonBreakdown
	b.PercentileMethod = PercentileMethod
	b.Samples = distributionSamples(r)
	b.ByStatus = map[string]int64{}
	for _, s := range decode.Statuses {
		b.ByStatus[string(s)] = r.Requests.ByStatus[string(s)]
	}
	bd := figureObject(r, "breakdown")
	for _, f := range bd {
		switch f.key {
		case "itl_per_token_ms":
			b.ITLPerToken = f.value
		case "window":
			b.Window = *f.value.(*Object)
		case "duration":
			b.Duration = *f.value.(*Object)
		}
	}
	slo := r.Options.SLO
	b.SLO = jsonSLO{TTFTMS: ms(float64(slo.TTFT)), TPOTMS: ms(float64(slo.TPOT)), E2EMS: ms(float64(slo.E2E))}
	if slo.TTFA > 0 {
		v := ms(float64(slo.TTFA))
		b.SLO.TTFAMS = &v
	}
	if slo.AnswerTPOT > 0 {
		v := ms(float64(slo.AnswerTPOT))
		b.SLO.AnswerTPOTMS = &v
	}
	if r.Goodput != nil {
		b.SLO.Good = r.Goodput.Good
	}
	k := r.Tokens
	b.Tokens = jsonTokens{k.OutputTarget, k.Output, k.OutputUsage, k.OutputTokenizer, k.OutputUnknown, k.Shorter, k.Longer,
		k.Chunks, k.ChunkTokens, k.WithChunkTokens, k.ChunkTokensMismatch, k.PromptTarget, k.PromptServer, k.PromptWithServerCount, k.PromptMismatch}
	b.Overload = jsonOverload{jt(r.Flags.InflightTrend), jt(r.Flags.TTFTTrend), Num(float64(r.Flags.MaxLateness) / 1e6)}
	b.ByPrompt, b.ByOutput = jb(r.ByPrompt), jb(r.ByOutput)
	return b
}

// WriteJSON writes the report as one indented JSON object (docs/metrics.md lists the keys).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.toJSON())
}
