package replay

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// The tests in this file run the runner's timing under testing/synctest: a virtual clock
// that advances only when every goroutine of the test is durably blocked, so every time
// they assert is exact. Requests go to fakeEndpoint (Options.seams.do), not to a socket,
// and the waiter sleeps to each deadline on its timer (seams.noSpin).

// fakeEndpoint serves each request for d of virtual time, unless the run's hard context
// cancels it first; it records when each request ended on the run clock.
type fakeEndpoint struct {
	d    time.Duration
	mu   sync.Mutex
	ends map[int64]time.Duration
}

func (f *fakeEndpoint) do(ctx context.Context, clk transport.Clock, req *transport.Request, res *results.Result) {
	res.SentNS = clk.Now()
	t := time.NewTimer(f.d)
	defer t.Stop()
	select {
	case <-t.C:
		res.Status = results.StatusOK
		res.FirstTokenNS, res.EndNS = clk.Now(), clk.Now()
		res.ChunkNS = []int64{res.EndNS - res.SentNS}
		res.OutputTokens, res.OutputTokensSource = 1, results.SourceUsage
	case <-ctx.Done():
		res.Status, res.Error = results.StatusCanceled, "canceled before a response: run interrupted"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ends == nil {
		f.ends = map[int64]time.Duration{}
	}
	f.ends[req.ID] = time.Duration(clk.Now())
}

func (f *fakeEndpoint) endsAt() map[int64]time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[int64]time.Duration{}
	for k, v := range f.ends {
		m[k] = v
	}
	return m
}

// dueAt returns requests 1, 2, ... due at the given offsets from the run start.
func dueAt(at ...time.Duration) []trace.Request {
	reqs := make([]trace.Request, len(at))
	for i, a := range at {
		reqs[i] = trace.Request{ID: int64(i + 1), Arrival: a, PromptTokens: 3, OutputTokens: 1}
	}
	return reqs
}

type syncRun struct {
	sum     *Summary
	err     error
	res     []results.Result
	took    time.Duration // virtual time from the run start to Run's return
	prog    *Progress
	endsAt  map[int64]time.Duration
	sentNS  map[int64]int64
	statusi map[int64]results.Status
}

