package sim

import (
	"fmt"
	"math"
	"time"
)

// StepTime returns the model duration of one engine step that runs prefillTokens prompt
// tokens (chunks), decodes one token for each of decodeSeqs sequences, and attends over
// contextTokens KV entries in all:
//
//	step = StepBase + PrefillPerToken*prefill + DecodePerSeq*decode + ContextPerToken*context
//	     + PerExpert*ExpectedExperts(prefill+decode)
func (c *Config) StepTime(prefillTokens, decodeSeqs, contextTokens int) time.Duration {
	ns := float64(c.StepBase) +
		float64(c.PrefillPerToken)*float64(prefillTokens) +
		float64(c.DecodePerSeq)*float64(decodeSeqs) +
		float64(c.ContextPerToken)*float64(contextTokens) +
		float64(c.PerExpert)*c.ExpectedExperts(prefillTokens+decodeSeqs)
	return time.Duration(math.Round(ns))
}

// ExpectedExperts is the expected number of distinct experts that n tokens touch in one
// MoE layer when each picks ExpertsPerToken of Experts uniformly: E*(1-(1-K/E)^n).
// Decode is memory-bound, so a step pays for each expert whose weights it reads once,
// however many tokens use it: this is why an MoE's step time grows fast at small batch
// and flattens once every expert is touched.
func (c *Config) ExpectedExperts(n int) float64 {
	if c.Experts == 0 || c.ExpertsPerToken == 0 || n <= 0 {
		return 0
	}
	e := float64(c.Experts)
	return e * (1 - math.Pow(1-float64(c.ExpertsPerToken)/e, float64(n)))
}

// DecodeStepTime is the step time of a pure decode step of batch sequences, each
// attending over contextPerSeq tokens.
func (c *Config) DecodeStepTime(batch, contextPerSeq int) time.Duration {
	return c.StepTime(0, batch, batch*contextPerSeq)
}

// StepPoint is the analytical decode step at one batch size.
type StepPoint struct {
	Batch int `json:"batch"`
	// StepMs is the model step time in milliseconds.
	StepMs float64 `json:"step_ms"`
	// TokPerSec is the aggregate decode rate batch/step; PerStreamTokPerSec is 1/step.
	TokPerSec          float64 `json:"tok_per_sec"`
	PerStreamTokPerSec float64 `json:"per_stream_tok_per_sec"`
}

// Info is the configuration and the analytical limits that follow from it, all in model
// time at RefContextTokens of context per sequence. Real-time rates are these times
// TimeScale.
type Info struct {
	Config      Config `json:"config"`
	StepFormula string `json:"step_formula"`
	// SingleStreamTokPerSec = 1 / DecodeStepTime(1, ref).
	SingleStreamTokPerSec float64 `json:"single_stream_tok_per_sec"`
	// MaxDecodeTokPerSec = max over batch b <= MaxBatch of b / DecodeStepTime(b, ref),
	// reached at MaxDecodeBatch; the saturated engine's decode rate.
	MaxDecodeTokPerSec float64 `json:"max_decode_tok_per_sec"`
	MaxDecodeBatch     int     `json:"max_decode_batch"`
	// PrefillTokPerSec is MaxBatchedTokens / StepTime(MaxBatchedTokens, 0,
	// MaxBatchedTokens): the rate of a step filled with one fresh prompt's prefill.
	PrefillTokPerSec float64 `json:"prefill_tok_per_sec"`
	// MaxConcurrentAtRef is how many requests of RefContextTokens (prompt+output) the KV
	// cache holds at once (under on-demand KV admission, at their full context: more run
	// while their contexts grow, and a warning says so).
	MaxConcurrentAtRef int `json:"max_concurrent_at_ref"`
	// Steps is the decode step at every batch size 1..MaxBatch.
	Steps []StepPoint `json:"steps"`
	// Warnings name settings under which the figures above will not be reached in
	// practice (they stay right in model time).
	Warnings []string `json:"warnings,omitempty"`
	// PrefixCache describes the automatic prefix cache (engine profiles).
	PrefixCache *PrefixCacheInfo `json:"prefix_cache,omitempty"`
	// Fixed profile: exact TTFT and ITL in milliseconds (model time).
	FixedTTFTMs float64 `json:"fixed_ttft_ms,omitempty"`
	FixedITLMs  float64 `json:"fixed_itl_ms,omitempty"`
}

