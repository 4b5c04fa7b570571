package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"github.com/llmreplay/llmreplay/wire"

	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
)

func TestRunOpenLoopRecordsEveryChunk(t *testing.T) {
	srv := &vllmtest.Server{TTFT: 20 * time.Millisecond, ITL: 2 * time.Millisecond}
	base := vllmtest.Start(t, srv)
	c := newTestClient(t, base, nil)
	reqs := uniformTrace(20, 10*time.Millisecond, 7, 5)
	sum, res, meta := runTrace(t, context.Background(), c, reqs, func(o *Options) {
		o.Speedup = 2
		o.Meta.Endpoint = wire.SafeEndpoint(base)
	})
	if len(res) != 20 {
		t.Fatalf("got %d records, want 20", len(res))
	}
	seen := map[int64]bool{}
	for _, r := range res {
		seen[r.RequestID] = true
		if r.Status != results.StatusOK {
			t.Errorf("request %d: status %s (%s)", r.RequestID, r.Status, r.Error)
			continue
		}
		want := int64(r.RequestID-100) * int64(5*time.Millisecond) // arrival / speedup 2
		if r.ScheduledNS != want {
			t.Errorf("request %d: scheduled_ns %d, want %d", r.RequestID, r.ScheduledNS, want)
		}
		if r.SentNS < r.ScheduledNS {
			t.Errorf("request %d: sent %d before due %d", r.RequestID, r.SentNS, r.ScheduledNS)
		}
		if len(r.ChunkNS) != 5 || len(r.ChunkTokens) != 5 {
			t.Errorf("request %d: %d chunk times, %d chunk token counts, want 5 and 5", r.RequestID, len(r.ChunkNS), len(r.ChunkTokens))
		}
		for i, n := range r.ChunkTokens {
			if n != 1 {
				t.Errorf("request %d: chunk %d has %d tokens, want 1", r.RequestID, i, n)
			}
		}
		if r.OutputTokens != 5 || r.OutputTokensSource != results.SourceUsage || r.PromptTokensServer != 7 {
			t.Errorf("request %d: output %d (%s), prompt_server %d; want 5 (usage), 7", r.RequestID, r.OutputTokens, r.OutputTokensSource, r.PromptTokensServer)
		}
		ttft, _ := r.TTFT()
		if ttft < 20 || ttft > 500 {
			t.Errorf("request %d: TTFT %.2f ms, want >= 20", r.RequestID, ttft)
		}
		if r.FirstTokenNS != r.SentNS+r.ChunkNS[0] || r.EndNS != r.SentNS+r.ChunkNS[4] {
			t.Errorf("request %d: first/end do not match chunk times", r.RequestID)
		}
	}
	if len(seen) != 20 {
		t.Errorf("%d distinct request ids, want 20", len(seen))
	}
	if sum.ByStatus[results.StatusOK] != 20 || sum.OutputTok != 100 {
		t.Errorf("summary: %+v", sum)
	}
	if meta.Mode != results.ModeOpen || meta.RunStartUnixNS == 0 || meta.RunID == "" || meta.ShardCount != 1 || meta.Endpoint != base.String() {
		t.Errorf("metadata: %+v", meta)
	}
}

func TestRunMetaHasEveryContractKey(t *testing.T) {
	js, err := json.Marshal(results.RunMeta{})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(js, &m)
	for _, k := range strings.Fields(`tool_version run_id mode endpoint api backend model simulated sim_profile
		trace_file trace_sha256 speedup rate concurrency shard_index shard_count run_start_unix_ns
		max_lateness_ms slo host flags`) {
		if _, ok := m[k]; !ok {
			t.Errorf("run metadata lacks key %q", k)
		}
	}
	if len(m) != 21 {
		t.Errorf("run metadata has %d keys, want 21: %s", len(m), js)
	}
}

func TestRunClosedLoopKeepsConcurrency(t *testing.T) {
	// The server holds the first requests until three are in flight: without that, a
	// loaded machine could finish each 8 ms request before the next worker's arrived.
	srv := &vllmtest.Server{TTFT: 5 * time.Millisecond, ITL: time.Millisecond, HoldFor: 3}
	c := newTestClient(t, vllmtest.Start(t, srv), nil)
	// Arrivals an hour apart: a closed loop ignores them.
	reqs := uniformTrace(12, time.Hour, 3, 3)
	_, res, meta := runTrace(t, context.Background(), c, reqs, func(o *Options) { o.Concurrency = 3; o.Speedup = 0 })
	if len(res) != 12 || byStatus(res)[results.StatusOK] != 12 {
		t.Fatalf("records %d, statuses %v", len(res), byStatus(res))
	}
	if got := srv.MaxSeen.Load(); got != 3 {
		t.Errorf("server saw %d concurrent requests, want 3", got)
	}
	if meta.Mode != results.ModeClosed {
		t.Errorf("mode %q, want closed", meta.Mode)
	}
}

