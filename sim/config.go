package sim

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/sim/pooling"
)

// Config is every parameter of the simulated engine. Durations are model time: the engine
// emits tokens at model time divided by TimeScale in real time.
//
// The step-time model (see StepTime) is
//
//	step = StepBase + PrefillPerToken*prefill_tokens + DecodePerSeq*decoding_seqs
//	     + ContextPerToken*context_tokens + AttentionPerPairNs*attention_pairs
//	     + PerExpert*E*(1-(1-K/E)^tokens)
//
// where attention_pairs counts, for every prompt token prefilled in the step, the tokens
// of its sequence before it (see AttentionPairs), and the last term is the expected number of distinct experts a step's tokens touch
// (E = Experts, K = ExpertsPerToken), each of which costs one expert's weight read.
// With Experts = 0 it is the plain linear model.
type Config struct {
	// Model is the served model name (/v1/models, the "model" field of requests).
	Model string `json:"model"`
	// MaxModelLen caps prompt + output tokens of one request.
	MaxModelLen int `json:"max_model_len"`

	StepBase        time.Duration `json:"step_base_ns"`
	PrefillPerToken time.Duration `json:"prefill_per_token_ns"`
	DecodePerSeq    time.Duration `json:"decode_per_seq_ns"`
	ContextPerToken time.Duration `json:"context_per_token_ns"`
	// AttentionPerPairNs is the prefill's attention compute, in nanoseconds (fractions
	// allowed: a pair costs well under one) per pair of a prompt token prefilled and a
	// token of its sequence before it, cached or not. It makes the prefill of a chunk
	// late in a long context cost more than the same chunk at its start, as attention
	// does; decode's attention is ContextPerToken's KV read, which bounds it.
	AttentionPerPairNs float64       `json:"attention_per_pair_ns"`
	PerExpert          time.Duration `json:"per_expert_ns"`
	Experts            int           `json:"experts"`
	ExpertsPerToken    int           `json:"experts_per_token"`
	// RequestOverhead is the server's time on each request before its engine queues it
	// (HTTP, chat template, tokenizing, a hop to a runner process): it delays the
	// request's first token and occupies no step, so a closed loop at the batch's size
	// leaves a slot idle that long per request while a queue hides it. Profile version 2.
	RequestOverhead time.Duration `json:"request_overhead_ns"`

	// ImageRule names how many prompt tokens one image counts for (media.LookupRule:
	// qwen2-vl, llava-1.5, gemma3, anthropic, openai, fixed:N); "" means
	// media.DefaultRule. A request's images add their tokens to its prompt, which
	// prefill charges like text.
	ImageRule string `json:"image_rule"`
	// VisionPerImage and VisionPerImageToken are the vision encoder's cost: each image a
	// request sends adds VisionPerImage plus VisionPerImageToken per token it counts for
	// to the step that admits the request, unless it lies within the prefix the request
	// finds cached (VisionTime). Engine profiles only. Modelled, not measured:
	// docs/sim.md gives each profile's reasoning.
	VisionPerImage      time.Duration `json:"vision_per_image_ns"`
	VisionPerImageToken time.Duration `json:"vision_per_image_token_ns"`

	// KVCacheTokens is the KV-cache capacity; a request is admitted only when its prompt
	// and its whole output fit beside the running ones (KVAdmission reserve).
	KVCacheTokens int `json:"kv_cache_tokens"`
	// KVAdmission is how KV is allocated: "" or KVReserve (the default) reserves prompt +
	// whole output at admission, so nothing is ever preempted; KVOnDemand reserves the
	// prompt at admission and one token per decode step, as vLLM v1 does, and when a
	// running sequence cannot grow it preempts the newest running one (its KV dropped, to
	// be recomputed, prompt and tokens so far, when it is admitted again: vLLM's
	// recompute preemption).
	KVAdmission string `json:"kv_admission,omitempty"`
	// MaxBatchedTokens is the per-step token budget (decodes + prefill chunks), like vLLM's
	// max_num_batched_tokens.
	MaxBatchedTokens int `json:"max_batched_tokens"`
	// MaxBatch caps running sequences, like vLLM's max_num_seqs.
	MaxBatch int `json:"max_batch"`
	// RefContextTokens is the per-sequence context at which Info's analytical figures are
	// computed.
	RefContextTokens int `json:"ref_context_tokens"`

	// The pooling engine (/v1/embeddings, /rerank): a scheduler of its own, as vLLM serves
	// a pooling model from an instance of its own, with the step coefficients above.
	// EmbeddingDim is the length of the vectors /v1/embeddings returns (the model's
	// hidden size); PoolMaxBatchedTokens is its per-step token budget and PoolMaxBatch
	// caps its running inputs (vLLM's max_num_batched_tokens and max_num_seqs for a
	// pooling model). See pooling.go and docs/sim.md.
	EmbeddingDim         int `json:"embedding_dim"`
	PoolMaxBatchedTokens int `json:"pool_max_batched_tokens"`
	PoolMaxBatch         int `json:"pool_max_batch"`

	// PrefixCache turns on automatic prefix caching (vLLM's and SGLang's default): full
	// blocks of PrefixBlockTokens prompt tokens, named by the hash chain of their tokens,
	// stay cached in the KV cache's free space (evicted least recently used first), and a
	// request whose prompt starts with cached blocks skips their prefill. Engine profiles
	// only; the fixed profile ignores it.
	PrefixCache       bool `json:"prefix_cache"`
	PrefixBlockTokens int  `json:"prefix_block_tokens"`

	// Fixed replaces the engine by exact timing: first token FixedTTFT after arrival, then
	// one token every FixedITL, with no batching and no capacity limit.
	Fixed     bool          `json:"fixed"`
	FixedTTFT time.Duration `json:"fixed_ttft_ns"`
	FixedITL  time.Duration `json:"fixed_itl_ns"`

	// EOSMeanTokens, when > 0, makes a request without ignore_eos stop at a natural length
	// drawn (seeded) from a geometric distribution of this mean, raised to min_tokens and
	// capped by max_tokens. 0: output is always max_tokens long.
	EOSMeanTokens int `json:"eos_mean_tokens"`
	// DefaultMaxTokens applies to completions without max_tokens (vLLM and OpenAI use 16).
	DefaultMaxTokens int `json:"default_max_tokens"`
	// DefaultChatMaxTokens caps chat requests without max_tokens (vLLM would allow
	// max_model_len - prompt; the sim caps it so a bare request ends in reasonable time).
	DefaultChatMaxTokens int `json:"default_chat_max_tokens"`

	// ReasoningShare (0..1) is the share of every answer's output that is reasoning: its
	// first round(ReasoningShare x output tokens) tokens, streamed as reasoning deltas as
	// vLLM's reasoning parsers stream them (chat's delta.reasoning, a Messages thinking
	// block, a Responses reasoning item; completions have no reasoning field). 0: none.
	ReasoningShare float64 `json:"reasoning_share"`
	// ReasoningUsage makes chat's final usage carry completion_tokens_details
	// .reasoning_tokens, as OpenAI's does; vLLM's does not (its UsageInfo has no such
	// field), which is the default. The Responses usage always carries it, as vLLM's does.
	ReasoningUsage bool `json:"reasoning_usage,omitempty"`

	// TimeScale speeds model time up: 10 runs everything 10x faster in real time.
	TimeScale float64 `json:"time_scale"`
	// Seed makes faults and natural output lengths reproducible.
	Seed   uint64 `json:"seed"`
	Faults Faults `json:"faults"`

	// RequestLog, when set, is a file to which the server appends one JSON line per
	// generation request (with the client's X-Request-Id), written off the engine's path.
	RequestLog string `json:"request_log,omitempty"`
	// RequestLogWrites adds to each request-log line the stamp and token count of every
	// body write that carried tokens (write_unix_ns, write_tokens). Needs RequestLog.
	RequestLogWrites bool `json:"request_log_writes,omitempty"`
}

