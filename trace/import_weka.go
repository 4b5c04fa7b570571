package trace

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// The Weka agent-trace format (callanjfox/kv-cache-tester, docs/trace_replay_tester.md
// "Trace Format"; the schema AIPerf validates it with, ai-dynamo/aiperf
// docs/tutorials/weka-trace.md and its Weka adapter models): one JSON object per coding
// conversation whose requests list holds API calls (type "n" or "s") and subagent markers
// (type "subagent") that nest the subagent's own requests. The mapping is
// docs/trace-format.md, "Weka agent traces".

type wekaTrace struct {
	ID          string    `json:"id"`
	BlockSize   *int64    `json:"block_size"`
	HashIDScope string    `json:"hash_id_scope"`
	Requests    []wekaReq `json:"requests"`
}

type wekaReq struct {
	T          *float64  `json:"t"`
	Type       string    `json:"type"`
	Model      string    `json:"model"`
	In         *int64    `json:"in"`
	Out        *int64    `json:"out"`
	HashIDs    []int64   `json:"hash_ids"`
	InputTypes []string  `json:"input_types"`
	Stop       string    `json:"stop"`
	APITime    *float64  `json:"api_time"`
	ThinkTime  *float64  `json:"think_time"`
	AgentID    string    `json:"agent_id"`
	Status     string    `json:"status"`
	Requests   []wekaReq `json:"requests"`
}

// wekaCall is what a later call needs of an earlier one.
type wekaCall struct {
	id     int64
	t, end float64 // seconds from the conversation's start; end is NaN when api_time is absent
	in     int32
	hash   []int64
	stop   string
}

type wekaImporter struct {
	p        *pipeline
	trace    int64 // index of the trace object in the input
	session  int64
	next     int64 // the next request_id
	block    int64
	relative bool  // subagents' request times count from their marker
	offset   int64 // added to hash ids to keep a local-scope trace's blocks its own
	rows     []row // this trace's calls
}

// errorf is a bad field of the current trace: "trace: import FILE trace N: FIELD: ...".
func (w *wekaImporter) errorf(field, format string, a ...any) error {
	return &SyntaxError{File: w.p.name, Unit: "trace", Line: w.trace, Field: field, Err: fmt.Errorf(format, a...)}
}

// importWeka reads one Weka trace object, or several one after another (a JSON Lines
// file of them, as the published corpora hold). Each trace is one session; its rows are
// sorted with every other's by arrival (ImportOptions.Sort), since subagents interleave.
func importWeka(in io.Reader, p *pipeline) error {
	p.meta.Source = "weka"
	p.opts.Sort = true
	p.what = "trace"
	dec := json.NewDecoder(in)
	w := &wekaImporter{p: p, trace: -1}
	scopes := map[string]bool{}
	for {
		var tr wekaTrace
		err := dec.Decode(&tr)
		if errors.Is(err, io.EOF) {
			return nil
		}
		w.trace++
		if err != nil {
			return &SyntaxError{File: p.name, Unit: "trace", Line: w.trace, Err: fmt.Errorf("not a Weka trace object: %v", err)}
		}
		if tr.BlockSize == nil || *tr.BlockSize < 1 || *tr.BlockSize > 1<<20 {
			return w.errorf("block_size", "missing or not in [1, 1048576]")
		}
		if w.block != 0 && *tr.BlockSize != w.block {
			return w.errorf("block_size", "%d, but an earlier trace has %d: one trace file has one block size", *tr.BlockSize, w.block)
		}
		w.block = *tr.BlockSize
		p.meta.BlockTokens = int(w.block)
		if tr.HashIDScope != "local" && tr.HashIDScope != "global" {
			return w.errorf("hash_id_scope", "%q, want local or global", tr.HashIDScope)
		}
		scopes[tr.HashIDScope] = true
		if len(scopes) > 1 {
			return w.errorf("hash_id_scope", "local and global traces in one input: their hash ids cannot be told apart")
		}
		// A local scope is a namespace per trace: the same id in two traces is two blocks.
		w.offset = 0
		if tr.HashIDScope == "local" {
			w.offset = w.trace << 40
		}
		w.session = w.trace
		w.relative = wekaRelative(tr.Requests, 0)
		w.rows = w.rows[:0]
		if _, err := w.agent(tr.Requests, 0, "requests", nil, true); err != nil {
			return err
		}
		for _, r := range w.rows {
			if err := p.emit(r); err != nil {
				return err
			}
		}
	}
}

