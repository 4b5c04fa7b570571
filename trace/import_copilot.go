package trace

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/llmreplay/llmreplay/internal/filekind"
)

// The GitHub Copilot coding-agent trace that Azure published for June 2026
// (Azure/AzurePublicDataset, GitHubCopilotCodingAgentDataset2026.md; the fields are
// analysis/GitHubCopilotCodingAgents/schema.json): JSON Lines, usually gzipped, one agent
// session per line. A session holds its user turns in time order; a turn holds the LLM
// calls and the tool batches of the agent's work, and a tool batch's request_id is the
// message_id of the call whose answer asked for the tools. The mapping, field by field, is
// docs/trace-format.md, "GitHub Copilot coding agent".

// copilotSession is one line. Scalars stay raw so that a bad one is reported with its
// path (turns[1].llm_calls[2].tokens.prompt) rather than encoding/json's Go type names.
type copilotSession struct {
	SessionID json.RawMessage `json:"session_id"`
	Turns     []struct {
		LLMCalls    []copilotCall `json:"llm_calls"`
		ToolBatches []struct {
			RequestID json.RawMessage `json:"request_id"`
		} `json:"tool_batches"`
	} `json:"turns"`
}

type copilotCall struct {
	MessageID  json.RawMessage `json:"message_id"`
	Timestamp  json.RawMessage `json:"timestamp"`
	DurationMS json.RawMessage `json:"duration_ms"`
	Initiator  json.RawMessage `json:"initiator_type"`
	Model      json.RawMessage `json:"model"`
	Result     json.RawMessage `json:"result"`
	Tokens     struct {
		Prompt     json.RawMessage `json:"prompt"`
		Completion json.RawMessage `json:"completion"`
		Cached     json.RawMessage `json:"cached"`
	} `json:"tokens"`
}

// copilotParsed is a call checked and converted, before its parent is known.
type copilotParsed struct {
	req    Request // ID, lengths, model, session; Call filled by link
	ts     int64   // Unix ns
	dur    int64   // ns
	cached int32   // Unknown when the call has none
	user   bool    // initiator_type user
	named  bool    // a tool batch of the session names it
	turn   int
}

// Limits of a call's fields: a duration beyond ten years is a unit mistake, not a call.
const copilotMaxDurationNS = 10 * 365 * 24 * int64(time.Hour)

// Reasons counted in the import report.
const (
	copilotNegativeGap    = "gap negative (the call began before its parent ended), set to 0"
	copilotZeroCompletion = "zero completion tokens raised to 1"
	copilotZeroPrompt     = "zero prompt tokens raised to 1"
	copilotCachedClamped  = "cached tokens above prompt tokens, clamped to prompt"
	copilotNullDuration   = "null duration_ms (not recorded): duration and the next call's gap unknown"
	copilotKeptPrefix     = "call result not Success, kept as recorded: "
	copilotMaxResultKeys  = 16 // distinct results named in the report; the rest are "other"
)

// copilotImporter carries what lasts across sessions.
type copilotImporter struct {
	p       *pipeline
	line    int64 // the session's line
	nextID  int64 // the file-order index of the next call: its request_id
	results map[string]string
}

// importCopilot reads the Copilot coding-agent trace. A session's calls span its whole
// life and sessions interleave in time, so no order of the lines is an arrival order:
// the rows are always sorted in memory (as --sort does).
func importCopilot(in io.Reader, p *pipeline) error {
	p.opts.Sort = true
	p.abs = true
	p.meta.Source = "copilot-agent"
	c := &copilotImporter{p: p, results: map[string]string{}}
	r := newCSVReader(in) // only its line reader is used
	for {
		r.line = r.nextLn
		l, err := r.readLine()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &SyntaxError{File: p.name, Unit: "line", Line: r.line, Err: err}
		}
		c.line = r.line
		if l = bytes.TrimSpace(l); len(l) == 0 {
			continue
		}
		// The sort buffer returns at once, so the pipeline never looks at ctx while the
		// lines are read: an import of the whole release would not stop on ^C.
		if c.line%1024 == 0 {
			if err := p.ctx.Err(); err != nil {
				return err
			}
		}
		var s copilotSession
		if err := json.Unmarshal(l, &s); err != nil {
			return c.errorf("", "not a session object (schema.json's record): %v", err)
		}
		if err := c.session(&s); err != nil {
			return err
		}
	}
}

func (c *copilotImporter) errorf(field, format string, a ...any) error {
	return &SyntaxError{File: c.p.name, Unit: "line", Line: c.line, Field: field, Err: fmt.Errorf(format, a...)}
}