// KV admission policies (Config.KVAdmission).
const (
	KVReserve  = "reserve"
	KVOnDemand = "on-demand"
)

// onDemand reports whether KV is allocated as tokens are made (KVOnDemand).
func (c *Config) onDemand() bool { return c.KVAdmission == KVOnDemand && !c.Fixed }

// prefixCaching reports whether the engine caches prompt prefixes.
func (c *Config) prefixCaching() bool { return c.PrefixCache && !c.Fixed }

// Faults are injected failures, each drawn per request with its rate (0..1). The three
// HTTP statuses are mutually exclusive (their rates must sum to <= 1); the others are
// independent. Durations are model time.
type Faults struct {
	Status429        float64       `json:"status_429"`
	Status500        float64       `json:"status_500"`
	Status503        float64       `json:"status_503"`
	Disconnect       float64       `json:"disconnect"`
	Malformed        float64       `json:"malformed"`
	Stall            float64       `json:"stall"`
	StallFor         time.Duration `json:"stall_for_ns"`
	SlowFirstByte    float64       `json:"slow_first_byte"`
	SlowFirstByteFor time.Duration `json:"slow_first_byte_for_ns"`
	// StreamError ends a stream with the engine's mid-stream error before a token
	// (chat's error chunk, an "event: error" in Messages and Responses).
	StreamError float64 `json:"stream_error,omitempty"`
}

