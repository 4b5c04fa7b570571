package trace

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// AgentSpec describes synthetic agent sessions (docs/trace-format.md, "trace synth").
// Sessions start by SynthSpec.Arrivals. A session's main agent makes Calls calls in a
// chain: the first prompt is First tokens (a system prompt and the task), every later
// one is its parent's context (prompt, then answer) plus Append new tokens (the tools'
// output), after a tool gap (ToolGapMS) or, every UserEvery calls, a user gap
// (UserGapMS). With probability Fork a main call forks: Branches subagents of
// BranchCalls calls each start from its context, run side by side, and a join call whose
// parents are the branch tails continues the main chain. Output lengths are
// SynthSpec.Output; a context that would pass SynthSpec.PromptMax ends its chain.
type AgentSpec struct {
	Sessions int64 `json:"sessions"`
	Calls    Dist  `json:"calls"`        // main-chain calls per session (a join counts)
	First    Dist  `json:"first_prompt"` // tokens
	Append   Dist  `json:"append"`       // tokens appended per call
	// ToolGapMS and UserGapMS are in milliseconds.
	ToolGapMS Dist  `json:"tool_gap_ms"`
	UserEvery int   `json:"user_every,omitempty"`
	UserGapMS *Dist `json:"user_gap_ms,omitempty"`
	// Fork is the probability that a main call (not the session's last) forks.
	Fork        float64 `json:"fork,omitempty"`
	Branches    *Dist   `json:"branches,omitempty"`
	BranchCalls *Dist   `json:"branch_calls,omitempty"`
	// A call's recorded duration_ns is (prompt − shared)/PrefillPerS + output/DecodePerS
	// seconds, shared being the tokens of its prompt that are its first parent's context
	// (what production's prefix cache served); both 0: duration_ns is null and a call's
	// arrival is its last parent's arrival plus its gap.
	PrefillPerS float64 `json:"prefill_tokens_per_s"`
	DecodePerS  float64 `json:"decode_tokens_per_s"`
}

// validate checks a against the spec it is part of.
func (a *AgentSpec) validate(s *SynthSpec) error {
	switch {
	case a.Sessions < 1:
		return fmt.Errorf("synth: agent sessions %d, want >= 1", a.Sessions)
	case s.Count != 0:
		return errors.New("synth: agent sessions are bounded by their number (and --duration), not a count of requests")
	case s.Turns != nil:
		return errors.New("synth: agent sessions and --turns conversations are two kinds of trace: choose one")
	case a.UserEvery < 0:
		return fmt.Errorf("synth: agent user gap every %d calls, want >= 0", a.UserEvery)
	case a.UserEvery > 0 && a.UserGapMS == nil:
		return errors.New("synth: agent user gaps need a user gap DIST")
	case !(a.Fork >= 0 && a.Fork <= 1):
		return fmt.Errorf("synth: agent fork probability %v, want 0..1", a.Fork)
	case a.Fork > 0 && (a.Branches == nil || a.BranchCalls == nil):
		return errors.New("synth: agent forks need branches and branch calls DISTs")
	case (a.PrefillPerS == 0) != (a.DecodePerS == 0) || a.PrefillPerS < 0 || a.DecodePerS < 0 ||
		math.IsInf(a.PrefillPerS, 0) || math.IsInf(a.DecodePerS, 0) || math.IsNaN(a.PrefillPerS) || math.IsNaN(a.DecodePerS):
		return fmt.Errorf("synth: agent prefill %v and decode %v tokens/s: want both > 0, or both 0 for no durations", a.PrefillPerS, a.DecodePerS)
	}
	for _, d := range []struct {
		name string
		d    *Dist
	}{{"calls", &a.Calls}, {"first prompt", &a.First}, {"append", &a.Append}, {"tool gap", &a.ToolGapMS},
		{"user gap", a.UserGapMS}, {"branches", a.Branches}, {"branch calls", a.BranchCalls}} {
		switch {
		case d.d == nil:
		case d.d.Kind == "":
			return fmt.Errorf("synth: agent %s: a DIST is required", d.name)
		case d.d.Kind == "empirical" && d.d != &a.First && d.d != &a.Append:
			return fmt.Errorf("synth: agent %s: empirical is for token lengths", d.name)
		}
	}
	return nil
}

// agentGen draws agent sessions; each figure has a PCG stream of its own, seeded by
// Arrivals.Seed, so changing one distribution leaves the others' draws as they were.
type agentGen struct {
	spec                            *SynthSpec
	a                               *AgentSpec
	calls, first, add, out          *sampler
	toolGap, userGap, branch, bcall *sampler
	fork                            *rand.Rand
	rows                            []Request // in generation order; ID = index
	end                             []int64   // per row: arrival + modelled duration, ns
}

func newAgentGen(spec *SynthSpec) *agentGen {
	a, seed := spec.Agent, spec.Arrivals.Seed
	s := func(d *Dist, stream uint64) *sampler {
		if d == nil {
			return nil
		}
		return newSampler(d, rand.New(rand.NewPCG(seed, stream)))
	}
	return &agentGen{spec: spec, a: a,
		out: s(&spec.Output, 3), calls: s(&a.Calls, 10), first: s(&a.First, 11), add: s(&a.Append, 12),
		toolGap: s(&a.ToolGapMS, 13), userGap: s(a.UserGapMS, 14), branch: s(a.Branches, 16), bcall: s(a.BranchCalls, 17),
		fork: rand.New(rand.NewPCG(seed, 15))}
}

// context returns row i's context: its prompt, then its answer.
func (g *agentGen) context(i int) int64 {
	return int64(g.rows[i].PromptTokens) + int64(g.rows[i].OutputTokens)
}

