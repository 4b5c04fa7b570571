// Package prefixrule is the analytical rule for the simulated engine's prefix cache on
// an append-only session workload, the shape agent traffic has: which prompt tokens
// the cache serves each call (PredictCached), the most it can serve one call
// (BestCached), and the share of prompt tokens served (HitRate). The sim's tests hold
// its engine to this rule; a client can compute the hits it should see without
// running anything.
package prefixrule

import "slices"

// AppendCall is one call of an append-only session workload, the shape agent traffic
// has: Session names its session, Prompt and Output are its prompt and output tokens. A
// session's call after its first sends a prompt that begins with the previous call's
// prompt and whole output (then new tokens: a tool's output, a user's message); calls of
// different sessions share no prefix block.
type AppendCall struct {
	Session        int
	Prompt, Output int
}

// PredictCached is the analytical rule for the engine's prefix cache on an append-only
// workload whose calls run one at a time, in the order given (each ends before the next
// is sent), under reserve KV admission with blocks of blockTokens in a KV cache of
// kvTokens. It returns, per call, the prompt tokens the cache serves
// (usage.prompt_tokens_details.cached_tokens).
//
// The rule, in block counts: a finished call leaves its session's stream (its prompt,
// then its output less the last token) cached, floor((Prompt+Output-1)/block) blocks, a
// prefix of the session's next prompt. A call reads its session's cached blocks, up to
// floor((Prompt-1)/block) (the block holding the last prompt token is computed). While it
// runs it holds Prompt+Output tokens of KV; the blocks no request holds must fit in the
// rest, so its admission evicts blocks of the least recently used sessions first, each
// session's from its tail back (a request frees its blocks last first), which keeps a
// session's cached blocks a prefix of its stream. So:
//
//   - when every admission fits beside the others' cached contexts, each call after a
//     session's first reads floor((prev prompt + prev output - 1)/block) blocks: the hit
//     rate is those shared tokens over all prompt tokens;
//   - when they do not (round-robin sessions whose contexts overflow the cache), each
//     admission evicts the next sessions to come, and a session finds only what was left
//     of its head: nothing once the overflow exceeds a context.
//
// Concurrent calls hold their blocks while they run, which this rule does not model; the
// engine's own counters (vllm:prefix_cache_hits_total) then say what it did.
func PredictCached(calls []AppendCall, blockTokens, kvTokens int) []int {
	out := make([]int, len(calls))
	if blockTokens < 1 {
		return out // no blocks: nothing is cached
	}
	b := blockTokens
	cached := map[int]int{} // session -> blocks of its stream cached (a prefix)
	var lru []int           // sessions with cached blocks, least recently used first
	total := 0              // cached blocks in all
	for i, c := range calls {
		hit := min(cached[c.Session], max(c.Prompt-1, 0)/b) // BestCached, less what was evicted
		out[i] = hit * b
		// Blocks no request holds: every cached block but the hit ones. They must fit
		// beside the Prompt+Output tokens the call holds.
		over := c.Prompt + c.Output + (total-hit)*b - kvTokens
		for j := 0; over > 0 && j < len(lru); j++ {
			s := lru[j]
			keep := 0
			if s == c.Session {
				keep = hit // held by the call: not evictable
			}
			for cached[s] > keep && over > 0 {
				cached[s]--
				total--
				over -= b
			}
		}
		n := max(c.Prompt+c.Output-1, 0) / b
		total += n - cached[c.Session]
		cached[c.Session] = n
		lru = slices.DeleteFunc(lru, func(s int) bool { return s == c.Session || cached[s] == 0 })
		lru = append(lru, c.Session)
	}
	return out
}

// BestCached is the most of a prompt of prompt tokens that the prefix cache can serve
// when its first shared tokens are the KV an earlier call left (that call's prompt, then
// its output less the last token, whose KV is never computed: for an append, shared is
// the earlier prompt + output - 1; for a subagent that forks from a parent's context,
// the prefix it shares with it, at most that): whole blocks, never the block holding the
// prompt's last token. It is what PredictCached gives every call when nothing is evicted,
// and the replay's best hit for a call of a trace, whatever the cache's size.
func BestCached(prompt, shared, blockTokens int) int {
	if prompt < 1 || shared < 1 || blockTokens < 1 {
		return 0
	}
	return min(shared, prompt-1) / blockTokens * blockTokens
}

// HitRate is the share of prompt tokens served from the cache: the sum of cached over
// the sum of the calls' prompts.
func HitRate(calls []AppendCall, cached []int) float64 {
	var p, h int64
	for i, c := range calls {
		p += int64(c.Prompt)
		h += int64(cached[i])
	}
	if p == 0 {
		return 0
	}
	return float64(h) / float64(p)
}
