package analysis

import (
	"fmt"
	"math"
)

// PromptOffBound is the prompt-off-target rule's bound: a run is flagged when the server's
// prompt tokens in all differ from the targets in all by more than this share of them. A
// BOS token, a chat template or another tokenizer stay under it for prompts of a few
// hundred tokens; truncation or a broken calibration are far over (docs/metrics.md).
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