// wekaRelative reports whether a trace's subagents count their requests' times from
// their marker (kv-cache-tester's raw traces) rather than from the conversation's start
// (SemiAnalysis' published ones): it does when any subagent's request is earlier than the
// marker, which no absolute time can be.
func wekaRelative(reqs []wekaReq, depth int) bool {
	for _, r := range reqs {
		if r.Type != "subagent" || r.T == nil {
			continue
		}
		for _, c := range r.Requests {
			if c.T != nil && *c.T < *r.T {
				return true
			}
		}
		if depth < 64 && wekaRelative(r.Requests, depth+1) {
			return true
		}
	}
	return false
}

// agent reads one agent's requests (the root's, or a subagent's): each call's parent is
// the agent's previous call, plus the subagents that ended before it (a join); a
// subagent's first call forks from fork, the caller's last call before the marker. base
// is the marker's time when times are relative. It returns the agent's last call.
func (w *wekaImporter) agent(reqs []wekaReq, base float64, path string, fork *wekaCall, root bool) (*wekaCall, error) {
	var prev *wekaCall
	var joins []*wekaCall
	for i := range reqs {
		r := &reqs[i]
		at := fmt.Sprintf("%s[%d]", path, i)
		if r.T == nil || math.IsNaN(*r.T) || *r.T < 0 || *r.T > 1e9 {
			return nil, w.errorf(at+".t", "missing or not a time in seconds >= 0")
		}
		t := *r.T
		if w.relative && !root {
			t += base
			if t > 1e9 {
				return nil, w.errorf(at+".t", "%v s after the conversation's start, counted from its subagent marker: too late", t)
			}
		}
		switch r.Type {
		case "subagent":
			if len(r.Requests) == 0 {
				return nil, w.errorf(at+".requests", "a subagent without requests")
			}
			from := prev
			if from == nil {
				from = fork
			}
			last, err := w.agent(r.Requests, t, at+".requests", from, false)
			if err != nil {
				return nil, err
			}
			if r.Status != "async_launched" {
				joins = append(joins, last) // the agent's next call waits for it
			}
		case "n", "s":
			c, err := w.call(r, t, at, prev, fork, joins, root)
			if err != nil {
				return nil, err
			}
			prev, joins = c, nil
		default:
			return nil, w.errorf(at+".type", "%q, want n, s or subagent", r.Type)
		}
	}
	if prev == nil {
		return nil, w.errorf(path, "an agent with no API call (only subagents)")
	}
	return prev, nil
}

