package record

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// call is one request of a recorded conversation: its id, when it arrived and ended
// (seconds), where it went, its body, its session header's value and its response id.
type call struct {
	id             int64
	arrive, end    int64
	path, body     string
	header, respID string
}

// record links calls as a recorder does, in time order, ends before arrivals at the
// same time, and returns each call's Link by id.
func record(t *testing.T, p *Parser, s *Sessions, calls []call) map[int64]Link {
	t.Helper()
	type event struct {
		at  int64
		end bool
		c   *call
		r   *Request
	}
	var evs []event
	for i := range calls {
		c := &calls[i]
		r := mustParse(t, p, c.path, c.body)
		evs = append(evs, event{c.arrive, false, c, &r}, event{c.end, true, c, &r})
	}
	slices.SortStableFunc(evs, func(a, b event) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		if a.end != b.end {
			if a.end {
				return -1
			}
			return 1
		}
		return 0
	})
	links := map[int64]Link{}
	for _, e := range evs {
		sec := int64(time.Second)
		if e.end {
			var resp uint64
			if e.c.respID != "" {
				resp = p.Key(e.c.respID)
			}
			s.Ended(e.c.id, e.at*sec, e.r, resp)
			continue
		}
		var hk uint64
		if e.c.header != "" {
			hk = p.Key(e.c.header)
		}
		links[e.c.id] = s.Link(e.c.id, e.at*sec, e.r, hk)
	}
	return links
}

func checkLinks(t *testing.T, got map[int64]Link, want map[int64]Link) {
	t.Helper()
	for id, w := range want {
		if g := got[id]; g != w {
			t.Errorf("request %d: %+v, want %+v", id, g, w)
		}
	}
}

const chatPath = "/v1/chat/completions"

// TestSessionsChat: a conversation's turns, each resending the earlier ones with the
// answers, continue each other; another conversation under the same system prompt, and
// one that shares its first user message but not an answer, are not linked.
func TestSessionsChat(t *testing.T) {
	p := testParser(t, 16, 0)
	sys := "You are a helpful assistant."
	calls := []call{
		{id: 10, arrive: 0, end: 2, path: chatPath, body: chatBody("s", sys, "u", "hi")},
		{id: 11, arrive: 5, end: 7, path: chatPath, body: chatBody("s", sys, "u", "hi", "a", "hello", "u", "a joke")},
		{id: 12, arrive: 6, end: 8, path: chatPath, body: chatBody("s", sys, "u", "what time is it")},
		{id: 13, arrive: 9, end: 10, path: chatPath, body: chatBody("s", sys, "u", "hi", "a", "hello", "u", "a joke", "a", "ha", "u", "more")},
		// Shares 10's messages but not 11's answer: continues 10, a fork of the session.
		{id: 14, arrive: 11, end: 12, path: chatPath, body: chatBody("s", sys, "u", "hi", "a", "hey there", "u", "other")},
		// Shares the system prompt and a user message, no answer: a session of its own.
		{id: 15, arrive: 13, end: 14, path: chatPath, body: chatBody("s", sys, "u", "what time is it", "u", "please")},
		// The same conversation re-serialised by another client, keys reordered.
		{id: 16, arrive: 15, end: 16, path: chatPath, body: strings.NewReplacer(`"role":"system","content":`, `"content":`).Replace(
			`{"messages":[{"content":"You are a helpful assistant.","role":"system"},{"content":"hi","role":"user"},{"role":"assistant","content":[{"type":"text","text":"hello"}]},{"content":"a joke","role":"user"},{"content":"ha","role":"assistant"},{"role":"user","content":"more"},{"role":"assistant","content":"x"},{"role":"user","content":"y"}],"model":"m"}`)},
	}
	checkLinks(t, record(t, p, NewSessions(time.Hour, 100), calls), map[int64]Link{
		10: {Session: 10, Parent: -1},
		11: {Session: 10, Parent: 10, GapKind: "user"},
		12: {Session: 12, Parent: -1},
		13: {Session: 10, Parent: 11, GapKind: "user"},
		14: {Session: 10, Parent: 10, GapKind: "user"},
		15: {Session: 15, Parent: -1},
		16: {Session: 10, Parent: 13, GapKind: "user"},
	})
}

