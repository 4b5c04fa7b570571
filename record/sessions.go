package record

import (
	"container/list"
	"time"
)

// Link is where a request belongs: its session, and the earlier request it continues
// (trace parents, with gap_kind).
type Link struct {
	Session int64
	Parent  int64  // the request it continues; -1 none
	GapKind string // "tool" (a tool result follows the parent's answer), "user", "" with no parent
}

// Sessions links requests into sessions and to the requests they continue. Its memory is
// bounded: it keeps at most max entries of each sort (ended requests, session keys,
// requests in flight), oldest out, and forgets ended requests and keys not seen for the
// idle time (requests in flight only by the bound: a call may stream for longer).
// Not safe for concurrent use: the recorder calls it from one goroutine, Link in arrival
// order and Ended in end order, Link for a request after every request that ended before
// it arrived has been Ended.
//
// A request's session is the session of its header key when it has one (headerKey, the
// salted value of the recorder's session header), else of its user (UserKey), else the
// session of the request it continues, else a new session of its own. A session's id is
// the id of its first request: ids, never the hash of a user or a header, go in the trace.
// A key not seen for the idle time starts a new session.
//
// A request continues A, an ended request of its session (any session when it has no
// key), that ended before it arrived, when
//   - its PrevKey is A's response id's key (the Responses API's previous_response_id), or
//   - it has no PrevKey, A's messages are its first k messages (its Msgs[k-1] is A's last
//     Msgs) and its message k is an answer (role 'a'): A's answer, sent back as history.
//     Of several such A, the longest (the latest call of an agent's loop), then the
//     latest to end (two identical conversations: the newer).
//
// The gap is "tool" when a message after A's answer is a tool result, else "user". Two
// requests that share a system prompt, or any leading messages, but not an answer, are
// not linked: the answer's role is required, and an answer is the model's, sent back.
type Sessions struct {
	idle int64 // ns; 0: no limit by time
	max  int
	now  int64 // the latest time seen

	keys    map[sessionKey]*list.Element // of *keyEntry
	keyLRU  list.List                    // of *keyEntry, least recently seen first
	pending map[int64]*list.Element      // linked, not ended: of *pendingEntry
	pendLRU list.List                    // of *pendingEntry, oldest first
	done    list.List                    // of *doneEntry, in end order
	byLast  map[uint64][]*doneEntry      // by their last Msgs, oldest first
	byResp  map[uint64]*doneEntry        // by their response key
}

type sessionKey struct {
	header bool // a header's key, else a user's
	key    uint64
}

type keyEntry struct {
	key     sessionKey
	session int64
	seen    int64
}

type pendingEntry struct {
	id, session, arrival int64
	key                  sessionKey // zero: none
}

type doneEntry struct {
	id, session, end int64
	n                int    // messages
	last, resp       uint64 // its last Msgs; its response's key
}

// maxPerMessages bounds the ended requests kept under one message list: identical
// conversations (many users' first "hi" under one system prompt) would otherwise grow
// one entry without bound; a continuation links to the latest anyway.
const maxPerMessages = 8

// NewSessions returns Sessions that forget after idle (0: never by time) and keep at
// most n entries of each sort (at least 1).
func NewSessions(idle time.Duration, n int) *Sessions {
	return &Sessions{
		idle: int64(max(idle, 0)), max: max(n, 1),
		keys: map[sessionKey]*list.Element{}, pending: map[int64]*list.Element{},
		byLast: map[uint64][]*doneEntry{}, byResp: map[uint64]*doneEntry{},
	}
}

// Link returns the session of request id, arrived at arrivalNS, and the request it
// continues, and remembers it until Ended. headerKey is the salted value of the session
// header (Parser.Key), 0 when the request has none.
func (s *Sessions) Link(id, arrivalNS int64, r *Request, headerKey uint64) Link {
	s.advance(arrivalNS)
	var key sessionKey
	switch {
	case headerKey != 0:
		key = sessionKey{header: true, key: headerKey}
	case r.UserKey != 0:
		key = sessionKey{key: r.UserKey}
	}
	session, want := id, int64(-1)
	if key.key != 0 {
		session = s.keySession(key, id, arrivalNS)
		want = session
	}
	parent, gap := s.parent(r, arrivalNS, want)
	l := Link{Session: session, Parent: -1}
	if parent != nil {
		l = Link{Session: parent.session, Parent: parent.id, GapKind: gap}
	}
	if old, ok := s.pending[id]; ok {
		s.pendLRU.Remove(old)
	}
	s.pending[id] = s.pendLRU.PushBack(&pendingEntry{id: id, session: l.Session, arrival: arrivalNS, key: key})
	for s.pendLRU.Len() > s.max {
		delete(s.pending, s.pendLRU.Remove(s.pendLRU.Front()).(*pendingEntry).id)
	}
	return l
}

