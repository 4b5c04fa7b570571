package trace

import (
	"math"
	"testing"
	"time"
)

func TestParseShard(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Shard
		ok   bool
	}{
		{"0/1", Shard{0, 1}, true},
		{"3/4", Shard{3, 4}, true},
		{"4/4", Shard{}, false},
		{"-1/4", Shard{}, false},
		{"1/0", Shard{}, false},
		{"1", Shard{}, false},
		{"1/4x", Shard{}, false},
		{"a/b", Shard{}, false},
	} {
		got, err := ParseShard(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseShard(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestShardPartition checks that the shards of a trace are a partition: every request in
// exactly one shard, sessions never split, and the shares balanced within binomial noise.
func TestShardPartition(t *testing.T) {
	const n, count = 30000, 3
	var reqs []Request
	for i := 0; i < n; i++ {
		r := Request{ID: int64(i), Arrival: time.Duration(i) * time.Millisecond, PromptTokens: 1, OutputTokens: 1}
		if i%2 == 0 { // half the requests in 2-turn sessions with even ids: structured keys
			r.SessionID, r.HasSession = int64(i/4)*2, true
		}
		reqs = append(reqs, r)
	}
	owner := make(map[int64]int, n)
	sessionShard := map[int64]int{}
	for idx := 0; idx < count; idx++ {
		src := NewShardSource(NewSliceSource(reqs), Shard{idx, count})
		got := 0
		var last time.Duration
		for src.Next() {
			r := src.Request()
			if r.Arrival < last {
				t.Fatalf("shard %d: arrivals out of order", idx)
			}
			last = r.Arrival
			if prev, dup := owner[r.ID]; dup {
				t.Fatalf("request %d in shards %d and %d", r.ID, prev, idx)
			}
			owner[r.ID] = idx
			if r.HasSession {
				if s, ok := sessionShard[r.SessionID]; ok && s != idx {
					t.Fatalf("session %d split across shards %d and %d", r.SessionID, s, idx)
				}
				sessionShard[r.SessionID] = idx
			}
			got++
		}
		// Keys: n/2 plain requests + n/4 sessions; the share of requests is binomial-ish.
		// 6 standard deviations of a binomial share (sessions count twice) bounds chance.
		want := float64(n) / count
		sd := math.Sqrt(float64(n)*(1.0/count)*(1-1.0/count)) * math.Sqrt(2)
		if math.Abs(float64(got)-want) > 6*sd {
			t.Errorf("shard %d has %d requests, want %.0f ± %.0f", idx, got, want, 6*sd)
		}
	}
	if len(owner) != n {
		t.Errorf("the shards hold %d requests, the trace %d", len(owner), n)
	}
	// One shard of one owns everything.
	src := NewShardSource(NewSliceSource(reqs), Shard{0, 1})
	k := 0
	for src.Next() {
		k++
	}
	if k != n {
		t.Errorf("shard 0/1 has %d of %d requests", k, n)
	}
}