// TestRunDropsWhenMaxInflightReached: with two requests held in flight, the four others
// are dropped at their due times. The server holds its answers until every request has
// been sent or dropped (a 300 ms TTFT did the holding before, which a dispatcher running
// late on a loaded machine could outlast, sending instead of dropping).
func TestRunDropsWhenMaxInflightReached(t *testing.T) {
	srv := &vllmtest.Server{TTFT: time.Millisecond, ITL: time.Millisecond, Release: make(chan struct{})}
	c := newTestClient(t, vllmtest.Start(t, srv), nil)
	reqs := uniformTrace(6, 10*time.Millisecond, 3, 2)
	prog := new(Progress)
	go func() {
		for t0 := time.Now(); prog.Sent.Load()+prog.Dropped.Load() < 6 && time.Since(t0) < 30*time.Second; {
			time.Sleep(time.Millisecond)
		}
		close(srv.Release)
	}()
	_, res, _ := runTrace(t, context.Background(), c, reqs, func(o *Options) { o.MaxInflight = 2; o.Progress = prog })
	st := byStatus(res)
	if len(res) != 6 || st[results.StatusOK] != 2 || st[results.StatusDropped] != 4 {
		t.Fatalf("records %d, statuses %v; want 2 ok, 4 dropped", len(res), st)
	}
	for _, r := range res {
		if r.Status == results.StatusDropped {
			if r.SentNS != results.Null || r.ScheduledNS != (r.RequestID-100)*int64(10*time.Millisecond) || !strings.Contains(r.Error, "max-inflight") {
				t.Errorf("dropped record %+v", r)
			}
		}
	}
}

func TestRunLimitWarmupDuration(t *testing.T) {
	srv := &vllmtest.Server{TTFT: time.Millisecond, ITL: time.Millisecond}
	c := newTestClient(t, vllmtest.Start(t, srv), nil)
	reqs := uniformTrace(50, 5*time.Millisecond, 3, 2)
	_, res, _ := runTrace(t, context.Background(), c, reqs, func(o *Options) { o.Warmup = 3; o.Limit = 10 })
	if len(res) != 10 || res[0].RequestID < 103 {
		t.Errorf("warmup 3 + limit 10: %d records, first id %d", len(res), res[0].RequestID)
	}
	if got := srv.Count.Load(); got != 13 {
		t.Errorf("server got %d requests, want 13", got)
	}
	_, res, _ = runTrace(t, context.Background(), c, reqs, func(o *Options) { o.Duration = 52 * time.Millisecond })
	if len(res) != 11 { // due at 0, 5, ..., 50 ms
		t.Errorf("duration 52ms over 5ms gaps: %d records, want 11", len(res))
	}
}

func TestRunGracefulStopCancelsAfterGrace(t *testing.T) {
	srv := &vllmtest.Server{TTFT: 10 * time.Millisecond, ITL: 50 * time.Millisecond}
	c := newTestClient(t, vllmtest.Start(t, srv), nil)
	reqs := uniformTrace(100, 20*time.Millisecond, 3, 100) // 5 s of output each
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(150*time.Millisecond, cancel)
	t0 := time.Now()
	_, res, _ := runTrace(t, ctx, c, reqs, func(o *Options) { o.Grace = 100 * time.Millisecond })
	if el := time.Since(t0); el > 3*time.Second {
		t.Errorf("stop took %v", el)
	}
	st := byStatus(res)
	if len(res) == 0 || len(res) > 20 || st[results.StatusCanceled] != len(res) {
		t.Fatalf("records %d, statuses %v: want only canceled", len(res), st)
	}
	for _, r := range res {
		if r.SentNS == results.Null || len(r.ChunkNS) == 0 || !strings.Contains(r.Error, "interrupted") {
			t.Errorf("canceled record lacks its partial stream: %+v", r)
		}
	}
}

func TestRunAbortCancelsAtOnce(t *testing.T) {
	srv := &vllmtest.Server{TTFT: 10 * time.Millisecond, ITL: 50 * time.Millisecond}
	c := newTestClient(t, vllmtest.Start(t, srv), nil)
	reqs := uniformTrace(100, 20*time.Millisecond, 3, 100)
	ctx, stop, abort := WithStop(context.Background())
	defer abort()
	time.AfterFunc(100*time.Millisecond, stop)
	time.AfterFunc(200*time.Millisecond, abort)
	t0 := time.Now()
	_, res, _ := runTrace(t, ctx, c, reqs, func(o *Options) { o.Grace = time.Minute })
	if el := time.Since(t0); el > 5*time.Second {
		t.Errorf("abort took %v", el)
	}
	if st := byStatus(res); len(res) == 0 || st[results.StatusCanceled] != len(res) {
		t.Errorf("statuses %v", st)
	}
}

func TestPrewarmOpensConnections(t *testing.T) {
	var models atomic.Int64
	srv := &vllmtest.Server{TTFT: time.Millisecond, ITL: time.Millisecond}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			models.Add(1)
			time.Sleep(20 * time.Millisecond) // hold each connection so all n are opened
		}
		srv.ServeHTTP(w, r)
	})
	c := newTestClient(t, vllmtest.Start(t, h), nil)
	if got := c.Prewarm(context.Background(), 8); got != 8 || models.Load() != 8 {
		t.Fatalf("Prewarm: %d ok, %d GETs; want 8, 8", got, models.Load())
	}
}
