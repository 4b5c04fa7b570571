package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"context"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
)

// The closed loop's timing contract (closed.go), under testing/synctest: every time below
// is exact.

// scheduledNS returns the records' scheduled_ns by request id.
func (sr syncRun) scheduledNS() map[int64]time.Duration {
	m := map[int64]time.Duration{}
	for _, r := range sr.res {
		m[r.RequestID] = time.Duration(r.ScheduledNS)
	}
	return m
}

func checkTimes(t *testing.T, what string, got, want map[int64]time.Duration) {
	t.Helper()
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			t.Errorf("request %d: %s %v (recorded %v), want %v", id, what, g, ok, w)
		}
	}
}

// With --ramp-up 1s and three workers, worker i starts at exactly floor(i*1s/3): its first
// request is due then and sent then; its second is due when its first ended.
func TestSynctestClosedLoopRampUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const third = time.Second / 3 // 333333333 ns
		sr := runSynctest(t, context.Background(), trace.NewSliceSource(dueAt(0, 0, 0, 0, 0, 0)),
			&fakeEndpoint{d: ten}, func(o *Options) { o.Concurrency, o.RampUp = 3, time.Second })
		starts := map[int64]time.Duration{1: 0, 2: third, 3: 2 * third}
		seconds := map[int64]time.Duration{4: ten, 5: ten + third, 6: ten + 2*third}
		sr.check(t, 2*ten+2*third, starts,
			map[int64]time.Duration{1: ten, 2: ten + third, 3: ten + 2*third, 4: 2 * ten, 5: 2*ten + third, 6: 2*ten + 2*third},
			map[int64]results.Status{1: results.StatusOK, 2: results.StatusOK, 3: results.StatusOK, 4: results.StatusOK, 5: results.StatusOK, 6: results.StatusOK})
		checkTimes(t, "scheduled", sr.scheduledNS(), starts)
		checkTimes(t, "scheduled", sr.scheduledNS(), seconds)
		if got := sr.sum.Run.RampUpNS; got != int64(time.Second) {
			t.Errorf("ramp_up_ns %d, want 1e9", got)
		}
		fw := sr.sum.FirstWave
		if fw == nil || fw.LastStartNS != int64(2*third) || fw.Requests != 3 || fw.SendNS != int64(2*third) || fw.Lateness.Max != 0 {
			t.Errorf("first wave %+v, want 3 requests up to 666.666666 ms, the last sent then, no lateness", fw)
		}
		if l := sr.sum.Lateness; l.N != 3 || l.Max != 0 {
			t.Errorf("steady-state lateness %+v, want 3 requests, none late", l)
		}
	})
}

// A stop during the ramp-up: the workers not yet started never send.
func TestSynctestClosedLoopStopDuringRampUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop, abort := WithStop(context.Background())
		defer abort()
		time.AfterFunc(1500*time.Millisecond, stop)
		sr := runSynctest(t, ctx, trace.NewSliceSource(dueAt(0, 0, 0, 0)),
			&fakeEndpoint{d: 100 * time.Millisecond}, func(o *Options) { o.Concurrency, o.RampUp = 4, 4*time.Second })
		// Worker 0 sends at 0 and loops every 100 ms until the stop; worker 1 starts at 1 s.
		sr.check(t, 1500*time.Millisecond,
			map[int64]time.Duration{1: 0, 2: 100 * time.Millisecond, 3: 200 * time.Millisecond, 4: 300 * time.Millisecond},
			map[int64]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 300 * time.Millisecond, 4: 400 * time.Millisecond},
			map[int64]results.Status{1: results.StatusOK, 2: results.StatusOK, 3: results.StatusOK, 4: results.StatusOK})
	})
}

// slowPrompter builds the prompts of requests after the first n in d of virtual time each:
// a client path too slow to keep the workers busy.
func slowPrompter(n int64, d time.Duration) Prompter {
	return PrompterFunc(func(dst []byte, r *trace.Request) ([]byte, error) {
		if r.ID > n {
			time.Sleep(d)
		}
		return wordPrompter(dst, r)
	})
}

