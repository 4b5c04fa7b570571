package analysis

import (
	"github.com/llmreplay/llmreplay/analysis/conversation"
	"github.com/llmreplay/llmreplay/analysis/decode"
)

// The conversations section: package analysis/conversation computes it, this package
// renders it. The names below keep the report's API what it was before it moved there.

// ReshapedShare is the bound of the "reshaped by the server" flag (conversation.ReshapedShare).
const ReshapedShare = conversation.ReshapedShare

// Conversations is what a run with sessions, cached-token counts or a trace with prefix
// blocks adds to its report (conversation.Report).
type Conversations = conversation.Report

// The members of Conversations (package analysis/conversation documents them).
type (
	PrefixCache  = conversation.PrefixCache
	CacheBucket  = conversation.CacheBucket
	SessionWaits = conversation.SessionWaits
	TurnOverlap  = conversation.TurnOverlap
)

// conversations computes r.Conversations, with its warning; it runs after flags (it needs
// the lateness bound) and the prompt breakdown (its buckets).
func (r *Report) conversations(d *decode.Data) {
	buckets := make([][2]int64, len(r.ByPrompt))
	for k, b := range r.ByPrompt {
		buckets[k] = [2]int64{b.Lo, b.Hi}
	}
	c := conversation.Analyze(d, buckets, r.Flags.MaxLateness)
	if c == nil {
		return
	}
	if pc := c.PrefixCache; pc.AboveBest() {
		r.warnf("prefix-cache hit rate %s above the best the replay allows (%s): a server that cached these prompts before the run, or a bug",
			pct(100*pc.HitRate), pct(100*pc.BestRate))
	}
	r.Conversations = c
}
