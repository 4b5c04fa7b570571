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
// have no prompt tokens. Memory: 8 bytes per distinct block id.
func ReusableShare(src trace.Source, blockTokens int, warmup, limit int64) (share float64, ok bool, err error) {
	seen := map[int64]struct{}{}
	var n, reusable, total int64
	for src.Next() {
		r := src.Request()
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
		n++
		if n <= warmup {
			continue
		}
		reusable += min(int64(s)*int64(blockTokens), int64(r.PromptTokens))
		total += int64(r.PromptTokens)
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