// Two workers, requests served in 100 ms, prompts after the first two built in 80 ms each:
// the workers wait for the preparer, and each request is due when its worker became free
// (the end of its previous request), not when the body arrived. So the steady state is
// late by the preparer's delays and the run would be flagged client-limited, while the first
// wave, built before the clock started, is on time.
//
//	preparer: req 3 ready at 80 ms, 4 at 160, 5 at 240, 6 at 320
//	worker a: req 1 0-100, req 3 100-200 (due 100), req 5 240-340 (due 200)
//	worker b: req 2 0-100, req 4 160-260 (due 100), req 6 320-420 (due 260)
func TestSynctestClosedLoopDueIsWhenWorkerFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := time.Millisecond
		sr := runSynctest(t, context.Background(), trace.NewSliceSource(dueAt(0, 0, 0, 0, 0, 0)),
			&fakeEndpoint{d: 100 * ms}, func(o *Options) {
				o.Concurrency, o.LookAhead, o.Prompter = 2, 2, slowPrompter(2, 80*ms)
			})
		sr.check(t, 420*ms,
			map[int64]time.Duration{1: 0, 2: 0, 3: 100 * ms, 4: 160 * ms, 5: 240 * ms, 6: 320 * ms},
			map[int64]time.Duration{1: 100 * ms, 2: 100 * ms, 3: 200 * ms, 4: 260 * ms, 5: 340 * ms, 6: 420 * ms},
			map[int64]results.Status{1: results.StatusOK, 2: results.StatusOK, 3: results.StatusOK, 4: results.StatusOK, 5: results.StatusOK, 6: results.StatusOK})
		checkTimes(t, "scheduled", sr.scheduledNS(),
			map[int64]time.Duration{1: 0, 2: 0, 3: 100 * ms, 4: 100 * ms, 5: 200 * ms, 6: 260 * ms})
		if fw := sr.sum.FirstWave; fw == nil || fw.Requests != 2 || fw.SendNS != 0 || fw.Lateness.Max != 0 {
			t.Errorf("first wave %+v, want 2 requests sent at 0, on time", fw)
		}
		l := sr.sum.Lateness
		if l.N != 4 || l.Max != 60 || !(l.P99 > float64(DefaultMaxLateness)/1e6) {
			t.Errorf("steady-state lateness %+v, want 4 requests, max 60 ms, p99 over the %v bound", l, DefaultMaxLateness)
		}
		var text strings.Builder
		sr.sum.WriteText(&text)
		for _, want := range []string{
			"first wave: 2 requests (scheduled <= 0.000 ms, the last worker's start), last sent at 0.000 ms",
			"schedule lateness ms, steady state (after the first wave; what client-limited judges): p50 50.000",
		} {
			if !strings.Contains(text.String(), want) {
				t.Errorf("summary lacks %q:\n%s", want, text.String())
			}
		}
	})
}

// Closed loop: prewarm at least min(concurrency, max-inflight), never above the pool.
func TestPrewarmCount(t *testing.T) {
	for _, c := range []struct{ prewarm, maxInflight, concurrency, want int }{
		{64, 4096, 0, 64},    // open loop: as given
		{0, 4096, 0, 0},      // open loop: none
		{64, 4096, 256, 256}, // --concurrency 256 with the default --prewarm 64: the first wave once dialled the other 192 inside it
		{64, 4096, 1024, 1024},
		{64, 100, 256, 100},     // within --max-inflight
		{2000, 4096, 256, 2000}, // a larger --prewarm stands
		{9000, 4096, 256, 4096}, // bounded by the pool
		{-1, 4096, 8, 8},
	} {
		if got := PrewarmCount(c.prewarm, c.maxInflight, c.concurrency); got != c.want {
			t.Errorf("PrewarmCount(%d, %d, %d) = %d, want %d", c.prewarm, c.maxInflight, c.concurrency, got, c.want)
		}
	}
}

// The look-ahead holds at least the first wave, so Run's clock starts with every body of
// it built.
func TestClosedLoopLookAhead(t *testing.T) {
	for _, c := range []struct{ lookAhead, concurrency, want int }{
		{0, 0, DefaultLookAhead}, {0, 1024, 1024}, {0, 8, DefaultLookAhead}, {100, 300, 300}, {5000, 300, 5000},
	} {
		o := Options{Source: trace.NewSliceSource(nil), Client: &transport.Client{}, Prompter: wordPrompter, Output: "x",
			Speedup: 1, Concurrency: c.concurrency, LookAhead: c.lookAhead}
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		if o.LookAhead != c.want {
			t.Errorf("look-ahead %d at concurrency %d: %d, want %d", c.lookAhead, c.concurrency, o.LookAhead, c.want)
		}
	}
}

// Prepare of a closed loop at C=1024 with the default --prewarm 64: 1024 connections
// prewarmed, and both clients' idle pools are sized for at least that many; --ramp-up reaches Run.
func TestPrepareClosedLoopPrewarm(t *testing.T) {
	u := vllmtest.Start(t, &vllmtest.Server{})
	for _, client := range []string{transport.HTTPClientRaw, transport.HTTPClientNetHTTP} {
		if client == transport.HTTPClientRaw && !transport.RawBuilt {
			continue
		}
		cfg := DefaultConfig()
		cfg.Endpoint, cfg.HTTPClient, cfg.Quiet = u.String(), client, true
		cfg.Concurrency, cfg.ConcurrencySet, cfg.RampUp = 1024, true, 2*time.Second
		cfg.MaxInflight = 512 // the pool is the larger of the two
		cfg.Output = filepath.Join(t.TempDir(), "r.parquet")
		sess, err := Prepare(context.Background(), cfg, Env{ToolVersion: "test"})
		if err != nil {
			t.Fatal(err)
		}
		o := sess.Options
		if o.Prewarm != 512 || o.RampUp != 2*time.Second {
			t.Errorf("%s: prewarm %d, ramp-up %v; want 512 (min of C and --max-inflight), 2s", client, o.Prewarm, o.RampUp)
		}
		// The client sizes both idle pools to MaxInflight (transport's TestClientPoolsSized).
		if m := o.Client.Options().MaxInflight; m < 1024 {
			t.Errorf("%s: client MaxInflight %d, want >= 1024", client, m)
		}
		sess.Close()
	}
}
