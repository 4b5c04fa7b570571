package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// SimRequest is one generation request for Simulate, in model time.
type SimRequest struct {
	// Arrival is when the request reaches the engine (open loop). In a closed loop it is
	// when its worker starts, for the first Concurrency requests only (a ramp-up); the
	// later ones arrive when a request ends.
	Arrival time.Duration
	Prompt  int // prompt tokens (>= 1)
	Output  int // tokens to generate (>= 1)
	// PrefixID and SharedPrefix describe prompt sharing for the prefix cache: requests
	// with the same non-zero PrefixID have the same first SharedPrefix prompt tokens; the
	// rest of every prompt is its own. PrefixID 0: the whole prompt is the request's own.
	PrefixID     uint64
	SharedPrefix int
}

// SimResult is what the engine's step model decides for one SimRequest (same index).
// Times are model time from the simulation's start.
type SimResult struct {
	Arrival time.Duration // when it reached the engine
	First   time.Duration // end of the step that produced its first token
	End     time.Duration // end of the step that produced its last token
	// Tokens is the time of every token, in order (len = Output when Served).
	Tokens []time.Duration
	Cached int  // prompt tokens it read from the prefix cache at its (last) admission
	Served bool // false: the engine could never admit it (larger than the KV cache)
}

// SimOptions choose the loop Simulate drives.
type SimOptions struct {
	// Concurrency > 0 makes a closed loop: Concurrency workers each send a request,
	// then the next one in order as soon as theirs ends (the replayer's --concurrency:
	// no think time, the next request arrives at the end of the previous one).
	Concurrency int
}

// Simulate runs reqs through the engine's scheduler (the same core the HTTP server drives
// in real time) in pure model time: no clock, no HTTP. Each request is queued at the
// first step start at or after its arrival, as the real-time engine queues a request at
// the step start after its receipt, and each token's time is the end of the step that
// produced it. With the same arrivals and the same order it gives exactly the model times
// the real-time engine gives. The fixed profile has no scheduler and is refused.
func Simulate(cfg Config, reqs []SimRequest, o SimOptions) ([]SimResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Fixed {
		return nil, errors.New("sim: Simulate: the fixed profile has no scheduler to simulate")
	}
	if o.Concurrency < 0 {
		return nil, fmt.Errorf("sim: Simulate: concurrency %d < 0", o.Concurrency)
	}
	for i, r := range reqs {
		if r.Prompt < 1 || r.Output < 1 || r.SharedPrefix < 0 || r.SharedPrefix > r.Prompt || r.Arrival < 0 {
			return nil, fmt.Errorf("sim: Simulate: request %d: need prompt >= 1 (%d), output >= 1 (%d), 0 <= shared_prefix <= prompt (%d), arrival >= 0 (%v)",
				i, r.Prompt, r.Output, r.SharedPrefix, r.Arrival)
		}
	}
	c := newCore(&cfg)
	seqs := make([]*seq, len(reqs))
	out := make([]SimResult, len(reqs))
	index := make(map[*seq]int, len(reqs))
	for i, r := range reqs {
		s := newSeq(r.Prompt, r.Output)
		if c.pc != nil {
			s.hashes, s.promptBlocks = simHashes(r, uint64(i), cfg.PrefixBlockTokens), r.Prompt/cfg.PrefixBlockTokens
		}
		seqs[i], index[s] = s, i
		out[i].Tokens = make([]time.Duration, 0, r.Output)
	}
	// due is the queue of requests yet to arrive, by arrival (stable: ties keep the
	// order of reqs, as the engine queues simultaneous arrivals in order of receipt).
	type arrival struct {
		at time.Duration
		i  int
	}
	var due []arrival
	next := len(reqs) // closed loop: the next request a freed worker sends
	if o.Concurrency > 0 {
		next = min(o.Concurrency, len(reqs))
		for i := range next {
			due = append(due, arrival{reqs[i].Arrival, i})
		}
	} else {
		for i, r := range reqs {
			due = append(due, arrival{r.Arrival, i})
		}
	}
	slices.SortStableFunc(due, func(a, b arrival) int { return cmpDur(a.at, b.at) })
	for len(due) > 0 || !c.idle() {
		if c.idle() {
			c.now = max(c.now, due[0].at) // model time stands still while idle
		}
		for len(due) > 0 && due[0].at <= c.now {
			a := due[0]
			due = due[1:]
			out[a.i].Arrival = a.at
			c.enqueue(seqs[a.i], a.at)
		}
		if c.step() == 0 {
			// Nothing ran: what waits can never be admitted, so wait for an arrival that
			// might change nothing either; with none, the rest is unserved.
			if len(due) == 0 {
				break
			}
			if len(c.running) == 0 {
				c.now = max(c.now, due[0].at)
			}
			continue
		}
		for _, s := range c.touched {
			i := index[s]
			out[i].Tokens = append(out[i].Tokens, c.now)
			if s.generated == s.target && next < len(reqs) && o.Concurrency > 0 {
				// Its worker sends the next request now; appended in order, due stays sorted.
				due = append(due, arrival{c.now, next})
				next++
			}
		}
	}
	for i, s := range seqs {
		r := &out[i]
		r.Served = s.generated == s.target && len(r.Tokens) == s.target
		r.Cached = s.cached
		if len(r.Tokens) > 0 {
			r.First, r.End = r.Tokens[0], r.Tokens[len(r.Tokens)-1]
		}
	}
	return out, nil
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// simHashes is the chain hashes of the full blocks of request i's token stream (its
// prompt, then its output less the last token, as the server hashes it): the first
// SharedPrefix prompt tokens are a function of PrefixID and position, every other token
// of i and position, so requests share exactly the blocks wholly inside their common
// prefix.
func simHashes(r SimRequest, i uint64, size int) []uint64 {
	h := newBlockHasher(size)
	n := r.Prompt + r.Output - 1
	h.hashes = make([]uint64, 0, n/size)
	for pos := range n {
		if r.PrefixID != 0 && pos < r.SharedPrefix {
			h.add(uint32(mix64(r.PrefixID<<20 ^ uint64(pos))))
		} else {
			h.add(uint32(mix64((i+1)<<40 ^ 0x5eed<<24 ^ uint64(pos))))
		}
	}
	return h.hashes
}