// keySession returns the session of key, a new one (id) when the key is not known.
func (s *Sessions) keySession(key sessionKey, id, t int64) int64 {
	if e, ok := s.keys[key]; ok {
		k := e.Value.(*keyEntry)
		k.seen = max(k.seen, t)
		s.keyLRU.MoveToBack(e)
		return k.session
	}
	s.keys[key] = s.keyLRU.PushBack(&keyEntry{key: key, session: id, seen: t})
	for s.keyLRU.Len() > s.max {
		delete(s.keys, s.keyLRU.Remove(s.keyLRU.Front()).(*keyEntry).key)
	}
	return id
}

// parent finds the request r continues among those of session want (-1: any) that
// ended by arrival, and the kind of the gap.
func (s *Sessions) parent(r *Request, arrival, want int64) (*doneEntry, string) {
	ok := func(e *doneEntry) bool { return e.end <= arrival && (want < 0 || e.session == want) }
	if r.PrevKey != 0 {
		// Its input holds only what follows the earlier response: its messages cannot
		// match any request's whole list.
		if e := s.byResp[r.PrevKey]; e != nil && ok(e) {
			return e, gapKind(r.Roles)
		}
		return nil, ""
	}
	for k := len(r.Msgs) - 1; k >= 1; k-- {
		if r.Roles[k] != 'a' {
			continue
		}
		cands := s.byLast[r.Msgs[k-1]]
		for i := len(cands) - 1; i >= 0; i-- {
			if e := cands[i]; e.n == k && ok(e) {
				return e, gapKind(r.Roles[k+1:])
			}
		}
	}
	return nil, ""
}

// gapKind is "tool" when roles, the messages after the parent's answer, hold a tool
// result, else "user".
func gapKind(roles []byte) string {
	for _, r := range roles {
		if r == 't' {
			return "tool"
		}
	}
	return "user"
}

// Ended records that request id, linked before, ended at endNS; respKey is the salted
// id of its response (Parser.Key of the Responses API's response id), 0 when none. A
// request Link never saw, or has forgotten, is not remembered.
func (s *Sessions) Ended(id, endNS int64, r *Request, respKey uint64) {
	s.advance(endNS)
	pe, ok := s.pending[id]
	if !ok {
		return
	}
	p := s.pendLRU.Remove(pe).(*pendingEntry)
	delete(s.pending, id)
	if p.key.key != 0 {
		s.keySession(p.key, p.session, endNS) // a long call keeps its key alive
	}
	e := &doneEntry{id: id, session: p.session, end: endNS, n: len(r.Msgs), resp: respKey}
	if e.n > 0 {
		e.last = r.Msgs[e.n-1]
		c := s.byLast[e.last]
		if len(c) == maxPerMessages {
			c = c[:copy(c, c[1:])]
		}
		s.byLast[e.last] = append(c, e)
	}
	if respKey != 0 {
		s.byResp[respKey] = e
	}
	s.done.PushBack(e)
	for s.done.Len() > s.max {
		s.forget(s.done.Front())
	}
}

// advance moves the clock to t and forgets what has not been seen for the idle time.
func (s *Sessions) advance(t int64) {
	s.now = max(s.now, t)
	if s.idle == 0 {
		return
	}
	old := s.now - s.idle
	for e := s.done.Front(); e != nil && e.Value.(*doneEntry).end < old; e = s.done.Front() {
		s.forget(e)
	}
	for e := s.keyLRU.Front(); e != nil && e.Value.(*keyEntry).seen < old; e = s.keyLRU.Front() {
		delete(s.keys, s.keyLRU.Remove(e).(*keyEntry).key)
	}
}

// forget removes an ended request.
func (s *Sessions) forget(le *list.Element) {
	e := s.done.Remove(le).(*doneEntry)
	if c := s.byLast[e.last]; e.n > 0 {
		for i, x := range c {
			if x == e {
				c = append(c[:i], c[i+1:]...)
				break
			}
		}
		if len(c) == 0 {
			delete(s.byLast, e.last)
		} else {
			s.byLast[e.last] = c
		}
	}
	if e.resp != 0 && s.byResp[e.resp] == e {
		delete(s.byResp, e.resp)
	}
}

// sizes returns the entries held of each sort (for tests).
func (s *Sessions) sizes() (done, keys, pending, byLast, byResp int) {
	return s.done.Len(), s.keyLRU.Len(), s.pendLRU.Len(), len(s.byLast), len(s.byResp)
}
