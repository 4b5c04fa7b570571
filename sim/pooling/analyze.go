package pooling

import "time"

// Info is /sim/info's account of the pooling engine, in model time, for inputs of
// RefInputTokens.
type Info struct {
	EmbeddingDim     int `json:"embedding_dim"`
	MaxBatchedTokens int `json:"max_batched_tokens"`
	MaxBatch         int `json:"max_batch"`
	RefInputTokens   int `json:"ref_input_tokens"`
	// SingleInputMs is the latency of one input alone on an idle engine: the steps that
	// prefill it (PrefillTime).
	SingleInputMs float64 `json:"single_input_ms"`
	// FullStepInputs inputs fill a step (min(MaxBatchedTokens / RefInputTokens,
	// MaxBatch), whole inputs); FullStepMs is that step's time. Under a backlog every
	// step is such a step, so MaxTokPerSec = FullStepInputs * RefInputTokens /
	// FullStepMs and MaxInputsPerSec = FullStepInputs / FullStepMs are the saturated
	// engine's rates: the knee a sweep finds. An input that does not fit the budget
	// whole makes FullStepInputs 0 and these the rates of its full-budget chunks.
	FullStepInputs  int     `json:"full_step_inputs"`
	FullStepMs      float64 `json:"full_step_ms"`
	MaxTokPerSec    float64 `json:"max_tok_per_sec"`
	MaxInputsPerSec float64 `json:"max_inputs_per_sec"`
	Rule            string  `json:"rule"`
}

const rule = "each input (an embeddings input, or a rerank query with one document) is one engine request of prefill only, done at the end of the step that prefills its last token; FIFO admission while the budget remains and fewer than max_batch run, chunked prefill; step = the step formula with decoding_seqs = 0"

// PrefillTime is the latency of one input of tokens tokens alone on an idle engine:
// chunks of MaxBatchedTokens, each a step, the last one finishing it.
func PrefillTime(step StepFunc, lim Limits, tokens int) time.Duration {
	var d time.Duration
	for done := 0; done < tokens; {
		n := min(tokens-done, lim.MaxBatchedTokens)
		d += step(n, done+n, Pairs(done, n))
		done += n
	}
	return d
}

// Analyze computes the engine's figures for inputs of ref tokens (at least 1).
func Analyze(step StepFunc, lim Limits, embeddingDim, ref int) *Info {
	ref = max(ref, 1)
	in := &Info{EmbeddingDim: embeddingDim, MaxBatchedTokens: lim.MaxBatchedTokens, MaxBatch: lim.MaxBatch,
		RefInputTokens: ref, Rule: rule}
	in.SingleInputMs = PrefillTime(step, lim, ref).Seconds() * 1e3
	k := min(lim.MaxBatchedTokens/ref, lim.MaxBatch)
	in.FullStepInputs = k
	tokens, d := k*ref, step(k*ref, k*ref, int64(k)*Pairs(0, ref))
	if k == 0 {
		tokens = lim.MaxBatchedTokens
		d = step(tokens, tokens, Pairs(0, tokens))
	}
	in.FullStepMs = d.Seconds() * 1e3
	in.MaxTokPerSec = float64(tokens) / d.Seconds()
	in.MaxInputsPerSec = float64(k) / d.Seconds()
	return in
}
