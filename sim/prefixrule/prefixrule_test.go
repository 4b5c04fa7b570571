package prefixrule

import (
	"math"
	"slices"
	"testing"
)

// TestPredictCachedSmall checks the rule on a case worked by hand: blocks of 4, KV of 24
// tokens, two sessions. A: prompt 9, output 3 leaves (9+3-1)/4 = 2 blocks. B: prompt 9,
// output 3 holds 12 tokens; A's 2 blocks (8 tokens) fit beside it: 2 blocks. A again
// (prompt 14 = 9+3+2): reads its 2 blocks (8 tokens), holds 17 tokens, and B's 2 blocks
// no longer fit beside it (17+8 > 24): B loses its tail block, keeping 1. A leaves
// (14+3-1)/4 = 4 blocks. B again (prompt 14): reads 1 block; holds 17, A's 4 blocks
// (16) do not fit: A loses 3 tail blocks (17+4 <= 24 once A keeps 1).
func TestPredictCachedSmall(t *testing.T) {
	calls := []AppendCall{{0, 9, 3}, {1, 9, 3}, {0, 14, 3}, {1, 14, 3}, {0, 19, 3}}
	got := PredictCached(calls, 4, 24)
	// The last: A kept 1 block; it reads it.
	want := []int{0, 0, 8, 4, 4}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("PredictCached = %v, want %v", got, want)
		}
	}
	if r := HitRate(calls, got); math.Abs(r-16.0/65) > 1e-12 {
		t.Errorf("HitRate %v, want 16/65", r)
	}
	if z := PredictCached(calls, 0, 24); len(z) != len(calls) || slices.Max(z) != 0 || BestCached(14, 11, 0) != 0 {
		t.Errorf("block size 0: %v", z)
	}
	// BestCached: whole blocks of the shared part, never the last prompt token's block.
	for _, tc := range []struct{ prompt, shared, want int }{
		{14, 11, 8}, {12, 11, 8}, {12, 12, 8}, {13, 12, 12}, {100, 3, 0}, {0, 5, 0}, {5, 0, 0},
	} {
		if got := BestCached(tc.prompt, tc.shared, 4); got != tc.want {
			t.Errorf("BestCached(%d, %d, 4) = %d, want %d", tc.prompt, tc.shared, got, tc.want)
		}
	}
}
