package trace

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// TraceLab (uw-syfi/TraceLab, dataset CC BY 4.0) records Claude Code and Codex sessions
// round by round: one JSON line per LLM invocation, as its public release ships it
// (syfi_coding_trace.jsonl.gz; README.md "Data format", artifacts/utils/DB_SCHEMA.md,
// scripts/extract_claude_rounds.py). The mapping is docs/trace-format.md, "TraceLab".

// TraceLab's timing_events types (artifacts/utils/timing.py): inputs that make a round's
// request ready, and the model's output.
const (
	tlUserMessage = "user_message"
	tlToolResult  = "tool_result"
)

var tlOutputEvents = map[string]bool{"reasoning": true, "text": true, "tool_call": true}

type tracelabRow struct {
	User                  *string         `json:"user"`
	Project               *string         `json:"project"`
	SessionID             *string         `json:"session_id"`
	RoundIndex            json.RawMessage `json:"round_index"`
	Model                 *string         `json:"model"`
	InputTokensTotal      json.RawMessage `json:"input_tokens_total"`
	PrefixTokens          json.RawMessage `json:"prefix_tokens"`
	NewlyAppendTokens     json.RawMessage `json:"newly_append_tokens"`
	OutputTokens          json.RawMessage `json:"output_tokens"`
	ReasoningOutputTokens json.RawMessage `json:"reasoning_output_tokens"`
	TimingEvents          []struct {
		EventType string  `json:"event_type"`
		Timestamp *string `json:"timestamp"`
	} `json:"timing_events"`
	Tools []json.RawMessage `json:"tools"`
}

// tlSession is what a session's next round needs of its last one.
type tlSession struct {
	id      int64 // the trace's session_id: sessions numbered in order of first appearance
	round   int64 // round_index
	reqID   int64
	line    int64
	arrival int64 // ns, Unix
	end     int64 // ns, Unix, of its last output event; -1 when it has none
	context int64 // its prompt, then its answer: what an append continues
	tools   bool  // it asked for tools
}

// tlTimes is what a round's timing_events say of its request.
type tlTimes struct {
	arrival int64 // when its input was ready (Unix ns)
	end     int64 // its last output event; -1 when none
	user    bool  // a user_message made it ready (a human's turn)
	tool    bool  // a tool_result made it ready
}

// importTraceLab reads TraceLab's normalized round JSONL. The release is grouped by
// session, not sorted by time, so rows are always sorted (ImportOptions.Sort); each
// session's rounds must come in round_index order 0, 1, 2, ... and each round's parent
// is the round before it. Memory: the sort's ~160 bytes a row, plus ~100 per session.
func importTraceLab(in io.Reader, p *pipeline) error {
	s := newJSONL(in, p)
	p.meta.Source = "tracelab"
	p.abs = true
	p.opts.Sort = true
	sessions := map[string]*tlSession{}
	var nsessions int64
	for {
		var m tracelabRow
		ok, err := s.next(&m)
		if !ok {
			return err
		}
		if m.SessionID == nil || *m.SessionID == "" {
			return s.errorf("session_id", "missing (every round belongs to a session)")
		}
		b, err := num(m.RoundIndex)
		var round int64
		if err == nil {
			round, err = parseCount(b)
		}
		if err != nil {
			return s.errorf("round_index", "%v", err)
		}
		req, err := s.tracelabTokens(&m)
		if err != nil {
			return err
		}
		times, err := s.tracelabTimes(&m)
		if err != nil {
			return err
		}
		if m.Model != nil {
			req.Model = p.intern(*m.Model)
		}
		if times.end >= times.arrival {
			req.Call.Duration = time.Duration(times.end - times.arrival)
		}
		// A session id recurs under two users or projects when a session file was
		// collected twice (DB_SCHEMA.md, "Identity model"): those are two sessions.
		key := tlDeref(m.User) + "\x00" + tlDeref(m.Project) + "\x00" + *m.SessionID
		prev := sessions[key]
		if prev != nil && round == 0 {
			// Round 0 again: another copy of the session in the same file. TraceLab keeps
			// every copy (its analyses count them all), so it is another session here.
			prev = nil
			p.rep.adjust("round_index 0 again: a repeated copy of a session, imported as another session")
		}
		if err := s.tracelabLink(prev, round, times); err != nil {
			return err
		}
		if prev == nil {
			prev = &tlSession{id: nsessions}
			nsessions++
			sessions[key] = prev
		} else {
			req.Call.Parents = []int64{prev.reqID}
			tracelabGap(req.Call, prev, times, p.rep)
			if ctx := prev.context; ctx > int64(req.PromptTokens) {
				// Shorter than an append of the parent's context: compacted or trimmed.
				// Production's cache hit is the evidence of how much was still shared.
				req.Call.PrefixTokens = int32(min(int64(req.Call.CachedTokens), ctx))
			}
		}
		req.SessionID, req.HasSession = prev.id, true
		*prev = tlSession{id: prev.id, round: round, reqID: req.ID, line: s.r.line, arrival: times.arrival,
			end: times.end, context: int64(req.PromptTokens) + int64(req.OutputTokens), tools: len(m.Tools) > 0}
		if err := p.emit(row{ts: times.arrival, line: s.r.line, req: req}); err != nil {
			return err
		}
	}
}