// emit appends a call of session sid with the given parents (indexes into rows), prompt
// length, gap and shared prefix (Unknown: all of the first parent's context), and
// returns its index. Its arrival is the last parent's modelled end plus the gap.
func (g *agentGen) emit(sid int64, start int64, parents []int, prompt int64, gap time.Duration, kind string, prefix int32) int {
	s := g.spec
	r := Request{ID: int64(len(g.rows)), SessionID: sid, HasSession: true, Model: s.Model,
		PromptTokens: int32(prompt), OutputTokens: int32(max(int64(s.OutputMin), min(int64(s.OutputMax), g.out.draw())))}
	if s.ToolTokens > 0 {
		// Every call sends the agent's tools, first; a parent's context holds them once.
		r.ToolTokens, r.HasToolTokens = s.ToolTokens, true
	}
	c := NewCall()
	at := start
	shared := int64(0)
	if len(parents) > 0 {
		at = 0
		for _, p := range parents {
			c.Parents = append(c.Parents, int64(p))
			at = max(at, g.end[p])
		}
		at += int64(gap)
		c.Gap, c.GapKind, c.PrefixTokens = gap, kind, prefix
		shared = g.context(parents[0])
		if prefix != Unknown {
			shared = int64(prefix)
		}
	}
	r.Arrival = time.Duration(at)
	end := at
	if g.a.DecodePerS > 0 {
		secs := float64(prompt-shared)/g.a.PrefillPerS + float64(r.OutputTokens)/g.a.DecodePerS
		c.Duration = time.Duration(math.Round(secs * 1e9))
		end += int64(c.Duration)
	}
	if !c.IsZero() {
		r.Call = c
	}
	g.rows = append(g.rows, r)
	g.end = append(g.end, end)
	return len(g.rows) - 1
}

// gap draws a gap in milliseconds from s, as a duration (negative draws are 0).
func gapOf(s *sampler) time.Duration { return time.Duration(max(0, s.draw())) * time.Millisecond }

// appendDraw draws how many tokens a call appends (at least 1).
func (g *agentGen) appendDraw() int64 { return max(1, g.add.draw()) }

// session generates one session starting at start (ns).
func (g *agentGen) session(sid, start int64) {
	s, a := g.spec, g.a
	calls := max(1, g.calls.draw())
	tools := int64(s.ToolTokens)
	first := tools + max(int64(s.PromptMin), min(int64(s.PromptMax)-tools, g.first.draw()))
	prev := g.emit(sid, start, nil, first, 0, "", Unknown)
	for made := int64(1); made < calls; made++ {
		gap, kind := g.mainGap(made)
		if a.Fork > 0 && g.fork.Float64() < a.Fork {
			if tails := g.branches(sid, prev); len(tails) > 0 {
				// The join continues the forking call's context with what the branches
				// found; its first parent, branch 0's tail, shares that context.
				forkCtx := g.context(prev)
				p := forkCtx + g.appendDraw()
				if p > int64(s.PromptMax) {
					return
				}
				prev = g.emit(sid, 0, tails, p, gap, kind, int32(forkCtx))
				continue
			}
		}
		p := g.context(prev) + g.appendDraw()
		if p > int64(s.PromptMax) {
			return // the context window is full: the session ends
		}
		prev = g.emit(sid, 0, []int{prev}, p, gap, kind, Unknown)
	}
}

// mainGap draws the gap before the main chain's call after made calls: a user's turn
// after every UserEvery calls, else the tools'.
func (g *agentGen) mainGap(made int64) (time.Duration, string) {
	if g.a.UserEvery > 0 && made%int64(g.a.UserEvery) == 0 {
		return gapOf(g.userGap), GapUser
	}
	return gapOf(g.toolGap), GapTool
}

// branches forks subagents from call fork and returns their tails. A branch's first
// call is fork's context plus its task (an Append draw), with prefix_tokens = that
// context; a branch whose context would pass the prompt cap ends there.
func (g *agentGen) branches(sid int64, fork int) []int {
	forkCtx := g.context(fork)
	var tails []int
	for range max(1, g.branch.draw()) {
		cur, n := fork, max(1, g.bcall.draw())
		for m := range n {
			p := g.context(cur) + g.appendDraw()
			if p > int64(g.spec.PromptMax) {
				break
			}
			prefix := int32(Unknown)
			if m == 0 {
				prefix = int32(forkCtx)
			}
			cur = g.emit(sid, 0, []int{cur}, p, gapOf(g.toolGap), GapTool, prefix)
		}
		if cur != fork {
			tails = append(tails, cur)
		}
	}
	return tails
}

// synthAgent generates spec's agent sessions into w, rows sorted by arrival (ties in the
// order generated, so a parent precedes its children), request_id the row index.
func synthAgent(ctx context.Context, spec SynthSpec, w *Writer) (int64, error) {
	g := newAgentGen(&spec)
	arr := newArrivalGen(spec.Arrivals)
	for sid := range spec.Agent.Sessions {
		t := arr.next()
		if spec.Duration > 0 && t >= int64(spec.Duration) {
			break
		}
		if sid%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		g.session(sid, t)
	}
	order := make([]int, len(g.rows))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(g.rows[x].Arrival, g.rows[y].Arrival) })
	row := make([]int64, len(order)) // generation index → row
	for i, x := range order {
		row[x] = int64(i)
	}
	for i, x := range order {
		r := g.rows[x]
		r.ID = int64(i)
		if r.Call != nil {
			for j, p := range r.Call.Parents {
				r.Call.Parents[j] = row[p]
			}
		}
		if err := w.Write(r); err != nil {
			return int64(i), err
		}
	}
	return int64(len(order)), nil
}