// runSynctest runs src against f in the current bubble, the run clock starting now. The
// defaults: open loop at speedup 1 from arrival 0, Grace 1 s.
func runSynctest(t *testing.T, ctx context.Context, src trace.Source, f *fakeEndpoint, mod func(*Options)) syncRun {
	t.Helper()
	base, err := wire.BaseURL("http://127.0.0.1:9/v1") // never dialled: seams.do serves
	if err != nil {
		t.Fatal(err)
	}
	c, err := transport.NewClient(transport.ClientOptions{BaseURL: base, API: wire.APICompletions, Backend: wire.BackendVLLM, Model: "m",
		MaxInflight: 64, HTTPClient: "net/http"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prog := new(Progress)
	o := Options{Source: src, Client: c, Prompter: wordPrompter, Speedup: 1, HasOrigin: true,
		Output: filepath.Join(t.TempDir(), "r.parquet"), Grace: time.Second, Start: time.Now(), Progress: prog,
		seams: seams{do: f.do, noSpin: true}}
	if mod != nil {
		mod(&o)
	}
	start := o.Start
	sr := syncRun{prog: prog}
	sr.sum, sr.err = Run(ctx, o)
	sr.took = time.Since(start)
	sr.endsAt = f.endsAt()
	res, _, err := results.ReadFile(o.Output)
	if err != nil {
		t.Fatalf("results file: %v", err)
	}
	sr.res = res
	sr.sentNS, sr.statusi = map[int64]int64{}, map[int64]results.Status{}
	for _, r := range res {
		sr.sentNS[r.RequestID] = r.SentNS
		sr.statusi[r.RequestID] = r.Status
	}
	return sr
}

func (sr syncRun) check(t *testing.T, took time.Duration, sent map[int64]time.Duration, ends map[int64]time.Duration, status map[int64]results.Status) {
	t.Helper()
	if sr.err != nil {
		t.Errorf("Run: %v", sr.err)
	}
	if sr.took != took {
		t.Errorf("Run returned at %v, want %v", sr.took, took)
	}
	if len(sr.res) != len(status) {
		t.Errorf("%d records, want %d: %v", len(sr.res), len(status), sr.statusi)
	}
	for id, want := range status {
		if got := sr.statusi[id]; got != want {
			t.Errorf("request %d: status %q, want %q", id, got, want)
		}
	}
	for id, want := range sent {
		if got := time.Duration(sr.sentNS[id]); got != want {
			t.Errorf("request %d: sent at %v, want %v", id, got, want)
		}
	}
	if len(sr.endsAt) != len(ends) {
		t.Errorf("%d requests dispatched, want %d: %v", len(sr.endsAt), len(ends), sr.endsAt)
	}
	for id, want := range ends {
		if got, ok := sr.endsAt[id]; !ok || got != want {
			t.Errorf("request %d: ended at %v (dispatched %v), want %v", id, got, ok, want)
		}
	}
}

const ten = 10 * time.Second

// A graceful stop at 3 s with requests due at 1, 2, 4 and 5 s dispatches exactly the first
// two; they are canceled exactly Grace after the stop, and the run ends then.
func TestSynctestGracefulStopThenGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop, abort := WithStop(context.Background())
		defer abort()
		time.AfterFunc(3*time.Second, stop)
		sr := runSynctest(t, ctx, trace.NewSliceSource(dueAt(time.Second, 2*time.Second, 4*time.Second, 5*time.Second)),
			&fakeEndpoint{d: ten}, func(o *Options) { o.Grace = 2 * time.Second })
		sr.check(t, 5*time.Second,
			map[int64]time.Duration{1: time.Second, 2: 2 * time.Second},
			map[int64]time.Duration{1: 5 * time.Second, 2: 5 * time.Second},
			map[int64]results.Status{1: results.StatusCanceled, 2: results.StatusCanceled})
		if !sr.prog.Stopping.Load() || sr.prog.Late.Load() != 0 {
			t.Errorf("stopping %v, late sends %d; want true, 0", sr.prog.Stopping.Load(), sr.prog.Late.Load())
		}
	})
}

// Requests that end within the grace are recorded as they ended, and the run ends with
// the last of them, not at the end of the grace.
func TestSynctestGracefulStopLetsRequestsFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop, abort := WithStop(context.Background())
		defer abort()
		time.AfterFunc(3*time.Second, stop)
		sr := runSynctest(t, ctx, trace.NewSliceSource(dueAt(time.Second, 2*time.Second, 4*time.Second)),
			&fakeEndpoint{d: 1500 * time.Millisecond}, func(o *Options) { o.Grace = time.Minute })
		sr.check(t, 3500*time.Millisecond,
			map[int64]time.Duration{1: time.Second, 2: 2 * time.Second},
			map[int64]time.Duration{1: 2500 * time.Millisecond, 2: 3500 * time.Millisecond},
			map[int64]results.Status{1: results.StatusOK, 2: results.StatusOK})
	})
}

// The natural end of the schedule waits for the requests in flight without limit (each is
// bounded by its own timeout): no grace, no cancellation, not "stopping".
func TestSynctestNaturalEndWaitsWithoutGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := runSynctest(t, context.Background(), trace.NewSliceSource(dueAt(time.Second, 2*time.Second)),
			&fakeEndpoint{d: ten}, func(o *Options) { o.Grace = time.Second })
		sr.check(t, 12*time.Second,
			map[int64]time.Duration{1: time.Second, 2: 2 * time.Second},
			map[int64]time.Duration{1: 11 * time.Second, 2: 12 * time.Second},
			map[int64]results.Status{1: results.StatusOK, 2: results.StatusOK})
		if sr.prog.Stopping.Load() {
			t.Error("a natural end shows as stopping")
		}
	})
}