// call makes the row of one API call.
func (w *wekaImporter) call(r *wekaReq, t float64, at string, prev, fork *wekaCall, joins []*wekaCall, root bool) (*wekaCall, error) {
	if r.In == nil || *r.In < 0 || *r.In > math.MaxInt32 {
		return nil, w.errorf(at+".in", "missing or not a token count")
	}
	if r.Out == nil || *r.Out < 0 || *r.Out > math.MaxInt32 {
		return nil, w.errorf(at+".out", "missing or not a token count")
	}
	for _, f := range []struct {
		v    *float64
		name string
	}{{r.APITime, "api_time"}, {r.ThinkTime, "think_time"}} {
		if f.v != nil && (math.IsNaN(*f.v) || *f.v < 0 || *f.v > 1e9) {
			return nil, w.errorf(at+"."+f.name, "%v is not a duration in seconds >= 0", *f.v)
		}
	}
	w.p.rep.RowsRead++
	req := Request{ID: w.next, PromptTokens: int32(*r.In), OutputTokens: int32(*r.Out), SessionID: w.session, HasSession: true, Call: NewCall()}
	w.next++
	if req.PromptTokens < 1 {
		req.PromptTokens = 1
		w.p.rep.adjust("in 0 raised to 1")
	}
	if req.OutputTokens < 1 {
		req.OutputTokens = 1
		w.p.rep.adjust("out 0 raised to 1")
	}
	req.Model = w.p.intern(r.Model)
	req.PrefixBlocks = make([]int64, len(r.HashIDs))
	for i, h := range r.HashIDs {
		if h < 0 || h >= 1<<40 {
			return nil, w.errorf(fmt.Sprintf("%s.hash_ids[%d]", at, i), "%d not in [0, 2^40)", h)
		}
		req.PrefixBlocks[i] = h + w.offset
	}
	c := &wekaCall{id: req.ID, t: t, end: math.NaN(), in: req.PromptTokens, hash: r.HashIDs, stop: r.Stop}
	if r.APITime != nil {
		c.end = t + *r.APITime
		req.Call.Duration = time.Duration(math.Round(*r.APITime * 1e9))
	}
	first := prev
	if first == nil {
		first = fork
	}
	if first != nil {
		if t < first.t {
			return nil, w.errorf(at+".t", "%.3f s is before the call it follows (request_id %d at %.3f s)", t, first.id, first.t)
		}
		parents := []*wekaCall{first}
		for _, j := range joins {
			if j.t > t {
				// The subagent's last call came after this one: the agent did not wait for it.
				w.p.rep.adjust("subagent still running at the agent's next call: not joined")
				continue
			}
			parents = append(parents, j)
		}
		for _, q := range parents {
			req.Call.Parents = append(req.Call.Parents, q.id)
		}
		w.link(req.Call, r, t, parents, prev == nil, len(parents) > 1, root)
		req.Call.PrefixTokens = wekaPrefix(first, r.HashIDs, req.PromptTokens, w.block, prev == nil)
	}
	w.rows = append(w.rows, row{ts: int64(math.Round(t * 1e9)), line: w.trace, req: req})
	return c, nil
}

// link sets a call's gap after its parents and the gap's kind.
func (w *wekaImporter) link(c *Call, r *wekaReq, t float64, parents []*wekaCall, forked, joined, root bool) {
	switch {
	case forked || joined:
		c.GapKind = GapTool // the parent's Task tool started the subagent, or returned its result
	case slices.Contains(r.InputTypes, "tool_result"):
		c.GapKind = GapTool
	case root && slices.Contains(r.InputTypes, "text"):
		c.GapKind = GapUser
	case parents[0].stop == "tool_use":
		c.GapKind = GapTool
	}
	if r.ThinkTime != nil && len(parents) == 1 && !forked {
		c.Gap = time.Duration(math.Round(*r.ThinkTime * 1e9))
		return
	}
	last := math.Inf(-1)
	for _, q := range parents {
		last = max(last, q.end) // NaN when a parent's end is unknown
	}
	if math.IsNaN(last) {
		return
	}
	d := t - last
	if d < 0 {
		d = 0
		w.p.rep.adjust("gap_ns negative (call before its parent's recorded end) set to 0")
	}
	c.Gap = time.Duration(math.Round(d * 1e9))
}

// wekaPrefix is how many leading tokens a call shares with its first parent's context,
// from their hash ids: unknown (an append) when the call's blocks extend all the parent's
// full blocks; else the shared blocks. A subagent's first call shares what its hash ids
// say, and nothing when it has none (a subagent starts its own context).
func wekaPrefix(parent *wekaCall, hash []int64, prompt int32, block int64, forked bool) int32 {
	if len(hash) == 0 || len(parent.hash) == 0 {
		if forked {
			return 0
		}
		return Unknown
	}
	n := 0
	for n < len(hash) && n < len(parent.hash) && hash[n] == parent.hash[n] {
		n++
	}
	if !forked && int64(n) >= int64(parent.in)/block {
		return Unknown
	}
	return int32(min(int64(n)*block, int64(prompt)))
}