// Any reports whether any fault has a positive rate.
func (f Faults) Any() bool {
	return f.Status429 > 0 || f.Status500 > 0 || f.Status503 > 0 || f.Disconnect > 0 ||
		f.Malformed > 0 || f.Stall > 0 || f.SlowFirstByte > 0 || f.StreamError > 0
}

// FaultKinds lists the names ParseFault accepts.
var FaultKinds = []string{"429", "500", "503", "disconnect", "malformed", "stall", "slow-first-byte", "stream-error"}

// ParseFault sets one fault from "KIND=RATE" or, for stall and slow-first-byte,
// "KIND=RATE:DURATION" (e.g. "503=0.01", "stall=0.05:2s"). The duration defaults to 1s.
func ParseFault(s string, f *Faults) error {
	kind, val, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("fault %q: want KIND=RATE[:DURATION] with KIND one of %s", s, strings.Join(FaultKinds, ", "))
	}
	kind = strings.ToLower(strings.TrimSpace(kind))
	rateS, durS, hasDur := strings.Cut(val, ":")
	rate, err := strconv.ParseFloat(strings.TrimSpace(rateS), 64)
	if err != nil || math.IsNaN(rate) || rate < 0 || rate > 1 {
		return fmt.Errorf("fault %q: rate %q is not a number in [0,1]", s, rateS)
	}
	dur := time.Second
	if hasDur {
		if kind != "stall" && kind != "slow-first-byte" {
			return fmt.Errorf("fault %q: only stall and slow-first-byte take a duration", s)
		}
		dur, err = time.ParseDuration(strings.TrimSpace(durS))
		if err != nil || dur <= 0 {
			return fmt.Errorf("fault %q: duration %q is not a positive Go duration like 500ms", s, durS)
		}
	}
	switch kind {
	case "429":
		f.Status429 = rate
	case "500":
		f.Status500 = rate
	case "503":
		f.Status503 = rate
	case "disconnect":
		f.Disconnect = rate
	case "malformed":
		f.Malformed = rate
	case "stall":
		f.Stall, f.StallFor = rate, dur
	case "slow-first-byte":
		f.SlowFirstByte, f.SlowFirstByteFor = rate, dur
	case "stream-error":
		f.StreamError = rate
	default:
		return fmt.Errorf("fault %q: unknown kind %q (want one of %s)", s, kind, strings.Join(FaultKinds, ", "))
	}
	return nil
}

// MaxTimeScale bounds TimeScale; at 1e6 a 1 ms model step takes 1 ns of real time, which
// is "as fast as the machine goes".
const MaxTimeScale = 1e6

// Validate checks that the configuration describes a runnable engine.
func (c Config) Validate() error {
	var errs []error
	for _, p := range c.problems() {
		errs = append(errs, fmt.Errorf("sim: config %s: %s", p.field, p.what))
	}
	return errors.Join(errs...)
}

// fieldProblem is one thing Validate finds wrong: the field, by its JSON name, and what.
type fieldProblem struct{ field, what string }