// session converts one line's calls, links them and hands them to the pipeline.
func (c *copilotImporter) session(s *copilotSession) error {
	sid, err := idText(s.SessionID)
	if err != nil {
		return c.errorf("session_id", "%v", err)
	}
	session := sessionKey(sid)
	var calls []copilotParsed
	byMessage := map[string]int{} // message_id -> index in calls
	for ti, t := range s.Turns {
		for ci := range t.LLMCalls {
			field := callPath{ti, ci}
			pc, err := c.call(&t.LLMCalls[ci], field)
			if err != nil {
				return err
			}
			pc.turn = ti
			pc.req.SessionID, pc.req.HasSession = session, true
			id, ok, err := optionalID(t.LLMCalls[ci].MessageID)
			if err != nil {
				return c.errorf(field.at("message_id"), "%v", err)
			}
			if ok {
				if j, dup := byMessage[string(id)]; dup {
					return c.errorf(field.at("message_id"), "%q is also the message_id of the call with request_id %d; tool batches name calls by it, so it must be unique in the session", id, calls[j].req.ID)
				}
				byMessage[string(id)] = len(calls)
			}
			calls = append(calls, pc)
		}
	}
	for ti, t := range s.Turns {
		for bi, b := range t.ToolBatches {
			field := func() string { return fmt.Sprintf("turns[%d].tool_batches[%d].request_id", ti, bi) }
			id, err := idText(b.RequestID)
			if err != nil {
				return c.errorf(field(), "%v (it names the call whose answer asked for the tools)", err)
			}
			j, ok := byMessage[string(id)]
			if !ok {
				return c.errorf(field(), "%q names no call of this session (no llm_calls message_id is %q)", id, id)
			}
			calls[j].named = true
		}
	}
	return c.link(calls)
}

// callPath is where a call is in its session line, for errors.
type callPath struct{ turn, call int }

// at returns the path of the call's field f (made only for an error: not per call).
func (p callPath) at(f string) string {
	return fmt.Sprintf("turns[%d].llm_calls[%d].%s", p.turn, p.call, f)
}

// call checks and converts one llm_calls entry.
func (c *copilotImporter) call(cc *copilotCall, field callPath) (copilotParsed, error) {
	pc := copilotParsed{req: Request{ID: c.nextID}}
	c.nextID++
	c.p.rep.RowsRead++
	ts, ok, err := jsonString(cc.Timestamp)
	if err == nil && !ok {
		err = fmt.Errorf("missing")
	}
	if err == nil {
		pc.ts, err = parseUnixNS([]byte(ts))
	}
	if err != nil {
		return pc, c.errorf(field.at("timestamp"), "%v", err)
	}
	if isNull(cc.DurationMS) {
		pc.dur = Unknown
		c.p.rep.adjust(copilotNullDuration)
	} else {
		b, err := num(cc.DurationMS)
		if err == nil {
			pc.dur, err = parseScaled(b, 1e6)
		}
		if err == nil && (pc.dur < 0 || pc.dur > copilotMaxDurationNS) {
			err = fmt.Errorf("%s ms is not a duration in [0, ten years]", b)
		}
		if err != nil {
			return pc, c.errorf(field.at("duration_ms"), "%v", err)
		}
	}
	init, _, err := jsonString(cc.Initiator)
	if err == nil && init != "user" && init != "agent" {
		err = fmt.Errorf("%q, want user (the call that opens a turn) or agent (a follow-up)", init)
	}
	if err != nil {
		return pc, c.errorf(field.at("initiator_type"), "%v", err)
	}
	pc.user = init == "user"
	model, _, err := jsonString(cc.Model)
	if err != nil {
		return pc, c.errorf(field.at("model"), "%v", err)
	}
	pc.req.Model = c.p.intern(model)
	result, _, err := jsonString(cc.Result)
	if err != nil {
		return pc, c.errorf(field.at("result"), "%v", err)
	}
	if result != "" && result != "Success" {
		c.p.rep.adjust(copilotKeptPrefix + c.resultKey(result))
	}
	counts := [3]int64{}
	for i, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"prompt", cc.Tokens.Prompt}, {"completion", cc.Tokens.Completion}, {"cached", cc.Tokens.Cached}} {
		switch {
		case i == 2 && (f.raw == nil || isNull(f.raw)):
			counts[2] = Unknown
			continue
		case isNull(f.raw):
			// Not recorded. The publisher's scripts read it as 0 (trace_metrics.py:
			// tok.get("prompt") or 0, fillna(0)); so does this, and says so apart.
			c.p.rep.adjust("null " + f.name + " tokens (not recorded) read as 0, raised to 1")
			counts[i] = Unknown
			continue
		}
		b, err := num(f.raw)
		if err == nil {
			counts[i], err = parseCount(b)
		}
		if err == nil && counts[i] > math.MaxInt32 {
			err = fmt.Errorf("%d is out of range", counts[i])
		}
		if err != nil {
			return pc, c.errorf(field.at("tokens."+f.name), "%v", err)
		}
	}
	pt, ot, cached := int32(counts[0]), int32(counts[1]), int32(counts[2])
	switch pt {
	case 0:
		c.p.rep.adjust(copilotZeroPrompt)
		fallthrough
	case Unknown:
		pt = 1
	}
	switch ot {
	case 0:
		c.p.rep.adjust(copilotZeroCompletion)
		fallthrough
	case Unknown:
		ot = 1
	}
	if cached > pt {
		cached = pt
		c.p.rep.adjust(copilotCachedClamped)
	}
	pc.req.PromptTokens, pc.req.OutputTokens, pc.cached = pt, ot, cached
	return pc, nil
}