// --duration is an end of the schedule: requests due after it are not dispatched, those in
// flight finish without a grace.
func TestSynctestDurationEndsSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := runSynctest(t, context.Background(), trace.NewSliceSource(dueAt(time.Second, 2*time.Second, 4*time.Second, 5*time.Second)),
			&fakeEndpoint{d: ten}, func(o *Options) { o.Duration = 3 * time.Second })
		sr.check(t, 12*time.Second,
			map[int64]time.Duration{1: time.Second, 2: 2 * time.Second},
			map[int64]time.Duration{1: 11 * time.Second, 2: 12 * time.Second},
			map[int64]results.Status{1: results.StatusOK, 2: results.StatusOK})
	})
}

// A graceful stop after the end of the schedule, while requests are still in flight,
// cancels them Grace after the stop.
func TestSynctestStopAfterScheduleEndArmsGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop, abort := WithStop(context.Background())
		defer abort()
		time.AfterFunc(5*time.Second, stop)
		sr := runSynctest(t, ctx, trace.NewSliceSource(dueAt(time.Second, 2*time.Second)),
			&fakeEndpoint{d: ten}, func(o *Options) { o.Grace = 3 * time.Second })
		sr.check(t, 8*time.Second,
			map[int64]time.Duration{1: time.Second, 2: 2 * time.Second},
			map[int64]time.Duration{1: 8 * time.Second, 2: 8 * time.Second},
			map[int64]results.Status{1: results.StatusCanceled, 2: results.StatusCanceled})
	})
}

// A hard abort during the grace cancels every request in flight at once.
func TestSynctestAbortDuringGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop, abort := WithStop(context.Background())
		defer abort()
		time.AfterFunc(3*time.Second, stop)
		time.AfterFunc(4*time.Second, abort)
		sr := runSynctest(t, ctx, trace.NewSliceSource(dueAt(time.Second, 2*time.Second, 5*time.Second)),
			&fakeEndpoint{d: ten}, func(o *Options) { o.Grace = time.Minute })
		sr.check(t, 4*time.Second,
			map[int64]time.Duration{1: time.Second, 2: 2 * time.Second},
			map[int64]time.Duration{1: 4 * time.Second, 2: 4 * time.Second},
			map[int64]results.Status{1: results.StatusCanceled, 2: results.StatusCanceled})
	})
}

// An abort with no graceful stop before it stops dispatching too (the graceful context is
// derived from the hard one) and cancels at once.
func TestSynctestAbortAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, _, abort := WithStop(context.Background())
		time.AfterFunc(3*time.Second, abort)
		sr := runSynctest(t, ctx, trace.NewSliceSource(dueAt(time.Second, 2*time.Second, 4*time.Second)),
			&fakeEndpoint{d: ten}, func(o *Options) { o.Grace = time.Minute })
		sr.check(t, 3*time.Second,
			map[int64]time.Duration{1: time.Second, 2: 2 * time.Second},
			map[int64]time.Duration{1: 3 * time.Second, 2: 3 * time.Second},
			map[int64]results.Status{1: results.StatusCanceled, 2: results.StatusCanceled})
		if !sr.prog.Stopping.Load() {
			t.Error("an abort does not show as stopping")
		}
	})
}

// The closed loop's workers stop taking requests at a graceful stop, and the requests they
// have in flight get the grace, no more.
func TestSynctestClosedLoopStopThenGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop, abort := WithStop(context.Background())
		defer abort()
		time.AfterFunc(3*time.Second, stop)
		sr := runSynctest(t, ctx, trace.NewSliceSource(dueAt(0, 0, 0, 0, 0)),
			&fakeEndpoint{d: ten}, func(o *Options) { o.Concurrency = 2; o.Grace = 2 * time.Second })
		sr.check(t, 5*time.Second,
			map[int64]time.Duration{1: 0, 2: 0},
			map[int64]time.Duration{1: 5 * time.Second, 2: 5 * time.Second},
			map[int64]results.Status{1: results.StatusCanceled, 2: results.StatusCanceled})
	})
}

