package replay

import (
	"fmt"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// The run of agent sessions (agents.go, docs/replay.md "Agents"). The open-loop sessions
// executor (exec_sessions.go) dispatches them: a session's first calls (those without
// parents) come from the preparer, due at their trace time; every later call is queued
// when its last parent ends, due then plus its gap. This file is what the preparer and a
// call's end do: build a call's request on its parent's context, and release the calls
// that waited for it.

// agentRow is the preparer's part for a row of an agent session (or, with --agent-sessions,
// any row): a first call is handed to the executor, due at its trace time (with
// --agent-sessions queued by its due time, which is not file order); a call with parents
// waits for them, and a row --agent-sessions leaves out is skipped. false: the run stops.
func (pr *feed) agentRow(tr *trace.Request) bool {
	if !tr.HasSession {
		return true // --agent-sessions replays its sessions only
	}
	req, err := pr.rootCall(tr)
	if err != nil {
		pr.fail(err)
		return false
	}
	if req == nil {
		return true
	}
	s := pr.sess
	if s.agents.Together {
		s.mu.Lock()
		s.push(req)
		s.mu.Unlock()
		pr.prog.Planned.Add(1)
		return true
	}
	if !pr.handOver(req) {
		return false
	}
	pr.prog.Planned.Add(1)
	if s.needHead.Load() {
		s.signal()
	}
	return true
}

// rootCall is the preparer's part for a row of an agent session: a call without parents
// gets its request, due at its trace time, on a context of its own; a call with parents
// returns nil (it is built when they end).
func (pr *feed) rootCall(tr *trace.Request) (*request, error) {
	s := pr.sess
	c := s.agents.calls[tr.ID]
	if c == nil && s.agents.Together {
		return nil, nil // a row of a session --agent-sessions leaves out
	}
	if c == nil {
		return nil, fmt.Errorf("replay: request %d was not planned (the trace changed since the run began?)", tr.ID)
	}
	if len(c.parents) > 0 {
		return nil, nil
	}
	// The call's tools come first; its context is its messages (Tools.split).
	tr2, tools, err := pr.o.Tools.split(&c.tr)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	s.promptMu.Lock()
	text, err := pr.o.Prompter.AppendPrompt(s.scratch[:0], &tr2)
	s.scratch = text
	if err != nil {
		s.promptMu.Unlock()
		return nil, fmt.Errorf("replay: prompt of request %d: %w", tr.ID, err)
	}
	ctx := newCtx(ctxCapacity(len(text)+len(text)/8+64, tr2.PromptTokens, c.sess.maxTok))
	ctx = ctx.add(tr2.PromptTokens+pr.o.HistoryOverhead.shift(), true, func(b []byte) []byte { return pr.userPart(b, false, text) })
	s.promptMu.Unlock()
	s.mu.Lock()
	c.ctx, c.tools = ctx, tools.sent
	s.mu.Unlock()
	return pr.callRequest(c, ctx, tools, c.dueNS, results.Null), nil
}

// userPart appends the new text of a call: a user message (a tool's output or a person's
// message; chat), or the text escaped as in a JSON string (an API without messages).
func (pr *feed) userPart(b []byte, after bool, text []byte) []byte {
	if !pr.o.Client.TakesMessages() {
		return wire.AppendJSONContent(b, text)
	}
	if after {
		b = append(b, ',')
	}
	b = append(b, `{"role":"user","content":`...)
	b = wire.AppendJSONBytes(b, text)
	return append(b, '}')
}

// answerPart appends a call's answer after its prompt: an assistant message (an empty
// one when it received nothing, so that roles still alternate), or the text.
func (pr *feed) answerPart(b []byte, answer []byte) []byte {
	if !pr.o.Client.TakesMessages() {
		return wire.AppendJSONContent(b, answer)
	}
	b = append(b, `,{"role":"assistant","content":`...)
	b = wire.AppendJSONBytes(b, answer)
	return append(b, '}')
}

// callRequest returns c's request: its body built around ctx (sent in place, not copied)
// with its tools, due at dueNS. A context counts its parts as later requests count them
// (HistoryOverhead); the request itself counts its template's own tokens instead.
func (pr *feed) callRequest(c *agentCall, ctx agentCtx, tools toolSplit, dueNS, waitNS int64) *request {
	req := &request{
		Request: transport.Request{ID: c.tr.ID, DueNS: dueNS, PromptTokens: ctx.tokens - pr.o.HistoryOverhead.shift() + tools.sent, OutputTokens: c.tr.OutputTokens,
			Warmup: c.warm, Session: c.sess.id, HasSession: true, Capture: len(c.children) > 0},
		turn: c.turn, tools: tools.sent, call: c, sessionWaitNS: waitNS, gapNS: gapNS(c, pr.o.Gaps, pr.o.Speedup),
	}
	runID := pr.preparedRunID.Load()
	if runID != nil {
		req.RunID = *runID
	}
	cl := pr.o.Client
	prefix := cl.DefaultBodyPrefix()
	if p, ok := pr.bodyPrefixes[c.tr.Model]; ok {
		prefix = p
	}
	req.Body, req.SharedAt = cl.AppendContextBody(make([]byte, 0, len(prefix)+len(tools.desc)+224), prefix, c.tr.OutputTokens, nil, tools.desc)
	req.Shared = ctx.bytes()
	pr.tr.Prepare(&req.Request, runID == nil)
	return req
}

// callEnded is the part of an agent call after its response: its answer joins its
// context, and the calls that waited for it and for nothing else are built and queued
// (or, when --on-turn-error end-session ended the session, recorded dropped).
func (pr *feed) callEnded(req *request, res *results.Result, endNS int64) {
	s := pr.sess
	c := req.call
	var tokens int32
	if res.OutputTokens > 0 && len(req.Answer) > 0 {
		tokens = res.OutputTokens
	}
	answer := req.Answer
	req.Answer = nil
	s.mu.Lock()
	if len(c.children) > 0 {
		c.ctx = c.ctx.add(tokens, false, func(b []byte) []byte { return pr.answerPart(b, answer) })
	}
	if res.Status != results.StatusOK && pr.o.OnTurnError == TurnErrorEndSession && !c.sess.failed {
		c.sess.failed, c.sess.failCall = true, c.turn
	}
	ready := pr.release(c, endNS, nil)
	s.mu.Unlock()
	pr.startReady(ready, endNS)
}

// release counts c ended at endNS: its children that now have all their parents ended
// are appended to ready. Under s.mu.
func (pr *feed) release(c *agentCall, endNS int64, ready []*agentCall) []*agentCall {
	for _, ch := range c.children {
		ch.waiting--
		ch.readyNS = max(ch.readyNS, endNS)
		if ch.waiting == 0 {
			ready = append(ready, ch)
		}
	}
	if len(c.children) == 0 {
		c.ctx = agentCtx{}
	}
	pr.sess.open--
	if pr.sess.open == 0 && pr.sess.prepDone {
		pr.sess.signal()
	}
	return ready
}

// startReady builds and queues each ready call, or records it dropped when its session
// was ended by a failed call; a dropped call counts as ended for its own children.
func (pr *feed) startReady(ready []*agentCall, endNS int64) {
	s := pr.sess
	for len(ready) > 0 {
		ch := ready[0]
		ready = ready[1:]
		s.mu.Lock()
		failed, failCall := ch.sess.failed, ch.sess.failCall
		if failed {
			ready = pr.release(ch, endNS, ready)
			pr.letGo(ch)
		}
		s.mu.Unlock()
		if failed {
			pr.recordDropped(ch, failCall)
			continue
		}
		req, err := pr.buildCall(ch)
		if err != nil {
			pr.fail(err)
			return
		}
		s.mu.Lock()
		s.push(req)
		s.mu.Unlock()
		pr.prog.Planned.Add(1)
	}
}

// letGo releases ch's hold on its first parent's context: once every child of a call is
// built, its context goes (the children's contexts keep what they share of it). Under s.mu.
func (pr *feed) letGo(ch *agentCall) {
	p := ch.parents[0]
	if p.kids--; p.kids == 0 {
		p.ctx = agentCtx{}
	}
}

// buildCall builds ch, whose parents have all ended: its prompt is its first parent's
// context (cut to the trace's prefix_tokens), then new text up to the recorded length (at
// least one token); due at the last parent's end plus its gap.
func (pr *feed) buildCall(ch *agentCall) (*request, error) {
	s := pr.sess
	tr, tools, err := pr.o.Tools.split(&ch.tr)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	s.mu.Lock()
	base := ch.parents[0].ctx
	if k := ch.tr.Call.PrefixTokens; k != trace.Unknown {
		// prefix_tokens counts from the prompt's start, where the parent's tools are:
		// its messages are what follows them.
		base = base.cut(max(0, k-ch.parents[0].tools))
	}
	pr.letGo(ch)
	s.mu.Unlock()
	tr.PromptTokens, tr.Prompt = tr.PromptTokens-base.tokens, ""
	if least := pr.o.HistoryOverhead.least(); tr.PromptTokens < least {
		tr.PromptTokens = least
		s.mu.Lock()
		s.short++
		s.mu.Unlock()
	}
	s.promptMu.Lock()
	text, err := pr.o.Prompter.AppendPrompt(s.scratch[:0], &tr)
	s.scratch = text
	if err != nil {
		s.promptMu.Unlock()
		return nil, fmt.Errorf("replay: prompt of request %d: %w", tr.ID, err)
	}
	due := ch.readyNS + ch.gap(pr.o.Gaps, pr.o.Speedup)
	s.mu.Lock() // the buffer's lock, inside the prompter's: text is the prompter's scratch
	if base.endsWithUser() && pr.o.Client.TakesMessages() {
		// A subagent cut after a user message: an empty answer between, so roles alternate.
		base = base.add(0, false, func(b []byte) []byte { return pr.answerPart(b, nil) })
	}
	ch.ctx, ch.tools = base.add(tr.PromptTokens+pr.o.HistoryOverhead.shift(), true, func(b []byte) []byte { return pr.userPart(b, base.n > 0, text) }), tools.sent
	ctx := ch.ctx
	s.mu.Unlock()
	s.promptMu.Unlock()
	return pr.callRequest(ch, ctx, tools, due, max(0, due-ch.dueNS)), nil
}

// recordDropped records a call of a session that --on-turn-error end-session ended: never
// sent, status dropped, due at its trace time.
func (pr *feed) recordDropped(c *agentCall, failed int32) {
	if c.warm {
		return
	}
	res := results.NewResult(c.tr.ID, pr.o.Shard, c.dueNS, c.tr.PromptTokens, c.tr.OutputTokens)
	res.SessionID, res.Turn = c.sess.id, c.turn
	setRecorded(res, c, gapNS(c, pr.o.Gaps, pr.o.Speedup))
	res.Status = results.StatusDropped
	res.Error = fmt.Sprintf("not sent: call %d of the session failed (--on-turn-error end-session)", failed)
	pr.results.put(res)
}

// gapNS returns the gap applied before c for its record: results.Null for a call without
// parents.
func gapNS(c *agentCall, mode string, speedup float64) int64 {
	if len(c.parents) == 0 {
		return results.Null
	}
	return c.gap(mode, speedup)
}

// setRecorded fills res's agent columns: the gap applied and what the trace recorded.
func setRecorded(res *results.Result, c *agentCall, gap int64) {
	res.GapNS = gap
	res.RecordedArrivalNS = int64(c.tr.Arrival)
	if k := c.tr.Call; k != nil {
		if k.Duration != trace.Unknown {
			res.RecordedDurationNS = int64(k.Duration)
		}
		if k.CachedTokens != trace.Unknown {
			res.RecordedCachedTokens = k.CachedTokens
		}
	}
}
