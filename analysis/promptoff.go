package analysis

import (
	"fmt"
	"math"
)

// The prompt-off-target rule. The replayer builds each prompt to the trace's length in its
// own tokenizer; the server counts it again (usage.prompt_tokens, prompt_tokens_server).
// The two differ by a little for good reasons: a BOS token (1 a request), a chat template
// (about 5 to 15 tokens a request), a tokenizer that splits the builder's words a little
// more (0.4-0.6% for Mistral's and Llama 2's, docs/prompts.md); --calibrate takes all of
// it away to within about 0.5%. They differ by much more when the prompts served are not
// the trace's: a server that truncates prompts to a context shorter than the trace's
// (Ollama counted 691 tokens against a target of 18,038 and answered every request), a
// calibration that went wrong, a template far longer than assumed. Latencies and token
// rates then describe the prompts served, and the report must say so before any figure.
//
// The run is flagged when the server's prompt tokens in all differ from the targets in
// all (over the requests with a server count) by more than PromptOffBound of the
// targets. 5% is above what a BOS token, a template or another tokenizer adds to prompts
// of a few hundred tokens or more, and far below what truncation or a broken calibration
// does. Short prompts in chat without --calibrate may exceed it (a 15-token template on
// 200-token prompts is 7.5%): then the prompts served are indeed 7.5% longer than the
// trace's, and the flag's advice, --calibrate, is the remedy. Requests off by more than
// the bound each are counted too (Tokens.PromptOff): they show whether a few prompts or
// all of them are off.
const PromptOffBound = 0.05

// promptOff applies the rule to the token reconciliation: Flags.PromptOffTarget.
func (r *Report) promptOff() {
	t := r.Tokens
	r.Flags.PromptOffTarget = t.PromptWithServerCount > 0 &&
		math.Abs(float64(t.PromptServer-t.PromptTarget)) > PromptOffBound*float64(t.PromptTarget)
}

// promptOffEach reports whether a request's server count is off its target by more than
// the bound.
func promptOffEach(server, target int32) bool {
	return math.Abs(float64(server)-float64(target)) > PromptOffBound*float64(target)
}

// PromptDiffShare is (server − target) / target over the requests with a server prompt
// count: negative when the server counted fewer; NaN when there is none.
func (t Tokens) PromptDiffShare() float64 {
	if t.PromptWithServerCount == 0 || t.PromptTarget == 0 {
		return math.NaN()
	}
	return float64(t.PromptServer-t.PromptTarget) / float64(t.PromptTarget)
}

// promptOffAlert is the sentence at the top of a flagged run's text and HTML reports:
// what the flag means and what to do; "" when the run is not flagged.
func (r *Report) promptOffAlert() string {
	if !r.Flags.PromptOffTarget {
		return ""
	}
	t := r.Tokens
	what := "run with --calibrate (a chat template or another tokenizer counts more)"
	if t.PromptServer < t.PromptTarget {
		what = "check the model's context length (a server that truncates prompts silently counts fewer) and run with --calibrate"
	}
	return fmt.Sprintf("PROMPT TOKENS OFF TARGET: the server counted %d prompt tokens against a target of %d (%s, bound ±%s); %d of %d requests off by more than %s each. TTFT and the token rates describe the prompts the server processed, not the trace's: %s.",
		t.PromptServer, t.PromptTarget, signedPct(t.PromptDiffShare()), pct(100*PromptOffBound), t.PromptOff, t.PromptWithServerCount, pct(100*PromptOffBound), what)
}

// promptOffLine is the flag's line in the text report's Flags section (after its label).
func (r *Report) promptOffLine() string {
	t := r.Tokens
	if t.PromptWithServerCount == 0 {
		return "not tested (no server prompt count)"
	}
	return fmt.Sprintf("%s (server %d vs target %d prompt tokens, %s, bound ±%s; %d of %d requests off by more than %s each)",
		yesno(r.Flags.PromptOffTarget), t.PromptServer, t.PromptTarget, signedPct(t.PromptDiffShare()), pct(100*PromptOffBound),
		t.PromptOff, t.PromptWithServerCount, pct(100*PromptOffBound))
}

// signedPct prints a share as a signed percentage.
func signedPct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%+.1f%%", 100*v)
}