// Closed loop --duration: a worker sends its next request only while the run clock is
// within the duration; the last requests finish without a grace.
func TestSynctestClosedLoopDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := runSynctest(t, context.Background(), trace.NewSliceSource(dueAt(0, 0, 0, 0, 0, 0)),
			&fakeEndpoint{d: 2 * time.Second}, func(o *Options) { o.Concurrency = 1; o.Duration = 5 * time.Second; o.Grace = 0 })
		sr.check(t, 6*time.Second,
			map[int64]time.Duration{1: 0, 2: 2 * time.Second, 3: 4 * time.Second},
			map[int64]time.Duration{1: 2 * time.Second, 2: 4 * time.Second, 3: 6 * time.Second},
			map[int64]results.Status{1: results.StatusOK, 2: results.StatusOK, 3: results.StatusOK})
	})
}

// slowFailingSource yields its requests, then, after blocking until the run clock reaches
// failAt, fails: a fatal run error in the middle of the schedule.
type slowFailingSource struct {
	trace.Source
	failAt time.Duration
	start  time.Time
	err    error
}

func (s *slowFailingSource) Next() bool {
	if s.Source.Next() {
		return true
	}
	time.Sleep(s.failAt - time.Since(s.start))
	s.err = errors.New("disk gone")
	return false
}

func (s *slowFailingSource) Err() error { return s.err }

// A fatal run error is an early stop: no more dispatches, Grace for the requests in
// flight, and Run returns the error with a complete results file.
func TestSynctestFatalErrorStopsWithGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &slowFailingSource{Source: trace.NewSliceSource(dueAt(time.Second, 2*time.Second)), failAt: 3 * time.Second, start: time.Now()}
		sr := runSynctest(t, context.Background(), src, &fakeEndpoint{d: ten}, func(o *Options) { o.Grace = 2 * time.Second })
		if sr.err == nil || !strings.Contains(sr.err.Error(), "replay: read trace: disk gone") {
			t.Fatalf("Run: %v, want the trace's error", sr.err)
		}
		sr.err = nil
		sr.check(t, 5*time.Second,
			map[int64]time.Duration{1: time.Second, 2: 2 * time.Second},
			map[int64]time.Duration{1: 5 * time.Second, 2: 5 * time.Second},
			map[int64]results.Status{1: results.StatusCanceled, 2: results.StatusCanceled})
	})
}

// The waiter returns at its deadline exactly, and at a stop exactly.
func TestSynctestWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stop := make(chan struct{})
		clk := transport.Clock{Start: time.Now()}
		w := newWaiter(clk, stop)
		w.noSpin()
		for _, due := range []time.Duration{0, 30 * time.Millisecond, 1500 * time.Millisecond, 1500 * time.Millisecond, 4*time.Second + 7} {
			if !w.until(int64(due)) {
				t.Fatalf("until(%v) = false with no stop", due)
			}
			if now := time.Duration(clk.Now()); now != due {
				t.Errorf("until(%v) returned at %v", due, now)
			}
		}
		if !w.until(int64(time.Second)) || time.Duration(clk.Now()) != 4*time.Second+7 {
			t.Errorf("a past deadline waited: now %v", time.Duration(clk.Now()))
		}
		time.AfterFunc(700*time.Millisecond, func() { close(stop) })
		if w.until(int64(time.Minute)) {
			t.Error("until = true across a stop")
		}
		if now := time.Duration(clk.Now()); now != 4*time.Second+7+700*time.Millisecond {
			t.Errorf("stop noticed at %v, want 4.7s", now)
		}
	})
}

