package replay

import (
	"context"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
)

// TestSessionIDRecorded: every row of a trace with sessions carries its session_id in the
// results file, whether sent or dropped, and a row without a session reads null.
func TestSessionIDRecorded(t *testing.T) {
	base := startServer(t, &vllmServer{ttft: 200 * time.Millisecond}) // the first request holds the one slot: the others are dropped
	c := newTestClient(t, base, nil)
	reqs := uniformTrace(3, 5*time.Millisecond, 4, 2)
	reqs[0].SessionID, reqs[0].HasSession = 1<<40+3, true
	reqs[1].SessionID, reqs[1].HasSession = 0, true // session 0 is a session
	want := map[int64]int64{reqs[0].ID: 1<<40 + 3, reqs[1].ID: 0, reqs[2].ID: results.Null}
	_, res, _ := runTrace(t, context.Background(), c, reqs, func(o *Options) { o.MaxInflight = 1 })
	if len(res) != len(reqs) {
		t.Fatalf("%d results, want %d", len(res), len(reqs))
	}
	dropped := 0
	for _, r := range res {
		if r.SessionID != want[r.RequestID] {
			t.Errorf("request %d (%s): session_id %d, want %d", r.RequestID, r.Status, r.SessionID, want[r.RequestID])
		}
		if r.Status == results.StatusDropped {
			dropped++
		}
	}
	if dropped == 0 {
		t.Errorf("no request dropped: the dropped path was not exercised (%v)", byStatus(res))
	}
}