// resultKey names a result in the report, printable and from a bounded set (a corrupt
// file must not grow the report without end).
func (c *copilotImporter) resultKey(result string) string {
	if k, ok := c.results[result]; ok {
		return k
	}
	if len(c.results) >= copilotMaxResultKeys {
		return "other"
	}
	k := filekind.Printable(result, 40)
	c.results[result] = k
	return k
}

// link orders a session's calls by time (ties in file order), gives each its parent and
// gap, and emits them:
//
//   - the session's first call waits for none;
//   - a call that opens its turn, and a user-initiated call, wait for the latest earlier
//     call of another turn (the last call of the previous turn): the gap is the human's;
//   - an agent-initiated call waits for the latest earlier call of its turn that a tool
//     batch names (the call whose answer asked for the tools that led to it), or, when
//     none is named, the previous call of its turn: the gap is the tools'.
//
// The gap is the call's timestamp minus the parent's end (timestamp + duration); one that
// comes out negative (clock skew, or calls that overlapped) is 0 and counted; after a
// parent whose duration is not recorded, it is unknown.
func (c *copilotImporter) link(calls []copilotParsed) error {
	order := make([]int, len(calls))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(calls[a].ts, calls[b].ts) })
	// One slab per session for the calls and their single parents, rather than two small
	// objects per row: the sort buffer holds every row of the file.
	slab := make([]Call, len(calls))
	parents := make([]int64, len(calls))
	lastInTurn := map[int]int{}      // turn -> latest call so far
	lastNamedInTurn := map[int]int{} // turn -> latest call so far that a tool batch names
	last, lastOther := -1, -1        // the latest call; the latest of a turn other than last's
	for k, i := range order {
		pc := &calls[i]
		parent, kind := -1, ""
		switch prevInTurn, inTurn := lastInTurn[pc.turn]; {
		case k == 0:
		case pc.user || !inTurn:
			parent, kind = lastOther, GapUser
			if calls[last].turn != pc.turn {
				parent = last
			}
			if parent < 0 { // no other turn yet: a user call after others of the first turn
				parent = last
			}
		default:
			parent, kind = prevInTurn, GapTool
			if j, ok := lastNamedInTurn[pc.turn]; ok {
				parent = j
			}
		}
		slab[k] = Call{Gap: Unknown, Duration: time.Duration(pc.dur), PrefixTokens: Unknown, CachedTokens: pc.cached, ReasoningTokens: Unknown}
		pc.req.Call = &slab[k]
		if parent >= 0 {
			par := &calls[parent]
			// par is earlier in the order: since < 0 only when the subtraction overflowed.
			since := pc.ts - par.ts
			if since < 0 {
				return c.errorf("timestamp", "the calls with request_ids %d and %d are centuries apart", par.req.ID, pc.req.ID)
			}
			gap := since - par.dur
			switch {
			case par.dur == Unknown: // the parent's end is unknown, so is the gap
				gap = Unknown
			case gap < 0:
				gap = 0
				c.p.rep.adjust(copilotNegativeGap)
			}
			parents[k] = par.req.ID
			pc.req.Call.Parents = parents[k : k+1 : k+1]
			pc.req.Call.Gap, pc.req.Call.GapKind = time.Duration(gap), kind
		}
		if last >= 0 && calls[last].turn != pc.turn {
			lastOther = last
		}
		last = i
		lastInTurn[pc.turn] = i
		if pc.named {
			lastNamedInTurn[pc.turn] = i
		}
		if err := c.p.emit(row{ts: pc.ts, line: c.line, req: pc.req}); err != nil {
			return err
		}
	}
	return nil
}

// isNull reports a JSON null (not an absent value: that is nil).
func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// jsonString decodes a JSON string; ok is false when the value is absent or null.
func jsonString(raw json.RawMessage) (s string, ok bool, err error) {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return "", false, nil
	}
	if b[0] != '"' {
		return "", false, fmt.Errorf("%s is not a string", filekind.Printable(string(b), 40))
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return "", false, err
	}
	return s, true, nil
}

// idText returns an identifier's text: a non-empty JSON string, or a number as written.
func idText(raw json.RawMessage) ([]byte, error) {
	id, ok, err := optionalID(raw)
	if err == nil && !ok {
		err = fmt.Errorf("missing")
	}
	return id, err
}

// optionalID is idText for an identifier that may be absent (null, or "").
func optionalID(raw json.RawMessage) ([]byte, bool, error) {
	b := bytes.TrimSpace(raw)
	if len(b) > 0 && (b[0] == '-' || b[0] >= '0' && b[0] <= '9') {
		if !json.Valid(b) {
			return nil, false, fmt.Errorf("%s is not a number or a string", filekind.Printable(string(b), 40))
		}
		return b, true, nil
	}
	s, ok, err := jsonString(raw)
	if err != nil || !ok || s == "" {
		return nil, false, err
	}
	return []byte(s), true, nil
}
