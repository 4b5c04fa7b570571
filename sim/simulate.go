package sim

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
)

// SimRequest is one generation for Simulate (Arrival in model time; in a closed loop, only
// the first concurrency count). Those of one non-zero PrefixID share SharedPrefix prompt tokens.
type SimRequest struct {
	Arrival                      time.Duration
	Prompt, Output, SharedPrefix int
	PrefixID                     uint64
}

// SimResult is the step model's decision for a SimRequest: each token's model time (its
// step's end), the prompt tokens read from the prefix cache, whether it ran at all.
type SimResult struct {
	Arrival, First, End time.Duration
	Tokens              []time.Duration
	Cached              int
	Served              bool
}

// Simulate runs reqs through the engine's scheduler (the core the server drives in real
// time) in model time, queuing each at the first step start at or after its arrival plus
// RequestOverhead as the engine does after a receipt: the same arrivals give the engine's
// times exactly.
// concurrency > 0 makes a closed loop: each later request arrives 1 ns after one ends (no
// client answers in no time: the engine's next step, begun at that end, is under way, and
// over HTTP the request waits it out as it does here).
func Simulate(cfg Config, reqs []SimRequest, concurrency int) ([]SimResult, error) {
	if err := cfg.Validate(); err != nil || cfg.Fixed || concurrency < 0 {
		return nil, errors.Join(err, errors.New("sim: Simulate needs a valid engine profile (not fixed) and concurrency >= 0"))
	}
	c, out, seqs, index := newCore(&cfg), make([]SimResult, len(reqs)), make([]*seq, len(reqs)), map[*seq]int{}
	type arrival struct{ at, i time.Duration }
	var due []arrival
	for i, r := range reqs {
		if r.Prompt < 1 || r.Output < 1 || r.SharedPrefix < 0 || r.SharedPrefix > r.Prompt || r.Arrival < 0 {
			return nil, fmt.Errorf("sim: Simulate request %d: need prompt, output >= 1, 0 <= shared_prefix <= prompt, arrival >= 0: %+v", i, r)
		}
		seqs[i] = newSeq(r.Prompt, r.Output)
		if c.pc != nil {
			seqs[i].hashes, seqs[i].promptBlocks = simHashes(r, uint64(i), cfg.PrefixBlockTokens), r.Prompt/cfg.PrefixBlockTokens
		}
		index[seqs[i]] = i
		if concurrency == 0 || i < concurrency {
			due = append(due, arrival{r.Arrival + cfg.RequestOverhead, time.Duration(i)})
		}
	}
	next := len(due) // closed loop: the request the next freed worker sends
	slices.SortStableFunc(due, func(a, b arrival) int { return cmp.Compare(a.at, b.at) })
	for len(due) > 0 || !c.idle() {
		if len(due) > 0 && (c.idle() || len(c.running) == 0 && due[0].at > c.now) {
			c.now = max(c.now, due[0].at) // model time stands still while nothing runs
		}
		for ; len(due) > 0 && due[0].at <= c.now; due = due[1:] {
			out[due[0].i].Arrival = due[0].at - cfg.RequestOverhead
			c.enqueue(seqs[due[0].i], due[0].at-cfg.RequestOverhead)
		}
		if c.step() == 0 && len(due) == 0 {
			break // what waits can never be admitted
		}
		for _, s := range c.touched {
			i := index[s]
			out[i].Tokens, out[i].End = append(out[i].Tokens, c.now), c.now
			if s.generated == s.target && concurrency > 0 && next < len(reqs) {
				due, next = append(due, arrival{c.now + 1 + cfg.RequestOverhead, time.Duration(next)}), next+1 // in order: due stays sorted
			}
		}
	}
	for i, s := range seqs {
		out[i].Cached, out[i].Served, out[i].First = s.cached, s.generated == s.target, s.firstM
	}
	return out, nil
}

// simHashes hashes request i's prompt and output less its last token, as the server does:
// a shared prefix's tokens depend on PrefixID and position, every other token on i too.
func simHashes(r SimRequest, i uint64, size int) []uint64 {
	h := newBlockHasher(size)
	for pos := range uint64(r.Prompt + r.Output - 1) {
		id := (i+1)<<40 ^ 0x5eed<<24
		if r.PrefixID != 0 && pos < uint64(r.SharedPrefix) {
			id = r.PrefixID << 20
		}
		h.add(uint32(mix64(id ^ pos)))
	}
	return h.hashes
}
