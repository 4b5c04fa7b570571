package trace

import (
	"fmt"
	"slices"
	"time"
)

// Agent calls (docs/trace-format.md, "Agent sessions"): what a call waits for and what
// production recorded of it. An agent's next call does not come at a trace time: it comes
// when the calls it depends on have ended and the tools (or the human) between have taken
// their time.

// The gap kinds: what the time between a call's last parent's end and the call was.
const (
	GapTool = "tool" // the tools the parent's answer asked for ran
	GapUser = "user" // a human read the answer and wrote the next message
)

// Column names of the agent revision of trace/v1 (all nullable).
const (
	ColParents         = "parents"
	ColGapNS           = "gap_ns"
	ColGapKind         = "gap_kind"
	ColDurationNS      = "duration_ns"
	ColPrefixTokens    = "prefix_tokens"
	ColCachedTokens    = "cached_tokens"
	ColReasoningTokens = "reasoning_tokens"
)

// Call is what an agent trace records of one call beyond a plain request. A field that
// holds Unknown has no value (a null in the file).
type Call struct {
	// Parents are the request_ids of the calls this call waits for: one, or several for a
	// join. They are earlier calls of the same session. nil: the call waits for none, and
	// comes at its arrival time.
	Parents []int64
	// Gap is the recorded time from the end of the last parent to this call: a tool
	// batch's run or a human's turn (GapKind). Unknown without parents; 0 when the source
	// says none.
	Gap     time.Duration
	GapKind string // GapTool, GapUser, or "" when unknown
	// Duration is the call's recorded end-to-end duration in production.
	Duration time.Duration
	// PrefixTokens is how many leading tokens of the prompt are the context of Parents[0]
	// (its prompt, then its answer); Unknown means all of that context (an append, the
	// usual case). A subagent's first call, or a call after the context was compacted,
	// shares less.
	PrefixTokens int32
	// CachedTokens is production's cache hit: prompt tokens served from its prefix cache.
	CachedTokens int32
	// ReasoningTokens is how many of the output tokens were reasoning.
	ReasoningTokens int32
}

// Unknown is the value of a Call field the trace has no value for.
const Unknown = -1

// NewCall returns a Call with every field unknown.
func NewCall() *Call {
	return &Call{Gap: Unknown, Duration: Unknown, PrefixTokens: Unknown, CachedTokens: Unknown, ReasoningTokens: Unknown}
}

// IsZero reports a Call with no value at all (read back as a nil Call).
func (c *Call) IsZero() bool {
	return c.Parents == nil && c.Gap == Unknown && c.GapKind == "" && c.Duration == Unknown &&
		c.PrefixTokens == Unknown && c.CachedTokens == Unknown && c.ReasoningTokens == Unknown
}

// validate checks c on its own against its request r.
func (c *Call) validate(r *Request) error {
	if len(c.Parents) > 0 && !r.HasSession {
		return fmt.Errorf("%s: a call with parents needs a session_id (its parents are calls of its session)", ColParents)
	}
	for i, p := range c.Parents {
		if p == r.ID {
			return fmt.Errorf("%s: names the call itself (request_id %d)", ColParents, p)
		}
		if slices.Contains(c.Parents[:i], p) {
			return fmt.Errorf("%s: request_id %d named twice", ColParents, p)
		}
	}
	switch {
	case c.Gap < Unknown:
		return fmt.Errorf("%s: %d is negative", ColGapNS, int64(c.Gap))
	case c.Gap != Unknown && len(c.Parents) == 0:
		return fmt.Errorf("%s: set on a call without parents (a first call comes at its arrival)", ColGapNS)
	case c.GapKind != "" && c.GapKind != GapTool && c.GapKind != GapUser:
		return fmt.Errorf("%s: %q, want %s or %s", ColGapKind, c.GapKind, GapTool, GapUser)
	case c.GapKind != "" && len(c.Parents) == 0:
		return fmt.Errorf("%s: set on a call without parents", ColGapKind)
	case c.Duration < Unknown:
		return fmt.Errorf("%s: %d is negative", ColDurationNS, int64(c.Duration))
	case c.PrefixTokens < Unknown || c.PrefixTokens > r.PromptTokens:
		return fmt.Errorf("%s: %d not in [0, prompt_tokens %d]", ColPrefixTokens, c.PrefixTokens, r.PromptTokens)
	case c.PrefixTokens != Unknown && len(c.Parents) == 0:
		return fmt.Errorf("%s: set on a call without parents (it counts tokens of the first parent's context)", ColPrefixTokens)
	case c.CachedTokens < Unknown || c.CachedTokens > r.PromptTokens:
		return fmt.Errorf("%s: %d not in [0, prompt_tokens %d]", ColCachedTokens, c.CachedTokens, r.PromptTokens)
	case c.ReasoningTokens < Unknown || c.ReasoningTokens > r.OutputTokens:
		return fmt.Errorf("%s: %d not in [0, output_tokens %d]", ColReasoningTokens, c.ReasoningTokens, r.OutputTokens)
	}
	return nil
}

// GapOr returns the recorded gap, or d when it is unknown.
func (c *Call) GapOr(d time.Duration) time.Duration {
	if c == nil || c.Gap == Unknown {
		return d
	}
	return c.Gap
}

// HasParents reports whether r waits for other calls.
func (r *Request) HasParents() bool { return r.Call != nil && len(r.Call.Parents) > 0 }

// DAGCheck checks, row by row, that every call's parents are earlier calls of its own
// session: so a trace's dependencies form no cycle and name nothing missing. It keeps
// each row's id and session (about 40 bytes a row) and is meant for the passes that
// already read a whole trace before sending anything (replay's plan, trace info).
type DAGCheck struct {
	name     string
	sessions map[int64]int64 // request_id → session_id, of every row so far
	row      int64
}

// NewDAGCheck returns a check whose errors name the trace file name.
func NewDAGCheck(name string) *DAGCheck {
	return &DAGCheck{name: name, sessions: map[int64]int64{}, row: -1}
}

// Add checks the next row (in file order).
func (d *DAGCheck) Add(r *Request) error {
	d.row++
	if r.HasParents() {
		for _, p := range r.Call.Parents {
			s, ok := d.sessions[p]
			switch {
			case !ok:
				return fmt.Errorf("trace %s row %d (request_id %d): %s: request_id %d is not an earlier row of the trace (a call's parents come before it)", d.name, d.row, r.ID, ColParents, p)
			case s != r.SessionID:
				return fmt.Errorf("trace %s row %d (request_id %d): %s: request_id %d is in session %d, not this call's session %d", d.name, d.row, r.ID, ColParents, p, s, r.SessionID)
			}
		}
	}
	if r.HasSession {
		if _, dup := d.sessions[r.ID]; dup {
			return fmt.Errorf("trace %s row %d: request_id %d: not unique (calls are named by it)", d.name, d.row, r.ID)
		}
		d.sessions[r.ID] = r.SessionID
	}
	return nil
}
