package replay

import (
	"fmt"
	"time"

	"github.com/llmreplay/llmreplay/trace"
)

// Agent sessions (docs/replay.md, "Agents"): a call of an agent trace is due when every
// call it waits for (its parents) has ended, plus the recorded gap (the tools' run, or a
// human's turn); its prompt is its first parent's context (that parent's prompt, then its
// actual answer) continued by new text up to the recorded length. This file holds the plan
// a pass over the trace makes before anything is sent, and the contexts; exec_agents.go
// the run.

// SessionsDAG is --sessions dag: each call waits for its parents (the default when the
// trace has parents).
const SessionsDAG = "dag"

// The --gaps modes: how long a call waits after its last parent's end.
const (
	GapsRecorded = "recorded" // as long as the trace's gap: a tool takes what it took
	GapsScaled   = "scaled"   // the trace's gap divided by the speedup
	GapsNone     = "none"     // no gap: the call is due when its parents end
)

// AgentPlan is what a pass over an agent trace knows before the run: every call the run
// will send (the rows --limit, --duration and --warmup admit, in the order the preparer
// reads them), its parents and children, and the best prefix-cache hit rate the replay
// allows. Memory: about 300 bytes per call, and its recorded prompt text if it has one.
type AgentPlan struct {
	calls    map[int64]*agentCall // by request_id
	sessions map[int64]*agentSession
	Calls    int     // calls planned, warm-up included
	Sessions int     // sessions planned
	Reusable float64 // the best prefix-cache hit rate of the recorded calls (ReusableDAG)
	HasReuse bool    // some recorded call has prompt tokens
	// Together is --agent-sessions: only the planned sessions are replayed, all started
	// at once, and their first calls are queued by due time, not read in file order.
	Together bool
}

// agentSession is a session of an agent replay: its calls share their contexts. mu guards
// its calls' run state (waiting, readyNS, ctx, built) and the session's end.
type agentSession struct {
	id       int64
	start    time.Duration // the arrival of its first row
	maxTok   int32         // the longest prompt of its calls, in tokens: a context's capacity
	calls    int32         // calls planned so far: the next one's turn
	failed   bool          // --on-turn-error end-session after a failed call
	failCall int32         // the failed call's turn, when failed
}

// agentCall is one planned call.
type agentCall struct {
	tr       trace.Request
	dueNS    int64 // its trace time / speedup, on the run clock
	warm     bool
	turn     int32 // its index in the session, in file order
	sess     *agentSession
	parents  []*agentCall
	children []*agentCall
	reused   int32 // the prompt tokens it shares with its first parent's context, as planned

	// run state, under the runner's sessions.mu
	waiting int   // parents not yet ended
	readyNS int64 // the latest end of its parents so far
	ctx     agentCtx
	tools   int32 // the prompt tokens its tools were counted, before its context's messages
	kids    int   // children not yet built: its context is let go at 0
}

// PlanAgents reads src to its end through the planner the run uses (so it admits exactly
// the rows the run's preparer will) and plans the agent calls: each row of a session is a
// call; one with parents waits for them, one without comes at its trace time. It checks the
// dependencies (trace.DAGCheck) first: a parent that is missing, later or in another
// session is an error naming the row, before anything is sent.
//
// With together > 0 (--agent-sessions) it plans the first together sessions of the trace
// only (in the order of their first rows), all started at once: a session's first call is
// due at 0, a later call without parents at its offset from it / speedup; the planner's
// limits do not apply.
func PlanAgents(src trace.Source, name string, p planner, together int) (*AgentPlan, error) {
	plan := &AgentPlan{calls: map[int64]*agentCall{}, sessions: map[int64]*agentSession{}, Together: together > 0}
	check := trace.NewDAGCheck(name)
	var reusable, total int64
	for src.Next() {
		r := src.Request()
		if err := check.Add(&r); err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
		var due time.Duration
		var warm bool
		if together == 0 {
			var ok bool
			if due, warm, ok = p.plan(r.Arrival); !ok {
				break
			}
		}
		if !r.HasSession {
			continue
		}
		s := plan.sessions[r.SessionID]
		if s == nil {
			if together > 0 && len(plan.sessions) == together {
				continue
			}
			s = &agentSession{id: r.SessionID, start: r.Arrival}
			plan.sessions[r.SessionID] = s
		}
		if together > 0 {
			due = Due(r.Arrival, s.start, p.speedup)
		}
		r.PrefixBlocks = nil // a call's prompt is its context and new text: no trace blocks
		c := &agentCall{tr: r, dueNS: int64(due), warm: warm, turn: s.calls, sess: s}
		s.calls++
		s.maxTok = max(s.maxTok, r.PromptTokens)
		if r.HasParents() {
			for _, id := range r.Call.Parents {
				pc := plan.calls[id] // DAGCheck found it earlier in this session
				c.parents = append(c.parents, pc)
				pc.children = append(pc.children, c)
				pc.kids++
			}
			c.waiting = len(c.parents)
			c.reused = plannedReuse(c)
		}
		plan.calls[r.ID] = c
		plan.Calls++
		if !warm {
			reusable += int64(c.reused)
			total += int64(max(r.PromptTokens, c.reused+1))
		}
	}
	if err := src.Err(); err != nil {
		return nil, err
	}
	plan.Sessions = len(plan.sessions)
	if together > plan.Sessions {
		return nil, fmt.Errorf("replay: --agent-sessions %d: trace %s has %d sessions", together, name, plan.Sessions)
	}
	if total > 0 {
		plan.Reusable, plan.HasReuse = float64(reusable)/float64(total), true
	}
	return plan, nil
}