// tracelabTokens reads a round's token counts into a request with its Call.
func (s *jsonlSource) tracelabTokens(m *tracelabRow) (Request, error) {
	count := func(raw json.RawMessage, field string) (int64, error) {
		b, err := num(raw)
		var n int64
		if err == nil {
			n, err = parseCount(b)
		}
		if err == nil && n > 1<<31-1 {
			err = fmt.Errorf("%d is too large", n)
		}
		if err != nil {
			return 0, s.errorf(field, "%v", err)
		}
		return n, nil
	}
	total, err := count(m.InputTokensTotal, "input_tokens_total")
	if err != nil {
		return Request{}, err
	}
	prefix, err := count(m.PrefixTokens, "prefix_tokens")
	if err != nil {
		return Request{}, err
	}
	appended, err := count(m.NewlyAppendTokens, "newly_append_tokens")
	if err != nil {
		return Request{}, err
	}
	if prefix+appended != total {
		return Request{}, s.errorf("input_tokens_total", "%d is not prefix_tokens %d + newly_append_tokens %d", total, prefix, appended)
	}
	out, err := count(m.OutputTokens, "output_tokens")
	if err != nil {
		return Request{}, err
	}
	req := Request{ID: s.row, PromptTokens: int32(total), OutputTokens: int32(out), Call: NewCall()}
	// A round with no usage recorded (a placeholder, or an interrupted answer) keeps its
	// place in the chain with the format's minimum length, counted as adjusted.
	if req.PromptTokens < 1 {
		req.PromptTokens = 1
		s.p.rep.adjust("input_tokens_total 0 raised to 1")
	}
	if req.OutputTokens < 1 {
		req.OutputTokens = 1
		s.p.rep.adjust("output_tokens 0 raised to 1")
	}
	req.Call.CachedTokens = int32(min(prefix, int64(req.PromptTokens)))
	if b, err := num(m.ReasoningOutputTokens); err == nil {
		n, err := parseCount(b)
		if err != nil {
			return Request{}, s.errorf("reasoning_output_tokens", "%v", err)
		}
		if n > out {
			return Request{}, s.errorf("reasoning_output_tokens", "%d is more than output_tokens %d", n, out)
		}
		req.Call.ReasoningTokens = int32(min(n, int64(req.OutputTokens)))
	}
	return req, nil
}

// tracelabTimes reads when a round's request was ready and when its answer ended, as
// TraceLab's own analyses do (artifacts/utils/timing.py): the request is ready at the
// latest user_message or tool_result at or before its first output event, and ends at
// its last output event. A round with no such input (rare) is placed at its first event.
func (s *jsonlSource) tracelabTimes(m *tracelabRow) (tlTimes, error) {
	const none = int64(-1 << 63)
	first, firstOut, lastOut := none, none, none
	ts := make([]int64, len(m.TimingEvents))
	for i, e := range m.TimingEvents {
		ts[i] = none
		if e.Timestamp == nil {
			continue
		}
		t, err := parseUnixNS([]byte(*e.Timestamp))
		if err != nil {
			return tlTimes{}, s.errorf(fmt.Sprintf("timing_events[%d].timestamp", i), "%v", err)
		}
		ts[i] = t
		if first == none || t < first {
			first = t
		}
		if tlOutputEvents[e.EventType] {
			if firstOut == none || t < firstOut {
				firstOut = t
			}
			lastOut = max(lastOut, t)
		}
	}
	if first == none {
		return tlTimes{}, s.errorf("timing_events", "no event with a timestamp: the round cannot be placed in time")
	}
	tt := tlTimes{arrival: none, end: -1}
	if lastOut != none {
		tt.end = lastOut
	}
	for i, e := range m.TimingEvents {
		if ts[i] == none || e.EventType != tlUserMessage && e.EventType != tlToolResult || firstOut != none && ts[i] > firstOut {
			continue
		}
		tt.arrival = max(tt.arrival, ts[i])
		if e.EventType == tlUserMessage {
			tt.user = true
		} else {
			tt.tool = true
		}
	}
	if tt.arrival == none {
		tt.arrival = first
	}
	return tt, nil
}

// tracelabLink checks that a round continues its session: the first round is round 0,
// every later one the next round_index, ready no earlier than its parent.
func (s *jsonlSource) tracelabLink(prev *tlSession, round int64, t tlTimes) error {
	switch {
	case prev == nil && round != 0:
		return s.errorf("round_index", "%d is the session's first round in the file: rounds 0 to %d, its parents, are missing (a session's rounds come in round_index order)", round, round-1)
	case prev == nil:
		return nil
	case round <= prev.round:
		return s.errorf("round_index", "%d after round %d of the same session (line %d): rounds must come in round_index order, each once", round, prev.round, prev.line)
	case round != prev.round+1:
		return s.errorf("round_index", "%d follows round %d (line %d): round %d, its parent, is missing", round, prev.round, prev.line, round-1)
	case t.arrival < prev.arrival:
		return s.errorf("timing_events", "the round's input was ready %v before its parent round's (line %d)", time.Duration(prev.arrival-t.arrival), prev.line)
	}
	return nil
}

// tracelabGap sets a call's gap after its parent and the gap's kind: a human's turn when
// a user_message made the round ready, else the tools the parent asked for.
func tracelabGap(c *Call, prev *tlSession, t tlTimes, rep *ImportReport) {
	switch {
	case t.user:
		c.GapKind = GapUser
	case t.tool || prev.tools:
		c.GapKind = GapTool
	}
	if prev.end < 0 {
		return
	}
	d := t.arrival - prev.end
	if d < 0 {
		// The input was ready before the parent's last recorded output (an event logged
		// late): no time passed between them that a replay could reproduce.
		d = 0
		rep.adjust("gap_ns negative (input before the parent's last output) set to 0")
	}
	c.Gap = time.Duration(d)
}

func tlDeref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
