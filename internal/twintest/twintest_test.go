package twintest

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/sim"
)

// TestEngine: every engine drawn is one the simulator serves, each drawn term lies in its
// range, the rest is tiny's, and the seed decides the draw.
func TestEngine(t *testing.T) {
	tiny, err := sim.Profile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	in := func(v, lo, hi float64) bool { return v >= lo && v <= hi }
	seen := map[time.Duration]bool{}
	for seed := range uint64(200) {
		c := Engine(rand.New(rand.NewPCG(seed, 34)))
		if err := c.Validate(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !in(float64(c.StepBase), 0.5e6, 2e6) || !in(float64(c.DecodePerSeq), 20e3, 100e3) || !in(float64(c.ContextPerToken), 100, 400) ||
			!in(float64(c.PrefillPerToken), 5e3, 20e3) || !in(c.AttentionPerPairNs, 0.5, 2) || !in(float64(c.MaxBatch), 8, 24) ||
			c.PrefixBlockTokens != 16 && c.PrefixBlockTokens != 32 || !in(float64(c.RequestOverhead), 1e6, 5e6) {
			t.Errorf("seed %d: a term out of its range: %+v", seed, c)
		}
		if c.KVCacheTokens != tiny.KVCacheTokens || c.MaxBatchedTokens != tiny.MaxBatchedTokens || !c.PrefixCache {
			t.Errorf("seed %d: not tiny's otherwise: kv %d, budget %d, prefix cache %v", seed, c.KVCacheTokens, c.MaxBatchedTokens, c.PrefixCache)
		}
		seen[c.StepBase] = true
		if again := Engine(rand.New(rand.NewPCG(seed, 34))); again != c {
			t.Fatalf("seed %d: two draws differ", seed)
		}
	}
	if len(seen) < 190 {
		t.Errorf("200 seeds drew %d step_base values: the draw does not follow the seed", len(seen))
	}
}