// plannedReuse is how many prompt tokens c shares with its first parent's context as the
// replay plans it: that context is the parent's prompt and its answer, whose length the
// trace gives (output_tokens: max_tokens caps the answer at it), cut to prefix_tokens when
// the trace says the call shares less. An engine does no better: a shorter answer, a
// failed parent or a cut that falls inside a message only shorten it (agentCtx.cut).
func plannedReuse(c *agentCall) int32 {
	p := c.parents[0]
	ctx := max(p.tr.PromptTokens, p.reused+1) + p.tr.OutputTokens
	if k := c.tr.Call.PrefixTokens; k != trace.Unknown {
		ctx = min(ctx, k)
	}
	return ctx
}

// gap returns the wait after c's last parent's end under mode, at speedup.
func (c *agentCall) gap(mode string, speedup float64) int64 {
	g := c.tr.Call.GapOr(0)
	switch mode {
	case GapsNone:
		return 0
	case GapsScaled:
		return int64(float64(g) / speedup)
	}
	return int64(g)
}

// agentCtx is a context: the prompt of a call, or a call's prompt and its answer, as the
// bytes of its messages (chat: JSON objects separated by commas; an API without messages:
// the prompt's text escaped as in a JSON string). Contexts grow by appends into a buffer
// they share: a child's context is its parent's, with the parent's answer and its own new
// text appended in place, so a 100k-token context is never copied or re-tokenised per
// call. Only a second child of the same context (a fork: a subagent, or a join's sibling)
// copies it once into a buffer of its own.
type agentCtx struct {
	buf    *ctxBuf
	n      int   // bytes of buf.b that are this context
	parts  int   // entries of buf.marks that are this context
	tokens int32 // its length in tokens, as planned and counted
}

// ctxBuf is the buffer contexts share; b and marks only ever grow, so a context (a prefix
// of them) never changes, while a request in flight sends it.
type ctxBuf struct {
	b     []byte
	marks []ctxMark // after each part: where it ends
}

// ctxMark is the end of one part (a message) of a context: bytes and tokens, and whether
// the part is the user's (a prompt's new text) or an answer.
type ctxMark struct {
	n      int
	tokens int32
	user   bool
}

// newCtx returns an empty context whose buffer has room for capacity bytes.
func newCtx(capacity int) agentCtx {
	return agentCtx{buf: &ctxBuf{b: make([]byte, 0, capacity)}}
}

// bytes returns the context's bytes: a prefix of the shared buffer, never written again.
func (c agentCtx) bytes() []byte { return c.buf.b[:c.n:c.n] }

// add returns c with a part (tokens long) that write appends: in place when c is the end
// of its buffer, else in a copy of c (a fork). The part is written straight into the
// buffer, never built elsewhere and copied. The caller holds the lock that guards it.
func (c agentCtx) add(tokens int32, user bool, write func([]byte) []byte) agentCtx {
	if c.buf == nil {
		c = newCtx(4096)
	}
	if c.n != len(c.buf.b) {
		f := &ctxBuf{b: make([]byte, c.n, c.n+c.n/4+4096), marks: make([]ctxMark, c.parts, c.parts+8)}
		copy(f.b, c.buf.b[:c.n])
		copy(f.marks, c.buf.marks[:c.parts])
		c.buf = f
	}
	c.buf.b = write(c.buf.b)
	c.n = len(c.buf.b)
	c.tokens += tokens
	c.buf.marks = append(c.buf.marks, ctxMark{n: c.n, tokens: c.tokens, user: user})
	c.parts = len(c.buf.marks)
	return c
}

// endsWithUser reports whether c's last part is the user's: a new user message after it
// needs an answer between, for chat templates that require the roles to alternate (and
// Ollama joins two user messages with a blank line, two tokens the trace never had).
func (c agentCtx) endsWithUser() bool { return c.parts > 0 && c.buf.marks[c.parts-1].user }

// cut returns the longest prefix of c, whole parts, of at most k tokens: a subagent's
// share of its parent's context. A cut inside a message is rounded down to the message
// before (an answer's text cannot be cut at a token without tokenising it).
func (c agentCtx) cut(k int32) agentCtx {
	if k >= c.tokens {
		return c
	}
	out := agentCtx{buf: c.buf}
	for i := 0; i < c.parts && c.buf.marks[i].tokens <= k; i++ {
		out.n, out.parts, out.tokens = c.buf.marks[i].n, i+1, c.buf.marks[i].tokens
	}
	return out
}

// ctxCapacity is the buffer a session's first context reserves: room for its longest
// prompt at the bytes per token of its first part (contexts grow by appends, so a buffer
// that is large enough is never copied by append), and a little more.
func ctxCapacity(firstBytes int, firstTokens, maxTokens int32) int {
	if firstTokens < 1 {
		firstTokens = 1
	}
	per := float64(firstBytes) / float64(firstTokens)
	c := int(per*float64(maxTokens)*1.1) + 4096
	return min(max(c, firstBytes+4096), 256<<20)
}
