package trace

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/duckdbtest"
)

// agentRequests is a small agent session: a root, two calls forked from it after a tool
// batch, a join of both after the user answered, and a plain row without a session.
func agentRequests() []Request {
	call := func(f func(c *Call)) *Call {
		c := NewCall()
		f(c)
		return c
	}
	return []Request{
		{ID: 10, Arrival: 0, PromptTokens: 20000, OutputTokens: 300, SessionID: 7, HasSession: true,
			Call: call(func(c *Call) { c.Duration, c.CachedTokens, c.ReasoningTokens = 4*time.Second, 0, 120 })},
		{ID: 11, Arrival: 6 * time.Second, PromptTokens: 20500, OutputTokens: 50, SessionID: 7, HasSession: true,
			Call: call(func(c *Call) {
				c.Parents, c.Gap, c.GapKind, c.Duration, c.CachedTokens = []int64{10}, 2*time.Second, GapTool, time.Second, 20224
			})},
		{ID: 12, Arrival: 6 * time.Second, PromptTokens: 9000, OutputTokens: 80, SessionID: 7, HasSession: true,
			Call: call(func(c *Call) { c.Parents, c.Gap, c.GapKind, c.PrefixTokens = []int64{10}, 2*time.Second, GapTool, 8000 })},
		{ID: 13, Arrival: 7 * time.Second, PromptTokens: 1, OutputTokens: 1},
		{ID: 14, Arrival: 40 * time.Second, PromptTokens: 21000, OutputTokens: 10, SessionID: 7, HasSession: true,
			Call: call(func(c *Call) { c.Parents, c.Gap, c.GapKind = []int64{11, 12}, 30*time.Second, GapUser })},
		{ID: 15, Arrival: 41 * time.Second, PromptTokens: 100, OutputTokens: 10, Call: call(func(c *Call) { c.CachedTokens = 64 })},
	}
}

func TestCallRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.parquet")
	want := agentRequests()
	writeFile(t, path, Meta{Source: "test"}, want)
	got, _ := readAll(t, path)
	if !reflect.DeepEqual(got, want) {
		for i := range got {
			t.Errorf("row %d: got %+v call %+v\nwant %+v call %+v", i, got[i], got[i].Call, want[i], want[i].Call)
		}
	}
	d := NewDAGCheck(path)
	for i := range got {
		if err := d.Add(&got[i]); err != nil {
			t.Fatal(err)
		}
	}

	// DuckDB reads the columns as a notebook would.
	rows := duckdbtest.Query(t, "SELECT request_id AS id, len(parents) AS np, gap_ns AS g, gap_kind AS k, duration_ns AS d, "+
		"prefix_tokens AS p, cached_tokens AS c, reasoning_tokens AS r FROM read_parquet('"+path+"') WHERE request_id IN (10, 14)")
	if len(rows) != 2 {
		t.Fatalf("duckdb rows %v", rows)
	}
	if rows[0]["np"] != nil || duckNum(t, rows[0]["d"]) != 4e9 || duckNum(t, rows[0]["r"]) != 120 || rows[0]["g"] != nil {
		t.Errorf("duckdb row of the root: %v", rows[0])
	}
	if duckNum(t, rows[1]["np"]) != 2 || duckNum(t, rows[1]["g"]) != 30e9 || rows[1]["k"] != GapUser || rows[1]["p"] != nil {
		t.Errorf("duckdb row of the join: %v", rows[1])
	}
}

func TestCallRejects(t *testing.T) {
	base := func() Request {
		c := NewCall()
		c.Parents = []int64{1}
		return Request{ID: 2, Arrival: time.Second, PromptTokens: 100, OutputTokens: 10, SessionID: 1, HasSession: true, Call: c}
	}
	cases := []struct {
		want string
		edit func(r *Request)
	}{
		{"parents: a call with parents needs a session_id", func(r *Request) { r.HasSession = false }},
		{"parents: names the call itself", func(r *Request) { r.Call.Parents = []int64{2} }},
		{"parents: request_id 1 named twice", func(r *Request) { r.Call.Parents = []int64{1, 1} }},
		{"gap_ns: -5 is negative", func(r *Request) { r.Call.Gap = -5 }},
		{"gap_ns: set on a call without parents", func(r *Request) { r.Call.Parents, r.Call.Gap = nil, 0 }},
		{`gap_kind: "lunch", want tool or user`, func(r *Request) { r.Call.GapKind = "lunch" }},
		{"duration_ns: -2 is negative", func(r *Request) { r.Call.Duration = -2 }},
		{"prefix_tokens: 101 not in [0, prompt_tokens 100]", func(r *Request) { r.Call.PrefixTokens = 101 }},
		{"prefix_tokens: set on a call without parents", func(r *Request) { r.Call.Parents, r.Call.PrefixTokens = nil, 5 }},
		{"cached_tokens: 101 not in [0, prompt_tokens 100]", func(r *Request) { r.Call.CachedTokens = 101 }},
		{"reasoning_tokens: 11 not in [0, output_tokens 10]", func(r *Request) { r.Call.ReasoningTokens = 11 }},
	}
	ok := base()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		r := base()
		c.edit(&r)
		w := NewWriter(new(strings.Builder), Meta{})
		if err := w.Write(r); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "row 0 (request_id 2)") {
			t.Errorf("Write: %v, want an error naming the row and %q", err, c.want)
		}
	}
}

func TestDAGCheckRejects(t *testing.T) {
	cases := []struct {
		name, want string
		edit       func(rs []Request) []Request
	}{
		{"missing parent", "row 1 (request_id 11): parents: request_id 99 is not an earlier row", func(rs []Request) []Request {
			rs[1].Call.Parents = []int64{99}
			return rs
		}},
		{"parent later in the file (a cycle cannot be written otherwise)", "row 1 (request_id 11): parents: request_id 12 is not an earlier row", func(rs []Request) []Request {
			rs[1].Call.Parents = []int64{12}
			return rs
		}},
		{"parent in another session", "row 2 (request_id 12): parents: request_id 10 is in session 7, not this call's session 8", func(rs []Request) []Request {
			rs[2].SessionID = 8
			return rs
		}},
		{"duplicate id", "row 4: request_id 11: not unique", func(rs []Request) []Request {
			rs[4].ID = 11
			return rs
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := c.edit(agentRequests())
			d := NewDAGCheck("x.parquet")
			var err error
			for i := range rs {
				if err = d.Add(&rs[i]); err != nil {
					break
				}
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "x.parquet") {
				t.Fatalf("%v, want %q", err, c.want)
			}
		})
	}
}