// TestSessionsToolLoop: an agent's calls in Anthropic's Messages API, each sending its
// tool results back: the gaps are tools'; two calls continuing one (parallel subagents)
// both name it.
func TestSessionsToolLoop(t *testing.T) {
	p := testParser(t, 16, 0)
	use := func(id string) string {
		return fmt.Sprintf(`{"role":"assistant","content":[{"type":"text","text":"checking"},{"type":"tool_use","id":%q,"name":"ls","input":{"dir":"/"}}]}`, id)
	}
	res := func(id string) string {
		return fmt.Sprintf(`{"role":"user","content":[{"type":"tool_result","tool_use_id":%q,"content":"a b c"}]}`, id)
	}
	msgs := func(m ...string) string {
		return `{"model":"c","max_tokens":100,"system":"agent","messages":[` + strings.Join(m, ",") + `]}`
	}
	u := `{"role":"user","content":"list files"}`
	calls := []call{
		{id: 1, arrive: 0, end: 1, path: "/v1/messages", body: msgs(u)},
		{id: 2, arrive: 2, end: 3, path: "/v1/messages", body: msgs(u, use("t1"), res("t1"))},
		{id: 3, arrive: 4, end: 5, path: "/v1/messages", body: msgs(u, use("t1"), res("t1"), use("t2"), res("t2"))},
		{id: 4, arrive: 4, end: 6, path: "/v1/messages", body: msgs(u, use("t1"), res("t1"), use("t3"), res("t3"))},
		{id: 5, arrive: 7, end: 8, path: "/v1/messages", body: msgs(u, use("t1"), res("t1"), use("t2"), res("t2"), `{"role":"assistant","content":"done"}`, `{"role":"user","content":"thanks"}`)},
	}
	checkLinks(t, record(t, p, NewSessions(time.Hour, 100), calls), map[int64]Link{
		1: {Session: 1, Parent: -1},
		2: {Session: 1, Parent: 1, GapKind: "tool"},
		3: {Session: 1, Parent: 2, GapKind: "tool"},
		4: {Session: 1, Parent: 2, GapKind: "tool"},
		5: {Session: 1, Parent: 3, GapKind: "user"},
	})
}

// TestSessionsResponses: the Responses API with previous_response_id (the input holds
// only what follows), and without (the input resends the earlier output items).
func TestSessionsResponses(t *testing.T) {
	p := testParser(t, 16, 0)
	const path = "/v1/responses"
	fc := `{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}`
	out := `{"type":"function_call_output","call_id":"c1","output":"42"}`
	calls := []call{
		{id: 1, arrive: 0, end: 1, path: path, body: `{"input":"what is f?"}`, respID: "resp_a"},
		{id: 2, arrive: 2, end: 3, path: path, body: `{"previous_response_id":"resp_a","input":[` + out + `]}`, respID: "resp_b"},
		{id: 3, arrive: 4, end: 5, path: path, body: `{"previous_response_id":"resp_b","input":"thanks"}`, respID: "resp_c"},
		// An id no request answered with: a session of its own, even when its input
		// would continue another request by its messages (5's, ended by then): what the
		// input holds follows the earlier response's context, which it does not carry.
		{id: 4, arrive: 9, end: 10, path: path, body: `{"previous_response_id":"resp_zz","input":[{"role":"user","content":"what is g?"},` + fc + `,` + out + `]}`},
		// Without previous_response_id: the whole conversation, output items included.
		{id: 5, arrive: 6, end: 8, path: path, body: `{"input":[{"role":"user","content":"what is g?"}]}`},
		{id: 6, arrive: 10, end: 11, path: path, body: `{"input":[{"role":"user","content":"what is g?"},{"type":"reasoning","id":"rs_1","summary":[]},` + fc + `,` + out + `]}`},
		{id: 7, arrive: 12, end: 13, path: path, body: `{"input":[{"role":"user","content":"what is g?"},{"type":"reasoning","id":"rs_1","summary":[]},` + fc + `,` + out +
			`,{"type":"message","role":"assistant","content":[{"type":"output_text","text":"g is 42"}]},{"role":"user","content":"ok"}]}`},
	}
	checkLinks(t, record(t, p, NewSessions(time.Hour, 100), calls), map[int64]Link{
		1: {Session: 1, Parent: -1},
		2: {Session: 1, Parent: 1, GapKind: "tool"},
		3: {Session: 1, Parent: 2, GapKind: "user"},
		4: {Session: 4, Parent: -1},
		5: {Session: 5, Parent: -1},
		6: {Session: 5, Parent: 5, GapKind: "tool"},
		7: {Session: 5, Parent: 6, GapKind: "user"},
	})
}

