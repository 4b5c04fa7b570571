package replay

import (
	"github.com/llmreplay/llmreplay/trace"
)

// ReusableShare is the share of the recorded rows' prompt tokens that an infinite prefix
// cache could serve, from the trace's prefix blocks of blockTokens tokens: the first
// warmup rows are sent (they fill the cache) but not counted, then at most limit rows
// (0: all) are. A row's reusable tokens are min(s·blockTokens, prompt_tokens), s being how
// many of its leading blocks an earlier row had (a prefix cache reuses a block only after
// the blocks before it). It is `trace info`'s reusable_block_share weighted by prompt
// tokens, and equals it when every prompt is exactly its blocks and block ids are a hash
// chain (Mooncake's hash_ids, `trace synth --turns`). ok is false when the counted rows
// have no prompt tokens. Memory: 8 bytes per distinct block id. This is the rule
// (results.ReusableBlocks) of the prompts that carry the trace's blocks: independent
// sessions, and sequential ones with --history synthetic.
func ReusableShare(src trace.Source, blockTokens int, warmup, limit int64) (share float64, ok bool, err error) {
	return reusableShare(src, blockTokens, false, warmup, limit)
}

// HistoryReusableShare is ReusableShare for sequential sessions with --history actual
// (results.ReusableHistory), whose later turns send back their session's history and
// build their new text without the trace's blocks (buildTurn). A later turn's prompt, as
// the replay plans it, is its history h (what its predecessor sent plus the predecessor's
// trace output_tokens: the answer is not known before the run, and max_tokens caps it
// there) followed by max(prompt_tokens − h, 1) new tokens, and its reusable tokens are
// min(h, sent − 1) = h; a first turn, or a row without a session, sends its trace prompt
// and reuses the prefix blocks an earlier such row had (ReusableShare's rule; a later
// turn's blocks are never sent, so never cached). Shares are over the tokens as planned to
// be sent. An engine does no better: an answer shorter than its target, a failed turn
// (whose history then holds no answer) or a tokenizer that merges tokens across the seam
// only shorten the history. Memory: ReusableShare's, plus 16 bytes per session.
func HistoryReusableShare(src trace.Source, blockTokens int, warmup, limit int64) (share float64, ok bool, err error) {
	return reusableShare(src, blockTokens, true, warmup, limit)
}

func reusableShare(src trace.Source, blockTokens int, history bool, warmup, limit int64) (share float64, ok bool, err error) {
	seen := map[int64]struct{}{}
	var hist map[int64]int64 // history: a session's planned history after its last turn read
	if history {
		hist = map[int64]int64{}
	}
	var n, reusable, total int64
	for src.Next() {
		r := src.Request()
		prompt, reuse := int64(r.PromptTokens), int64(-1)
		if history && r.HasSession {
			if h, later := hist[r.SessionID]; later {
				prompt = max(prompt, h+1)
				reuse = min(h, prompt-1)
			}
			hist[r.SessionID] = prompt + int64(r.OutputTokens)
		}
		if reuse < 0 {
			s := 0
			for s < len(r.PrefixBlocks) {
				if _, hit := seen[r.PrefixBlocks[s]]; !hit {
					break
				}
				s++
			}
			for _, b := range r.PrefixBlocks[s:] {
				seen[b] = struct{}{}
			}
			reuse = min(int64(s)*int64(blockTokens), prompt)
		}
		n++
		if n <= warmup {
			continue
		}
		reusable += reuse
		total += prompt
		if limit > 0 && n-warmup >= limit {
			break
		}
	}
	if err := src.Err(); err != nil {
		return 0, false, err
	}
	if total == 0 {
		return 0, false, nil
	}
	return float64(reusable) / float64(total), true, nil
}