// PrefixCacheInfo is /sim/info's account of the prefix cache.
type PrefixCacheInfo struct {
	Enabled     bool `json:"enabled"`
	BlockTokens int  `json:"block_tokens"`
	// CapacityBlocks = KVCacheTokens / BlockTokens: what the cache holds when no request
	// runs. While requests run it holds (KVCacheTokens - used) / BlockTokens free blocks
	// besides the blocks the running requests hold.
	CapacityBlocks int    `json:"capacity_blocks"`
	Rule           string `json:"rule"`
}

const prefixRule = "full blocks of block_tokens tokens, keyed by the hash chain of the token stream (prompt, then output less its last token); a request reads the longest run of cached blocks from its prompt's start, never the block holding its last prompt token, and skips their prefill; blocks held by running requests are shared; unheld blocks stay cached in free KV space and are evicted least recently freed first when an admission needs the space"

const stepFormula = "step = step_base + prefill_per_token*prefill_tokens + decode_per_seq*decoding_seqs + context_per_token*context_tokens + per_expert*experts*(1-(1-experts_per_token/experts)^(prefill_tokens+decoding_seqs))"

// Analyze computes Info for c (which should be valid).
func Analyze(c Config) Info {
	in := Info{Config: c}
	if c.Fixed {
		in.StepFormula = "fixed: first token at fixed_ttft after arrival, then one every fixed_itl; no batching"
		in.FixedTTFTMs = float64(c.FixedTTFT) / 1e6
		in.FixedITLMs = float64(c.FixedITL) / 1e6
		if c.FixedITL > 0 {
			in.SingleStreamTokPerSec = 1 / c.FixedITL.Seconds()
		}
		return in
	}
	in.StepFormula = stepFormula
	in.PrefixCache = &PrefixCacheInfo{Enabled: c.PrefixCache}
	if c.PrefixCache {
		in.PrefixCache.BlockTokens = c.PrefixBlockTokens
		in.PrefixCache.CapacityBlocks = c.KVCacheTokens / c.PrefixBlockTokens
		in.PrefixCache.Rule = prefixRule
	}
	ref := c.RefContextTokens
	in.Steps = make([]StepPoint, 0, c.MaxBatch)
	for b := 1; b <= c.MaxBatch; b++ {
		d := c.DecodeStepTime(b, ref).Seconds()
		p := StepPoint{Batch: b, StepMs: d * 1e3, TokPerSec: float64(b) / d, PerStreamTokPerSec: 1 / d}
		in.Steps = append(in.Steps, p)
		if p.TokPerSec > in.MaxDecodeTokPerSec {
			in.MaxDecodeTokPerSec, in.MaxDecodeBatch = p.TokPerSec, b
		}
	}
	in.SingleStreamTokPerSec = in.Steps[0].TokPerSec
	n := c.MaxBatchedTokens
	in.PrefillTokPerSec = float64(n) / c.StepTime(n, 0, n).Seconds()
	if ref > 0 {
		in.MaxConcurrentAtRef = min(c.KVCacheTokens/ref, c.MaxBatch)
	} else {
		in.MaxConcurrentAtRef = c.MaxBatch
	}
	if in.MaxConcurrentAtRef < c.MaxBatch {
		in.Warnings = append(in.Warnings, fmt.Sprintf(
			"the KV cache (%d tokens) holds only %d sequences of %d tokens: the batch cannot reach max_batch %d at that context, so max_decode_tok_per_sec is not reachable",
			c.KVCacheTokens, in.MaxConcurrentAtRef, ref, c.MaxBatch))
	}
	if c.onDemand() {
		in.Warnings = append(in.Warnings,
			"kv_admission on-demand: the figures assume every sequence holds its full context; under load more sequences run while their contexts grow, then the newest are preempted and recomputed, so the decode rate reached under overload falls short of max_decode_tok_per_sec by the recomputation")
	}
	if real := time.Duration(float64(c.DecodeStepTime(1, 0)) / c.TimeScale); real < 50*time.Microsecond {
		in.Warnings = append(in.Warnings, fmt.Sprintf(
			"at time scale %g a single-stream step lasts %v of real time, below what timers resolve: real-time rates will fall short of model rates x %g (model-time figures hold)",
			c.TimeScale, real, c.TimeScale))
	}
	return in
}
