package trace

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"
)

func mustDist(t *testing.T, s string) Dist {
	t.Helper()
	d, err := ParseDist(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func distPtr(t *testing.T, s string) *Dist { d := mustDist(t, s); return &d }

// agentSpec is a spec whose every draw is fixed, so its shape can be worked by hand:
// 6 main calls per session, every one after the first forking 2 branches of 2 calls,
// 100 tokens appended per call, 50 out, tool gaps 2 s, a user gap 10 s after every 3
// main calls, prefill 1000 tokens/s, decode 50 tokens/s.
func agentSpec(t *testing.T) SynthSpec {
	return SynthSpec{Arrivals: ArrivalSpec{Process: ArrivalPoisson, Rate: 0.5, Seed: 9},
		Output: mustDist(t, "fixed:50"), PromptMin: 1, PromptMax: 1 << 20, OutputMin: 1, OutputMax: 4096,
		Agent: &AgentSpec{Sessions: 3, Calls: mustDist(t, "fixed:6"), First: mustDist(t, "fixed:1000"), Append: mustDist(t, "fixed:100"),
			ToolGapMS: mustDist(t, "fixed:2000"), UserEvery: 3, UserGapMS: distPtr(t, "fixed:10000"),
			Fork: 1, Branches: distPtr(t, "fixed:2"), BranchCalls: distPtr(t, "fixed:2"), PrefillPerS: 1000, DecodePerS: 50}}
}

func readBytes(t *testing.T, b []byte) ([]Request, Meta) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(b), "synth")
	if err != nil {
		t.Fatal(err)
	}
	var rows []Request
	for r.Next() {
		rows = append(rows, r.Request())
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return rows, r.Meta()
}

// checkAgentRows checks what every synthetic agent call must satisfy, from the rows
// alone: request_id is the row; a call arrives at its parents' latest recorded end
// (arrival + duration_ns, or arrival without durations) plus its gap; its prompt is what
// it shares with its first parent (prefix_tokens, or that parent's whole context) plus
// the appended tokens app (0: any); its duration is (prompt − shared)/prefill +
// output/decode seconds. It returns the rows by id.
func checkAgentRows(t *testing.T, rows []Request, a *AgentSpec, app int64) {
	t.Helper()
	for i, r := range rows {
		if r.ID != int64(i) || !r.HasSession {
			t.Fatalf("row %d: id %d, session %v", i, r.ID, r.HasSession)
		}
		c := r.Call
		shared := int64(0)
		if r.HasParents() {
			due := int64(0)
			for _, p := range c.Parents {
				q := rows[p]
				end := int64(q.Arrival)
				if q.Call != nil && q.Call.Duration != Unknown {
					end += int64(q.Call.Duration)
				}
				due = max(due, end)
			}
			if int64(r.Arrival) != due+int64(c.Gap) {
				t.Fatalf("row %d arrives at %d, its parents' last end + gap is %d", i, r.Arrival, due+int64(c.Gap))
			}
			p0 := rows[c.Parents[0]]
			shared = int64(p0.PromptTokens) + int64(p0.OutputTokens)
			if c.PrefixTokens != Unknown {
				shared = int64(c.PrefixTokens)
			}
			if got := int64(r.PromptTokens) - shared; got < 1 || app > 0 && got != app {
				t.Fatalf("row %d: prompt %d = shared %d + %d, want + %d appended", i, r.PromptTokens, shared, int64(r.PromptTokens)-shared, app)
			}
		}
		if a.DecodePerS == 0 {
			if c != nil && c.Duration != Unknown {
				t.Fatalf("row %d has a duration without a duration model", i)
			}
			continue
		}
		want := time.Duration(math.Round((float64(int64(r.PromptTokens)-shared)/a.PrefillPerS + float64(r.OutputTokens)/a.DecodePerS) * 1e9))
		if c == nil || c.Duration != want {
			t.Fatalf("row %d: duration %+v, the model says %v", i, c, want)
		}
	}
}

// TestSynthAgentStructure checks the fixed-draw spec's rows call by call, then its
// shape through trace info against figures worked by hand: per session, the root, then
// 5 forks of 2 branches × 2 calls joined by a call: 1 + 5·5 = 26 calls; depth
// 1 + 5·3 = 16; the main chain's 4th call (after 3) has the user gap, the other 24
// gapped calls tool gaps.
func TestSynthAgentStructure(t *testing.T) {
	spec := agentSpec(t)
	rows, _ := readBytes(t, synthBytes(t, spec))
	checkAgentRows(t, rows, spec.Agent, 100)
	arr := newArrivalGen(spec.Arrivals)
	roots := 0
	for i, r := range rows {
		c := r.Call
		switch {
		case !r.HasParents():
			// Session starts follow the arrival process, one session per arrival.
			if want := arr.next(); int64(r.Arrival) != want || r.SessionID != int64(roots) || r.PromptTokens != 1000 {
				t.Errorf("root row %d: %+v, want session %d at %d with 1000 tokens", i, r, roots, want)
			}
			roots++
		case len(c.Parents) > 1:
			// A join: its parents are the tails of branches forked from one call, whose
			// context is the join's prefix.
			var forks []int64
			for _, p := range c.Parents {
				q := rows[p]
				for q.Call.PrefixTokens == Unknown {
					q = rows[q.Call.Parents[0]]
				}
				forks = append(forks, q.Call.Parents[0])
				if rows[p].SessionID != r.SessionID {
					t.Errorf("join row %d names row %d of another session", i, p)
				}
			}
			f := rows[forks[0]]
			if len(forks) != 2 || forks[0] != forks[1] || c.PrefixTokens != f.PromptTokens+f.OutputTokens {
				t.Errorf("join row %d: parents %v reach forks %v, prefix %d", i, c.Parents, forks, c.PrefixTokens)
			}
		case c.PrefixTokens != Unknown:
			// A branch's first call: it shares the forking call's whole context.
			f := rows[c.Parents[0]]
			if c.PrefixTokens != f.PromptTokens+f.OutputTokens || c.GapKind != GapTool {
				t.Errorf("branch row %d: prefix %d, fork's context %d", i, c.PrefixTokens, f.PromptTokens+f.OutputTokens)
			}
		}
		if r.HasParents() && !(c.GapKind == GapTool && c.Gap == 2*time.Second || c.GapKind == GapUser && c.Gap == 10*time.Second) {
			t.Errorf("row %d: gap %v %s, want tool 2 s or user 10 s", i, c.Gap, c.GapKind)
		}
	}
	info, err := ComputeInfo(context.Background(), NewSliceSource(rows), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	sh := info.Agent
	checkSpread(t, "calls per session", sh.CallsPerSession, Spread{N: 3, Mean: 26, P50: 26, P90: 26, P99: 26, Max: 26})
	checkSpread(t, "depth", sh.Depth, Spread{N: 3, Mean: 16, P50: 16, P90: 16, P99: 16, Max: 16})
	if roots != 3 || sh.Forks != 15 || sh.Joins != 15 || sh.ChildrenPerFork.Max != 2 || sh.ChildrenPerFork.P50 != 2 {
		t.Errorf("roots %d forks %d joins %d children %+v, want 3, 15, 15, 2", roots, sh.Forks, sh.Joins, sh.ChildrenPerFork)
	}
	if g := sh.Gaps; len(g) != 2 || g[0].N != 72 || g[1].N != 3 {
		t.Errorf("gaps %+v, want 72 tool and 3 user", g)
	}
}

// TestSynthAgentCap: a chain ends before a prompt would pass --prompt-max. Contexts
// grow by 100 appended + 50 output per call from 1000, so with a cap of 2000 a session
// has calls of 1000, 1150, ..., 1900 tokens: 7 calls of the 50 drawn. Branches end at
// the cap too, and without a duration model, a call arrives at its last parent's
// arrival plus its gap.
func TestSynthAgentCap(t *testing.T) {
	spec := agentSpec(t)
	spec.PromptMax = 2000
	spec.Agent.Calls = mustDist(t, "fixed:50")
	spec.Agent.Fork = 0
	spec.Agent.PrefillPerS, spec.Agent.DecodePerS = 0, 0
	rows, _ := readBytes(t, synthBytes(t, spec))
	checkAgentRows(t, rows, spec.Agent, 100)
	perSession := map[int64][]int32{}
	for _, r := range rows {
		perSession[r.SessionID] = append(perSession[r.SessionID], r.PromptTokens)
	}
	for s, p := range perSession {
		if len(p) != 7 || p[0] != 1000 || p[6] != 1900 {
			t.Errorf("session %d prompts %v, want 7 from 1000 to 1900", s, p)
		}
	}
	// Forks at every main call, 2 branches of 5 calls. A fork from a context of c tokens
	// makes branch calls of c+100, c+250, ... up to 2000 (at most 5), and a join of c+100
	// (context c+150). From the root's 1050: branches of 5 calls, join 1150; from 1200: 5,
	// join 1300; from 1350: 4; 1500: 3; 1650: 2; 1800: 1, join 1900; from 1950 no call fits.
	// Per session 1 + 2·(5+5+4+3+2+1) + 6 = 47 calls, 6 forks, 6 joins; depth: each fork
	// adds its branch length + 1, 1 + 6+6+5+4+3+2 = 27.
	spec.Agent.Fork, spec.Agent.BranchCalls = 1, distPtr(t, "fixed:5")
	rows, _ = readBytes(t, synthBytes(t, spec))
	checkAgentRows(t, rows, spec.Agent, 100)
	info, err := ComputeInfo(context.Background(), NewSliceSource(rows), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	sh := info.Agent
	checkSpread(t, "calls per session", sh.CallsPerSession, Spread{N: 3, Mean: 47, P50: 47, P90: 47, P99: 47, Max: 47})
	checkSpread(t, "depth", sh.Depth, Spread{N: 3, Mean: 27, P50: 27, P90: 27, P99: 27, Max: 27})
	if sh.Forks != 18 || sh.Joins != 18 || sh.Context.Max != 1900 {
		t.Errorf("forks %d joins %d longest prompt %v, want 18, 18, 1900", sh.Forks, sh.Joins, sh.Context.Max)
	}
}

// randomAgentSpec draws everything: gaps uniform in ms, branches of 1 to 5 calls.
func randomAgentSpec(t *testing.T) SynthSpec {
	return SynthSpec{Arrivals: ArrivalSpec{Process: ArrivalGamma, Rate: 2, CV: 2, Seed: 5},
		Output: mustDist(t, "lognormal:300,400"), PromptMin: 1, PromptMax: 131072, OutputMin: 1, OutputMax: 8192,
		Agent: &AgentSpec{Sessions: 20, Calls: mustDist(t, "uniform:5,60"), First: mustDist(t, "lognormal:20000,8000"),
			Append: mustDist(t, "lognormal:1500,2000"), ToolGapMS: mustDist(t, "uniform:100,5000"),
			UserEvery: 4, UserGapMS: distPtr(t, "uniform:20000,40000"),
			Fork: 0.3, Branches: distPtr(t, "uniform:2,4"), BranchCalls: distPtr(t, "uniform:1,5"), PrefillPerS: 8000, DecodePerS: 40}}
}

// TestSynthAgentRandomDraws: with drawn lengths and gaps, every call still arrives at its
// parents' last end plus its gap (branches of unequal lengths make the latest parent
// matter), appends at least a token, keeps under the cap; gaps are whole milliseconds
// inside their DIST's range.
func TestSynthAgentRandomDraws(t *testing.T) {
	spec := randomAgentSpec(t)
	rows, _ := readBytes(t, synthBytes(t, spec))
	checkAgentRows(t, rows, spec.Agent, 0)
	unequalJoins := 0
	for i, r := range rows {
		if r.PromptTokens > 131072 {
			t.Fatalf("row %d: prompt %d over the cap", i, r.PromptTokens)
		}
		if !r.HasParents() {
			continue
		}
		c := r.Call
		lo, hi := 100*time.Millisecond, 5*time.Second
		if c.GapKind == GapUser {
			lo, hi = 20*time.Second, 40*time.Second
		}
		if c.Gap < lo || c.Gap > hi || c.Gap%time.Millisecond != 0 {
			t.Fatalf("row %d: %s gap %v outside [%v, %v] or not whole ms", i, c.GapKind, c.Gap, lo, hi)
		}
		if len(c.Parents) > 1 {
			a, b := rows[c.Parents[0]], rows[c.Parents[len(c.Parents)-1]]
			if a.Arrival+a.Call.Duration != b.Arrival+b.Call.Duration {
				unequalJoins++
			}
		}
	}
	info, err := ComputeInfo(context.Background(), NewSliceSource(rows), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	sh := info.Agent
	if unequalJoins == 0 || sh.Forks == 0 || sh.Gaps[1].N == 0 || sh.Context.Max <= 32768 {
		t.Errorf("joins over unequal branches %d, forks %d, user gaps %d, longest context %v: the spec should make them all", unequalJoins, sh.Forks, sh.Gaps[1].N, sh.Context.Max)
	}
}

// TestSynthAgentRegenerates: the same spec and seed give the same bytes, another seed
// others, and the spec read back from llmreplay.generator regenerates the file byte
// for byte.
func TestSynthAgentRegenerates(t *testing.T) {
	a := synthBytes(t, randomAgentSpec(t))
	if !bytes.Equal(a, synthBytes(t, randomAgentSpec(t))) {
		t.Fatal("the same agent spec and seed gave different bytes")
	}
	other := randomAgentSpec(t)
	other.Arrivals.Seed++
	if bytes.Equal(a, synthBytes(t, other)) {
		t.Fatal("another seed gave the same bytes")
	}
	_, meta := readBytes(t, a)
	var gen struct {
		Tool string    `json:"tool"`
		Spec SynthSpec `json:"spec"`
	}
	if err := json.Unmarshal([]byte(meta.Generator), &gen); err != nil || gen.Spec.Agent == nil {
		t.Fatalf("generator %s: %v", meta.Generator, err)
	}
	if !bytes.Equal(a, synthBytes(t, gen.Spec)) {
		t.Fatalf("the spec in llmreplay.generator does not regenerate the file:\n%s", meta.Generator)
	}
}