// The yield window grows at once to an overshoot, decays by 1/64 a wake, within bounds.
func TestWaiterAdapt(t *testing.T) {
	us := time.Microsecond
	for _, c := range []struct {
		margin, over, want time.Duration
	}{
		{500 * us, 0, 500*us - 500*us/64},
		{500 * us, 2 * time.Millisecond, 500 * us},
		{30 * us, 100 * us, 130 * us},
		{30 * us, 0, 30 * us},
		{31 * us, -5 * us, 31*us - 31*us/64},
		{200 * us, 50 * us, 200*us - 200*us/64},
		{200 * us, 250 * us, 280 * us},
	} {
		w := newWaiter(transport.Clock{}, nil)
		w.margin = c.margin
		w.adapt(c.over)
		if w.margin != c.want {
			t.Errorf("margin %v, overshoot %v: %v, want %v", c.margin, c.over, w.margin, c.want)
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Plain progress lines come at exactly every Interval, with the tok/s of the last
// interval, and show the stop.
func TestSynctestProgressPlainLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := new(Progress)
		p.StartUnixNS.Store(time.Now().UnixNano())
		var buf lockedBuffer // the race detector does not count virtual time as an order
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			RenderProgress(ctx, &buf, p, ProgressOptions{Interval: 5 * time.Second, Span: 29 * time.Second})
		}()
		p.Sent.Store(3)
		p.InFlight.Store(1)
		p.Done.Store(2)
		p.OutputTokens.Store(500)
		time.Sleep(5*time.Second - 1)
		synctest.Wait()
		if buf.String() != "" {
			t.Fatalf("a line before the interval: %q", buf.String())
		}
		time.Sleep(1)
		synctest.Wait()
		want := "llmreplay: 5s of 29s schedule sent 3  in flight 1  done 2  errors 0  dropped 0  100 tok/s\n"
		if buf.String() != want {
			t.Fatalf("at 5s:\n got %q\nwant %q", buf.String(), want)
		}
		p.OutputTokens.Store(1500)
		p.Late.Store(2)
		p.LastLateNS.Store(int64(12500 * time.Microsecond))
		p.Stopping.Store(true)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		want += "llmreplay: 10s of 29s schedule sent 3  in flight 1  done 2  errors 0  dropped 0  200 tok/s" +
			"  BEHIND SCHEDULE: 2 sends late (last 12.5 ms)  (stopping)\n"
		if buf.String() != want {
			t.Fatalf("at 10s:\n got %q\nwant %q", buf.String(), want)
		}
		time.Sleep(2 * time.Second)
		cancel()
		<-done
		if strings.Count(buf.String(), "\n") != 2 {
			t.Errorf("lines after 12 s: %q", buf.String())
		}
	})
}

// slowSource takes d of virtual time to read its one request.
type slowSource struct {
	d      time.Duration
	n      int
	inNext atomic.Bool
}

func (s *slowSource) Next() bool {
	s.inNext.Store(true)
	defer s.inNext.Store(false)
	time.Sleep(s.d)
	s.n++
	return s.n == 1
}
func (s *slowSource) Request() trace.Request {
	return trace.Request{ID: 1, PromptTokens: 3, OutputTokens: 1}
}
func (s *slowSource) Err() error { return nil }

// Run returns only once the preparer is out of the Source, which its caller then closes.
func TestSynctestRunLeavesSourceBeforeReturning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop, abort := WithStop(context.Background())
		defer abort()
		time.AfterFunc(time.Second, stop)
		src := &slowSource{d: 5 * time.Second}
		sr := runSynctest(t, ctx, src, &fakeEndpoint{d: ten}, nil)
		if src.inNext.Load() {
			t.Fatal("Run returned while the preparer was reading the source")
		}
		sr.check(t, 5*time.Second, nil, nil, nil)
	})
}
