package sim

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/llmreplay/llmreplay/media"
)

// StepTime returns the model duration of one engine step that runs prefillTokens prompt
// tokens (chunks), decodes one token for each of decodeSeqs sequences, attends over
// contextTokens KV entries in all, and whose prefill chunks make attnPairs attention
// pairs (the sum of AttentionPairs over the step's chunks):
//
//	step = StepBase + PrefillPerToken*prefill + DecodePerSeq*decode + ContextPerToken*context
//	     + AttentionPerPairNs*attnPairs + PerExpert*ExpectedExperts(prefill+decode)
func (c *Config) StepTime(prefillTokens, decodeSeqs, contextTokens int, attnPairs int64) time.Duration {
	ns := float64(c.StepBase) +
		float64(c.PrefillPerToken)*float64(prefillTokens) +
		float64(c.DecodePerSeq)*float64(decodeSeqs) +
		float64(c.ContextPerToken)*float64(contextTokens) +
		c.AttentionPerPairNs*float64(attnPairs) +
		float64(c.PerExpert)*c.ExpectedExperts(prefillTokens+decodeSeqs)
	return time.Duration(math.Round(ns))
}

// AttentionPairs is the attention work of prefilling n prompt tokens that follow before
// tokens of the same sequence (computed in earlier steps or read from the prefix cache):
// each token attends over every token before it, so the chunk makes
// n*before + n*(n-1)/2 (query, key) pairs. The same n tokens cost more the later they come
// in a long context, which is why the last 1k tokens of a 100k-token prompt take longer
// to prefill than its first 1k.
func AttentionPairs(before, n int) int64 {
	if n <= 0 {
		return 0
	}
	return int64(n)*int64(before) + int64(n)*int64(n-1)/2
}

// PrefillTime is the model time to prefill a prompt of prompt tokens whose first cached
// tokens come from the prefix cache, alone on the engine: chunks of MaxBatchedTokens, each
// a step of its own (the last one samples the first token, so this is the TTFT of a
// request that finds the engine idle).
func (c *Config) PrefillTime(prompt, cached int) time.Duration {
	var d time.Duration
	for done := cached; done < prompt; {
		n := min(prompt-done, c.MaxBatchedTokens)
		d += c.StepTime(n, 0, done+n, AttentionPairs(done, n))
		done += n
	}
	return d
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
	return c.StepTime(0, batch, batch*contextPerSeq, 0)
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

// PrefillPoint is the prefill at one context length (model time).
type PrefillPoint struct {
	// ContextTokens is the number of tokens before the chunk.
	ContextTokens int `json:"context_tokens"`
	// ChunkMs is the step time of a chunk of MaxBatchedTokens prefilled after
	// ContextTokens tokens; ChunkTokPerSec is MaxBatchedTokens / ChunkMs.
	ChunkMs        float64 `json:"chunk_ms"`
	ChunkTokPerSec float64 `json:"chunk_tok_per_sec"`
	// PromptMs is PrefillTime(ContextTokens+MaxBatchedTokens, 0): the TTFT of a fresh
	// prompt ending with that chunk on an idle engine.
	PromptMs float64 `json:"prompt_ms"`
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
	// MaxBatchedTokens, AttentionPairs(0, MaxBatchedTokens)): the rate of a step filled
	// with one fresh prompt's prefill.
	PrefillTokPerSec float64 `json:"prefill_tok_per_sec"`
	// PrefillAt is the prefill at growing context lengths: a step that prefills
	// MaxBatchedTokens tokens after that many earlier tokens of the same sequence, and
	// the whole prompt of that length alone on the engine. Attention makes both slow down
	// as the context grows.
	PrefillAt []PrefillPoint `json:"prefill_at,omitempty"`
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

const stepFormula = "step = step_base + prefill_per_token*prefill_tokens + decode_per_seq*decoding_seqs + context_per_token*context_tokens + attention_per_pair_ns*attention_pairs (per prefilled token, the tokens of its sequence before it) + per_expert*experts*(1-(1-experts_per_token/experts)^(prefill_tokens+decoding_seqs)) + for each request admitted in the step, the vision encoder of its images not wholly within its cached prefix: vision_per_image*images + vision_per_image_token*image_tokens (image tokens by image_rule, charged to prefill like text)"

// prefillContexts are the context lengths of Info.PrefillAt (those that leave room for a
// chunk within MaxModelLen, then MaxModelLen less a chunk): the context-length buckets
// agent traffic is read in.
var prefillContexts = []int{0, 8192, 32768, 65536, 131072}

// Analyze computes Info for c (which should be valid).
func Analyze(c Config) Info {
	in := Info{Config: c}
	if in.Config.ImageRule == "" {
		in.Config.ImageRule = media.DefaultRule // the rule in force, said
	}
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
	in.PrefillTokPerSec = float64(n) / c.StepTime(n, 0, n, AttentionPairs(0, n)).Seconds()
	ctxs := slices.DeleteFunc(slices.Clone(prefillContexts), func(ctx int) bool { return ctx+n > c.MaxModelLen })
	if last := c.MaxModelLen - n; last >= 0 && (len(ctxs) == 0 || ctxs[len(ctxs)-1] != last) {
		ctxs = append(ctxs, last) // the longest prompt the model takes ends with a full chunk
	}
	for _, ctx := range ctxs {
		d := c.StepTime(n, 0, ctx+n, AttentionPairs(ctx, n)).Seconds()
		in.PrefillAt = append(in.PrefillAt, PrefillPoint{ContextTokens: ctx, ChunkMs: d * 1e3, ChunkTokPerSec: float64(n) / d,
			PromptMs: c.PrefillTime(ctx+n, 0).Seconds() * 1e3})
	}
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
