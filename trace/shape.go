package trace

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/stats"
	mstats "github.com/montanaflynn/stats"
)

// Spread summarises a figure over N values: mean (montanaflynn/stats), percentiles by
// stats.Type7 (linear interpolation between order statistics, as Lengths) and max. All
// zero when N is 0.
type Spread struct {
	N    int64   `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// spread sorts x in place and summarises it.
func spread(x []float64) Spread {
	if len(x) == 0 {
		return Spread{}
	}
	slices.Sort(x)
	s := Spread{N: int64(len(x)), Max: x[len(x)-1]}
	s.Mean, _ = mstats.Mean(x)
	s.P50, s.P90, s.P99 = stats.Type7(x, 0.5), stats.Type7(x, 0.9), stats.Type7(x, 0.99)
	return s
}

// Context-length thresholds of AgentShape: the context windows models are sold with.
const (
	context32k  = 32 * 1024
	context64k  = 64 * 1024
	context128k = 128 * 1024
)

// AgentShape is what `trace info` says of an agent trace's shape (docs/trace-format.md,
// "trace info"). A call is a row with a session_id; rows without one are in Info.Count
// only. Shares are of sums over calls, so a long call weighs more than a short one.
type AgentShape struct {
	Calls    int64 `json:"calls"`
	Sessions int64 `json:"sessions"`
	// CallsPerSession is over sessions; Depth is each session's longest chain of calls
	// (a call without parents has depth 1, any other 1 + its deepest parent's).
	CallsPerSession Spread `json:"calls_per_session"`
	Depth           Spread `json:"depth"`
	// Forks are calls that more than one call names as a parent; ChildrenPerFork is over
	// them. Joins are calls with more than one parent.
	Forks           int64  `json:"forks"`
	ChildrenPerFork Spread `json:"children_per_fork"`
	Joins           int64  `json:"joins"`
	// Gaps are the recorded gap_ns by gap_kind: tool, user, then "unknown" (a gap without
	// a kind) when there is one; in nanoseconds.
	Gaps []GapSpread `json:"gaps"`
	// Context is the calls' prompt_tokens; the shares are the fraction of calls whose
	// prompt is over 32,768, 65,536 and 131,072 tokens.
	Context        Spread  `json:"context_tokens"`
	ContextOver32  float64 `json:"context_share_over_32k"`
	ContextOver64  float64 `json:"context_share_over_64k"`
	ContextOver128 float64 `json:"context_share_over_128k"`
	// CacheShare = Σ cached_tokens / Σ prompt_tokens over the CachedCalls calls that
	// record cached_tokens: production's cache hit (0 when none record it).
	CachedCalls int64   `json:"cached_calls"`
	CacheShare  float64 `json:"cache_share"`
	// ReasoningShare = Σ reasoning_tokens / Σ output_tokens over the ReasoningCalls calls
	// that record reasoning_tokens (0 when none do).
	ReasoningCalls int64   `json:"reasoning_calls"`
	ReasoningShare float64 `json:"reasoning_share"`
	// Makespan is, over the sessions whose every call records duration_ns,
	// max(arrival + duration) − min(arrival) in nanoseconds: the recorded task time.
	Makespan Spread `json:"makespan_ns"`
	// SharedShare = Σ shared / Σ prompt_tokens over calls, where a call's shared tokens
	// are its prefix_tokens, or, when null, its first parent's prompt_tokens +
	// output_tokens (at most its own prompt_tokens), and 0 without parents: the share of
	// prompt tokens a prefix cache that kept every context could serve, the best cache
	// hit a replay allows.
	SharedShare float64 `json:"shared_prefix_share"`
}

// GapSpread is the recorded gaps of one kind.
type GapSpread struct {
	Kind string `json:"kind"`
	Spread
}

// callShape is what the shape keeps of each call: 16 bytes, plus the map's own.
type callShape struct {
	ctx      int64 // prompt_tokens + output_tokens: what a child's prompt may share
	depth    int32
	children int32
}

type sessionShape struct {
	calls       int64
	depth       int32
	allDuration bool
	first, end  int64
}

// shapeAcc accumulates an AgentShape row by row. Rows must have passed DAGCheck, so
// every parent is already in calls.
type shapeAcc struct {
	agent    bool // a row had agent columns: report the shape
	calls    map[int64]callShape
	sessions map[int64]*sessionShape
	prompts  []float64
	gaps     map[string][]float64

	over32, over64, over128         int64
	promptSum, sharedSum            int64
	cachedSum, cachedPrompt         int64
	reasoningSum, reasoningOutput   int64
	joins, cachedCalls, reasonCalls int64
}

func newShapeAcc() *shapeAcc {
	return &shapeAcc{calls: map[int64]callShape{}, sessions: map[int64]*sessionShape{}, gaps: map[string][]float64{}}
}

func (a *shapeAcc) add(r *Request) {
	c := r.Call
	if c != nil {
		a.agent = true
	}
	if !r.HasSession {
		return
	}
	s := a.sessions[r.SessionID]
	if s == nil {
		s = &sessionShape{allDuration: true, first: int64(r.Arrival)}
		a.sessions[r.SessionID] = s
	}
	s.calls++
	me := callShape{ctx: int64(r.PromptTokens) + int64(r.OutputTokens), depth: 1}
	prompt := int64(r.PromptTokens)
	a.promptSum += prompt
	a.prompts = append(a.prompts, float64(prompt))
	a.over32 += b2i(prompt > context32k)
	a.over64 += b2i(prompt > context64k)
	a.over128 += b2i(prompt > context128k)
	if c == nil || c.Duration == Unknown {
		s.allDuration = false
	} else {
		s.end = max(s.end, int64(r.Arrival+c.Duration))
	}
	if c != nil {
		for i, p := range c.Parents {
			ps := a.calls[p]
			ps.children++
			a.calls[p] = ps
			me.depth = max(me.depth, ps.depth+1)
			if i == 0 {
				shared := int64(c.PrefixTokens)
				if c.PrefixTokens == Unknown {
					shared = min(ps.ctx, prompt)
				}
				a.sharedSum += shared
			}
		}
		a.joins += b2i(len(c.Parents) > 1)
		if c.Gap != Unknown {
			kind := c.GapKind
			if kind == "" {
				kind = "unknown"
			}
			a.gaps[kind] = append(a.gaps[kind], float64(c.Gap))
		}
		if c.CachedTokens != Unknown {
			a.cachedCalls++
			a.cachedSum += int64(c.CachedTokens)
			a.cachedPrompt += prompt
		}
		if c.ReasoningTokens != Unknown {
			a.reasonCalls++
			a.reasoningSum += int64(c.ReasoningTokens)
			a.reasoningOutput += int64(r.OutputTokens)
		}
	}
	s.depth = max(s.depth, me.depth)
	a.calls[r.ID] = me
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func share(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return float64(part) / float64(whole)
}

// shape returns the AgentShape, or nil when no row had agent columns.
func (a *shapeAcc) shape() *AgentShape {
	if !a.agent {
		return nil
	}
	sh := &AgentShape{Calls: int64(len(a.prompts)), Sessions: int64(len(a.sessions)), Joins: a.joins,
		CachedCalls: a.cachedCalls, ReasoningCalls: a.reasonCalls}
	var perSession, depth, makespan, children []float64
	for _, s := range a.sessions {
		perSession = append(perSession, float64(s.calls))
		depth = append(depth, float64(s.depth))
		if s.allDuration {
			makespan = append(makespan, float64(s.end-s.first))
		}
	}
	for _, c := range a.calls {
		if c.children > 1 {
			children = append(children, float64(c.children))
		}
	}
	sh.CallsPerSession, sh.Depth, sh.Makespan = spread(perSession), spread(depth), spread(makespan)
	sh.Forks, sh.ChildrenPerFork = int64(len(children)), spread(children)
	sh.Context = spread(a.prompts)
	n := sh.Calls
	sh.ContextOver32, sh.ContextOver64, sh.ContextOver128 = share(a.over32, n), share(a.over64, n), share(a.over128, n)
	sh.CacheShare = share(a.cachedSum, a.cachedPrompt)
	sh.ReasoningShare = share(a.reasoningSum, a.reasoningOutput)
	sh.SharedShare = share(a.sharedSum, a.promptSum)
	for _, k := range []string{GapTool, GapUser, "unknown"} {
		g := a.gaps[k]
		if len(g) == 0 && k == "unknown" {
			continue
		}
		sh.Gaps = append(sh.Gaps, GapSpread{Kind: k, Spread: spread(g)})
	}
	return sh
}

// writeText renders the shape for people, after the trace's own lines.
func (sh *AgentShape) writeText(b *strings.Builder) {
	fmt.Fprintf(b, "\nagent      %d calls in %d sessions; %d forks (calls with more than one child), %d joins (calls with more than one parent)\n",
		sh.Calls, sh.Sessions, sh.Forks, sh.Joins)
	fmt.Fprintf(b, "%-20s %8s %10s %10s %10s %10s %10s\n", "agent shape", "n", "mean", "p50", "p90", "p99", "max")
	row := func(name string, s Spread, scale float64) {
		fmt.Fprintf(b, "%-20s %8d %10.1f %10.1f %10.1f %10.1f %10.1f\n", name, s.N, s.Mean/scale, s.P50/scale, s.P90/scale, s.P99/scale, s.Max/scale)
	}
	row("calls per session", sh.CallsPerSession, 1)
	row("depth (calls)", sh.Depth, 1)
	row("children per fork", sh.ChildrenPerFork, 1)
	row("context (tokens)", sh.Context, 1)
	for _, g := range sh.Gaps {
		row("gap "+g.Kind+" (s)", g.Spread, float64(time.Second))
	}
	if sh.Makespan.N > 0 {
		row("makespan (s)", sh.Makespan, float64(time.Second))
	}
	fmt.Fprintf(b, "context    %.1f %% of calls over 32k tokens, %.1f %% over 64k, %.1f %% over 128k\n",
		100*sh.ContextOver32, 100*sh.ContextOver64, 100*sh.ContextOver128)
	if sh.CachedCalls > 0 {
		fmt.Fprintf(b, "cache      recorded hit %.1f %% of prompt tokens (%d calls record cached_tokens)\n", 100*sh.CacheShare, sh.CachedCalls)
	}
	if sh.ReasoningCalls > 0 {
		fmt.Fprintf(b, "reasoning  %.1f %% of output tokens (%d calls record reasoning_tokens)\n", 100*sh.ReasoningShare, sh.ReasoningCalls)
	}
	fmt.Fprintf(b, "shared     %.1f %% of prompt tokens are the parent's context: the best cache hit a replay allows\n", 100*sh.SharedShare)
}