// TestSessionsKeys: a header key or a user makes the session; a request continued
// without one keeps its parent's; a keyed request continues only its own session's; a
// request continues only one that ended before it arrived.
func TestSessionsKeys(t *testing.T) {
	p := testParser(t, 16, 0)
	withUser := func(user string, rc ...string) string {
		return strings.Replace(chatBody(rc...), `{"messages"`, fmt.Sprintf(`{"user":%q,"messages"`, user), 1)
	}
	calls := []call{
		{id: 1, arrive: 0, end: 1, path: chatPath, body: chatBody("u", "a"), header: "H"},
		{id: 2, arrive: 2, end: 3, path: chatPath, body: chatBody("u", "unrelated"), header: "H"},
		{id: 3, arrive: 4, end: 5, path: chatPath, body: chatBody("u", "a", "a", "b", "u", "c")},
		{id: 4, arrive: 6, end: 7, path: chatPath, body: chatBody("u", "a", "a", "b", "u", "c"), header: "K"},
		{id: 5, arrive: 8, end: 9, path: chatPath, body: withUser("alice", "u", "p")},
		{id: 6, arrive: 10, end: 11, path: chatPath, body: withUser("alice", "u", "q")},
		{id: 7, arrive: 12, end: 13, path: chatPath, body: withUser("bob", "u", "p", "a", "r", "u", "s")},
		{id: 8, arrive: 14, end: 30, path: chatPath, body: chatBody("u", "slow")},
		{id: 9, arrive: 20, end: 21, path: chatPath, body: chatBody("u", "slow", "a", "ans", "u", "early")},
		// The header wins over the user.
		{id: 10, arrive: 22, end: 23, path: chatPath, body: withUser("alice", "u", "z"), header: "H"},
	}
	checkLinks(t, record(t, p, NewSessions(time.Hour, 100), calls), map[int64]Link{
		1:  {Session: 1, Parent: -1},
		2:  {Session: 1, Parent: -1},
		3:  {Session: 1, Parent: 1, GapKind: "user"},
		4:  {Session: 4, Parent: -1},
		5:  {Session: 5, Parent: -1},
		6:  {Session: 5, Parent: -1},
		7:  {Session: 7, Parent: -1},
		8:  {Session: 8, Parent: -1},
		9:  {Session: 9, Parent: -1},
		10: {Session: 1, Parent: -1},
	})
}

// TestSessionsLateEnd: a request continues only one that ended before it arrived, even
// when the recorder reports the end before the arrival.
func TestSessionsLateEnd(t *testing.T) {
	p := testParser(t, 16, 0)
	s := NewSessions(time.Hour, 10)
	a := mustParse(t, p, chatPath, chatBody("u", "x"))
	b := mustParse(t, p, chatPath, chatBody("u", "x", "a", "y", "u", "z"))
	s.Link(1, 0, &a, 0)
	s.Ended(1, 10, &a, 0)
	if l := s.Link(2, 9, &b, 0); l.Parent != -1 {
		t.Errorf("continued a request that ended after it arrived: %+v", l)
	}
	if l := s.Link(3, 10, &b, 0); l.Parent != 1 {
		t.Errorf("a request arriving as its parent ended: %+v, want parent 1", l)
	}
}