// problems lists what makes c unrunnable, field by field, so that Validate and a profile
// file's reader (which names the file) each say it in their own words.
func (c Config) problems() []fieldProblem {
	var errs []fieldProblem
	bad := func(field, format string, a ...any) {
		errs = append(errs, fieldProblem{field, fmt.Sprintf(format, a...)})
	}
	if c.Model == "" {
		bad("model", "empty")
	}
	if c.MaxModelLen < 2 {
		bad("max_model_len", "%d < 2", c.MaxModelLen)
	}
	if !(c.TimeScale > 0 && c.TimeScale <= MaxTimeScale) {
		bad("time_scale", "%v not in (0, %g]", c.TimeScale, float64(MaxTimeScale))
	}
	if c.DefaultMaxTokens < 1 {
		bad("default_max_tokens", "%d < 1", c.DefaultMaxTokens)
	}
	if c.DefaultChatMaxTokens < 1 {
		bad("default_chat_max_tokens", "%d < 1", c.DefaultChatMaxTokens)
	}
	if !(c.ReasoningShare >= 0 && c.ReasoningShare <= 1) {
		bad("reasoning_share", "%v not in [0, 1]", c.ReasoningShare)
	}
	if c.EOSMeanTokens < 0 {
		bad("eos_mean_tokens", "%d < 0", c.EOSMeanTokens)
	}
	if c.Fixed {
		if c.FixedTTFT < 0 {
			bad("fixed_ttft", "%v < 0", c.FixedTTFT)
		}
		if c.FixedITL < 0 {
			bad("fixed_itl", "%v < 0", c.FixedITL)
		}
	} else {
		for _, d := range []struct {
			name string
			v    time.Duration
		}{{"step_base", c.StepBase}, {"prefill_per_token", c.PrefillPerToken}, {"decode_per_seq", c.DecodePerSeq},
			{"context_per_token", c.ContextPerToken}, {"per_expert", c.PerExpert}, {"request_overhead", c.RequestOverhead},
			{"vision_per_image", c.VisionPerImage}, {"vision_per_image_token", c.VisionPerImageToken}} {
			if d.v < 0 {
				bad(d.name, "%v < 0", d.v)
			}
		}
		if !(c.AttentionPerPairNs >= 0 && c.AttentionPerPairNs <= 1e6) {
			bad("attention_per_pair_ns", "%v not in [0, 1e6]", c.AttentionPerPairNs)
		}
		if c.StepBase+c.DecodePerSeq+c.PerExpert <= 0 {
			bad("step_base", "a decode step would take no time: set step_base, decode_per_seq or per_expert")
		}
		if c.Experts < 0 || c.ExpertsPerToken < 0 || c.ExpertsPerToken > c.Experts {
			bad("experts", "need 0 <= experts_per_token (%d) <= experts (%d)", c.ExpertsPerToken, c.Experts)
		}
		if c.PerExpert > 0 && c.ExpertsPerToken == 0 {
			bad("per_expert", "set but experts_per_token is 0")
		}
		if c.MaxBatch < 1 {
			bad("max_batch", "%d < 1", c.MaxBatch)
		}
		if c.MaxBatchedTokens < c.MaxBatch {
			bad("max_batched_tokens", "%d < max_batch %d: every running sequence must be able to decode each step", c.MaxBatchedTokens, c.MaxBatch)
		}
		if c.KVCacheTokens < c.MaxModelLen {
			bad("kv_cache_tokens", "%d < max_model_len %d: a request of max_model_len could never be admitted", c.KVCacheTokens, c.MaxModelLen)
		}
		if c.RefContextTokens < 0 {
			bad("ref_context_tokens", "%d < 0", c.RefContextTokens)
		}
		if c.KVAdmission != "" && c.KVAdmission != KVReserve && c.KVAdmission != KVOnDemand {
			bad("kv_admission", "%q: want %s or %s", c.KVAdmission, KVReserve, KVOnDemand)
		}
		if c.PrefixCache && (c.PrefixBlockTokens < 1 || c.PrefixBlockTokens > c.KVCacheTokens) {
			bad("prefix_block_tokens", "%d not in [1, kv_cache_tokens %d]", c.PrefixBlockTokens, c.KVCacheTokens)
		}
	}
	if _, err := c.imageRule(); err != nil {
		bad("image_rule", "%v", err)
	}
	if c.EmbeddingDim < 1 || c.EmbeddingDim > pooling.MaxEmbeddingDim {
		bad("embedding_dim", "%d not in [1, %d]", c.EmbeddingDim, pooling.MaxEmbeddingDim)
	}
	if c.PoolMaxBatch < 1 {
		bad("pool_max_batch", "%d < 1", c.PoolMaxBatch)
	}
	if c.PoolMaxBatchedTokens < 1 {
		bad("pool_max_batched_tokens", "%d < 1", c.PoolMaxBatchedTokens)
	}
	if c.RequestLogWrites && c.RequestLog == "" {
		bad("request_log_writes", "set without request_log")
	}
	f := c.Faults
	for _, r := range []struct {
		name string
		v    float64
	}{{"429", f.Status429}, {"500", f.Status500}, {"503", f.Status503}, {"disconnect", f.Disconnect},
		{"malformed", f.Malformed}, {"stall", f.Stall}, {"slow-first-byte", f.SlowFirstByte}} {
		if math.IsNaN(r.v) || r.v < 0 || r.v > 1 {
			bad("faults."+r.name, "rate %v not in [0,1]", r.v)
		}
	}
	if s := f.Status429 + f.Status500 + f.Status503; s > 1+1e-12 {
		bad("faults", "429+500+503 rates sum to %v > 1", s)
	}
	if f.Stall > 0 && f.StallFor <= 0 {
		bad("faults.stall", "rate set but duration %v <= 0", f.StallFor)
	}
	if f.SlowFirstByte > 0 && f.SlowFirstByteFor <= 0 {
		bad("faults.slow-first-byte", "rate set but duration %v <= 0", f.SlowFirstByteFor)
	}
	return errs
}
