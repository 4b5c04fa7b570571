// Package twintest draws the engines the twin's proofs fit: package twin's in model time
// and cmd/llmreplay's over HTTP draw from the same ranges, so that the two proofs are of
// the same claim and their figures (docs/sim.md) compare.
package twintest

import (
	"math/rand/v2"
	"time"

	"github.com/llmreplay/llmreplay/sim"
)

// Engine draws the engine a fit is not told: every step-model term, the batch cap, the
// prefix block size and the request overhead, from rng, in ranges around the tiny profile's (its other
// parameters are tiny's).
func Engine(rng *rand.Rand) sim.Config {
	c, err := sim.Profile("tiny")
	if err != nil {
		panic(err) // a built-in that does not load is a broken build
	}
	u := func(lo, hi float64) float64 { return lo + rng.Float64()*(hi-lo) }
	c.StepBase = time.Duration(u(0.5e6, 2e6))
	c.DecodePerSeq = time.Duration(u(20e3, 100e3))
	c.ContextPerToken = time.Duration(u(100, 400))
	c.PrefillPerToken = time.Duration(u(5e3, 20e3))
	c.AttentionPerPairNs = u(0.5, 2)
	c.MaxBatch = 8 + rng.IntN(17)
	c.PrefixBlockTokens = []int{16, 32}[rng.IntN(2)]
	c.RequestOverhead = time.Duration(u(1e6, 5e6))
	return c
}