// TestSessionsForget: what was not seen for the idle time, and what passes the bound on
// entries, is forgotten: memory stays bounded however long the recording.
func TestSessionsForget(t *testing.T) {
	p := testParser(t, 16, 0)
	idle := 10 * time.Second
	s := NewSessions(idle, 100)
	a := mustParse(t, p, chatPath, chatBody("u", "x"))
	b := mustParse(t, p, chatPath, chatBody("u", "x", "a", "y", "u", "z"))
	sec := int64(time.Second)
	s.Link(1, 0, &a, p.Key("H"))
	s.Ended(1, 1*sec, &a, p.Key("resp"))
	if l := s.Link(2, 11*sec, &b, 0); l.Parent != 1 {
		t.Fatalf("within the idle time: %+v, want parent 1", l)
	}
	s.Ended(2, 12*sec, &b, 0)
	// 1 ended at 1 s, H was last seen then: at 12 s both are gone.
	if done, keys, _, byLast, byResp := s.sizes(); done != 1 || keys != 0 || byLast != 1 || byResp != 0 {
		t.Errorf("after the idle time: %d ended, %d keys, %d lists, %d responses held; want 1, 0, 1, 0", done, keys, byLast, byResp)
	}
	if l := s.Link(3, 13*sec, &b, p.Key("H")); l.Session != 3 || l.Parent != 1-2 {
		t.Errorf("a request continuing a forgotten one, with a forgotten key: %+v, want a session of its own", l)
	}
	// A call longer than the idle time keeps its key: it was seen at its end.
	s = NewSessions(idle, 100)
	s.Link(1, 0, &a, p.Key("L"))
	s.Ended(1, 30*sec, &a, 0)
	if l := s.Link(2, 35*sec, &a, p.Key("L")); l.Session != 1 {
		t.Errorf("after a long call: %+v, want its session, 1", l)
	}
	// The bound: 1000 conversations, one call each, never idle.
	s = NewSessions(0, 50)
	for i := range int64(1000) {
		r := mustParse(t, p, chatPath, chatBody("u", fmt.Sprint(i)))
		s.Link(i, i*sec, &r, p.Key(fmt.Sprint(i)))
		s.Ended(i, i*sec, &r, p.Key(fmt.Sprint("resp", i)))
	}
	// and requests that never end
	for i := range int64(1000) {
		s.Link(2000+i, 2000*sec, &a, 0)
	}
	if done, keys, pending, byLast, byResp := s.sizes(); done != 50 || keys != 50 || pending != 50 || byLast != 50 || byResp != 50 {
		t.Errorf("bound 50: %d ended, %d keys, %d in flight, %d lists, %d responses held", done, keys, pending, byLast, byResp)
	}
	// The latest are the ones kept.
	r := mustParse(t, p, chatPath, chatBody("u", "999", "a", "!", "u", "?"))
	if l := s.Link(5000, 3000*sec, &r, 0); l.Parent != 999 {
		t.Errorf("the latest request was forgotten: %+v", l)
	}
	// Identical conversations under one message list: at most maxPerMessages kept.
	s = NewSessions(0, 1000)
	for i := range int64(100) {
		s.Link(i, i*sec, &a, 0)
		s.Ended(i, i*sec, &a, 0)
	}
	if n := len(s.byLast[a.Msgs[0]]); n != maxPerMessages {
		t.Errorf("100 identical conversations: %d kept under their list, want %d", n, maxPerMessages)
	}
	if l := s.Link(200, 200*sec, &b, 0); l.Parent != 99 {
		t.Errorf("of identical conversations, continued %+v, want the latest, 99", l)
	}
}

// TestSessionsEndedUnknown: an end Link never saw is not remembered.
func TestSessionsEndedUnknown(t *testing.T) {
	p := testParser(t, 16, 0)
	s := NewSessions(time.Hour, 10)
	a := mustParse(t, p, chatPath, chatBody("u", "x"))
	s.Ended(1, 0, &a, 0)
	if done, _, _, _, _ := s.sizes(); done != 0 {
		t.Errorf("an unknown request's end is remembered")
	}
}
