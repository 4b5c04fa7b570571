//go:build linux

package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/cputime"
	"github.com/llmreplay/llmreplay/internal/rxstamp"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
)

// newTestThreadWaiter returns a thread waiter for the calling goroutine and its release.
func newTestThreadWaiter(clk transport.Clock, stop <-chan struct{}) (*threadWaiter, func()) {
	w := preciseWaiter(clk, stop)
	return w.(*threadWaiter), w.release
}

// The thread waiter never returns before the run clock reaches the due time, and the
// mapping of the run clock to CLOCK_MONOTONIC (monoBase) never makes a sleep end early:
// a due time within one slice takes at most one clock_nanosleep, whatever the load.
// Returns come in the order of the due times asked (ties and past ones at once). Both
// ways of sleeping: keeping the P (a P of its own) and handing it off (GOMAXPROCS 1).
func TestThreadWaiterNeverEarly(t *testing.T) {
	for _, hold := range []bool{true, false} {
		t.Run(fmt.Sprintf("hold=%v", hold), func(t *testing.T) {
			if !hold {
				defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			} else if runtime.GOMAXPROCS(0) < 2 {
				t.Skip("one P: the waiter cannot have one of its own")
			}
			testThreadWaiterNeverEarly(t, hold)
		})
	}
}

func testThreadWaiterNeverEarly(t *testing.T, hold bool) {
	clk := transport.Clock{Start: time.Now()}
	w, release := newTestThreadWaiter(clk, make(chan struct{}))
	defer release()
	if w.hold != hold {
		t.Fatalf("waiter hold = %v, want %v", w.hold, hold)
	}
	var dues []int64
	for i := range 60 {
		d := int64(i) * int64(300*time.Microsecond)
		dues = append(dues, d)
		if i%10 == 0 {
			dues = append(dues, d, d-int64(time.Millisecond)) // a tie, and one already past
		}
	}
	var at []int64
	for _, due := range dues {
		before := w.sleeps.Load()
		if !w.until(due) {
			t.Fatalf("until(%d) = false with no stop", due)
		}
		now := clk.Now()
		at = append(at, now)
		if now < due {
			t.Fatalf("until(%d) returned at %d, before its due time", due, now)
		}
		if n := w.sleeps.Load() - before; n > 1 {
			t.Errorf("until(%d) slept %d times: the absolute deadline ended before the run clock reached it", due, n)
		}
	}
	if !sort.SliceIsSorted(at, func(i, j int) bool { return at[i] < at[j] }) {
		t.Error("returns out of order")
	}
	// A deadline a few slices away: maxSleep at a time, then the rest. How many slices it
	// takes depends on how late each wake was (a late one leaves less to sleep, or
	// nothing); what the waiter decides is each slice's end: maxSleep after the clock
	// reading it was computed from, or the due time if that is sooner.
	due := clk.Now() + int64(2*maxSleep+maxSleep/2)
	var slices [][2]int64
	w.onSlice = func(now, end int64) { slices = append(slices, [2]int64{now, end}) }
	w.until(due)
	w.onSlice = nil
	if now := clk.Now(); now < due {
		t.Fatalf("long wait returned %d ns early", due-now)
	}
	if len(slices) == 0 {
		t.Fatal("a wait of 2.5 slices slept in none")
	}
	for _, s := range slices {
		if want := min(due, s[0]+int64(maxSleep)); s[1] != want {
			t.Errorf("slice from %d to %d, want to %d (%v on, or the due time %d)", s[0], s[1], want, maxSleep, due)
		}
	}
}

// A stop ends the wait at the end of the slice the thread sleeps in, not at the due time.
func TestThreadWaiterStop(t *testing.T) {
	clk := transport.Clock{Start: time.Now()}
	stop := make(chan struct{})
	got := make(chan bool)
	ws := make(chan *threadWaiter)
	go func() {
		w, release := newTestThreadWaiter(clk, stop)
		defer release()
		ws <- w
		got <- w.until(clk.Now() + int64(time.Hour))
	}()
	w := <-ws
	for w.sleeps.Load() < 2 { // it sleeps slice after slice
		time.Sleep(time.Millisecond)
	}
	k := w.sleeps.Load()
	close(stop)
	if <-got {
		t.Fatal("until = true across a stop")
	}
	if n := w.sleeps.Load() - k; n > 1 {
		t.Errorf("%d more slices slept after the stop, want at most the one under way", n)
	}
}

// A real open-loop run with the raw client on pooled connections: the dispatcher waits on
// its locked thread and writes each request itself, so sent_ns is stamped in dispatch
// order: every request is sent at or after its due time, in the trace's order, and the
// thread is unlocked and the goroutines gone when Run returns.
func TestOpenLoopThreadWaiter(t *testing.T) {
	g0 := runtime.NumGoroutine()
	srv := &vllmtest.Server{}
	base := vllmtest.Start(t, srv)
	c := newTestClient(t, base, func(o *transport.ClientOptions) { o.HTTPClient = "raw" })
	const n = 60
	if got := c.Prewarm(context.Background(), n); got != n {
		t.Fatalf("prewarmed %d connections, want %d", got, n)
	}
	var reqs []trace.Request
	for i := range n {
		at := time.Duration(i/3) * time.Millisecond // three at a time
		reqs = append(reqs, trace.Request{ID: int64(i), Arrival: at, PromptTokens: 3, OutputTokens: 1})
	}
	locked := make(chan int64, n)
	procs := make(chan int, n)
	p0 := runtime.GOMAXPROCS(0)
	w0 := dueWrites.Load()
	_, res, _ := runTrace(t, context.Background(), c, reqs, func(o *Options) {
		o.seams.ended = func(*results.Result) { locked <- lockedWaiters.Load(); procs <- runtime.GOMAXPROCS(0) }
	})
	close(procs)
	// The dispatcher's P while it dispatches (requests also end after), and the reactor's
	// (a reactor started by an earlier test may hold its P already: p0 counts it then).
	b0 := transport.BaseProcs()
	want := p0
	if b0 >= 2 {
		want = b0 + 2
	}
	mostP := 0
	for p := range procs {
		mostP = max(mostP, p)
	}
	if mostP != want {
		t.Errorf("GOMAXPROCS at most %d during the run (%d before it, %d without extra Ps), want %d", mostP, p0, b0, want)
	}
	if len(res) != n {
		t.Fatalf("%d records, want %d", len(res), n)
	}
	if w := dueWrites.Load() - w0; w != n {
		t.Errorf("the thread waiter wrote %d of %d requests at their due time, want all (every connection was idle)", w, n)
	}
	sort.Slice(res, func(i, j int) bool { return res[i].RequestID < res[j].RequestID })
	for i, r := range res {
		if r.Status != results.StatusOK {
			t.Fatalf("request %d: %s %s", r.RequestID, r.Status, r.Error)
		}
		if r.SentNS < r.ScheduledNS {
			t.Errorf("request %d sent at %d, before its due time %d", r.RequestID, r.SentNS, r.ScheduledNS)
		}
		if i > 0 && r.SentNS < res[i-1].SentNS {
			t.Errorf("request %d sent at %d, before request %d (%d)", r.RequestID, r.SentNS, res[i-1].RequestID, res[i-1].SentNS)
		}
	}
	close(locked)
	most := int64(0)
	for l := range locked {
		most = max(most, l)
	}
	if most != 1 {
		t.Errorf("during the run, at most %d locked waiter threads, want 1", most)
	}
	if l := lockedWaiters.Load(); l != 0 {
		t.Errorf("after the run, %d locked waiter threads, want 0", l)
	}
	c.Close()
	for i := 0; runtime.NumGoroutine() > g0+2 && i < 500; i++ { // the test server's, ending
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > g0+2 {
		t.Errorf("%d goroutines after the run, %d before", g, g0)
	}
}

// BenchmarkDueWaiters runs the thread waiter and the timer waiter (with its yield loop)
// side by side in one process, on the same Poisson due times (300/s for 3 s), each on
// its own goroutine, and reports how late each returned (ms): a comparison in one sitting,
// under whatever else the machine runs at that moment. With busy=true, GOMAXPROCS
// goroutines that never block keep every P busy: the thread waiter's wake then finds no
// idle P and queues for one (exitsyscall's slow path).
//
//	go test -run '^$' -bench DueWaiters -benchtime 1x ./replay
func BenchmarkDueWaiters(b *testing.B) {
	for _, busy := range []bool{false, true} {
		b.Run(map[bool]string{false: "idle", true: "busy"}[busy], func(b *testing.B) {
			var stopBusy atomic.Bool
			var wg sync.WaitGroup
			if busy {
				for range runtime.GOMAXPROCS(0) {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for !stopBusy.Load() {
						}
					}()
				}
			}
			dues := benchDues()
			for range b.N {
				clk := transport.Clock{Start: time.Now()}
				stop := make(chan struct{})
				late := make([][]float64, 2)
				var ww sync.WaitGroup
				for k := range 2 {
					ww.Add(1)
					go func() {
						defer ww.Done()
						w := benchWaiter(k == 0, clk, stop)
						defer w.release()
						for _, d := range dues {
							w.until(d)
							late[k] = append(late[k], float64(clk.Now()-d)/1e6)
						}
					}()
				}
				ww.Wait()
				for k, name := range []string{"thread", "timer"} {
					x := late[k]
					slices.Sort(x)
					b.ReportMetric(x[len(x)/2], name+"-p50-ms")
					b.ReportMetric(x[len(x)*99/100], name+"-p99-ms")
					b.ReportMetric(x[len(x)-1], name+"-max-ms")
				}
			}
			stopBusy.Store(true)
			wg.Wait()
		})
	}
}

// BenchmarkDueWaiterCPU runs one waiter alone over the same Poisson due times (300/s for
// 3 s) and reports the process's CPU time over the run (ms; the rest of the process is
// idle): what the timer waiter's yield loop costs against the thread's sleeps.
//
//	go test -run '^$' -bench DueWaiterCPU -benchtime 1x ./replay
func BenchmarkDueWaiterCPU(b *testing.B) {
	dues := benchDues()
	for _, kind := range []string{"thread", "timer"} {
		b.Run(kind, func(b *testing.B) {
			for range b.N {
				cpu0 := cputime.Process()
				clk := transport.Clock{Start: time.Now()}
				done := make(chan struct{})
				go func() {
					defer close(done)
					w := benchWaiter(kind == "thread", clk, nil)
					defer w.release()
					for _, d := range dues {
						w.until(d)
					}
				}()
				<-done
				b.ReportMetric(float64(cputime.Process()-cpu0)/1e6, "cpu-ms")
			}
		})
	}
}

// benchDues is the benchmarks' schedule: Poisson due times, 300/s for 3 s.
func benchDues() []int64 {
	rng := rand.New(rand.NewPCG(1, 2))
	var dues []int64
	for t := int64(time.Millisecond); t < int64(3*time.Second); t += int64(rng.ExpFloat64() / 300 * 1e9) {
		dues = append(dues, t)
	}
	return dues
}

// benchWaiter is the thread waiter when thread is set, else the timer waiter.
func benchWaiter(thread bool, clk transport.Clock, stop <-chan struct{}) dueWaiter {
	if thread {
		return preciseWaiter(clk, stop)
	}
	return newWaiter(clk, stop)
}

// sendAt writes at the due time, never before: the stamp it returns is at or after the due
// time on the run clock, the bytes all go, and they reach the peer's socket (the kernel's
// receive timestamp, on the wall clock) no earlier than the due instant either.
func TestThreadWaiterSendAt(t *testing.T) {
	ln := stampedListener(t)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fd, err := dupSocket(c.(*net.TCPConn))
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	sraw, _ := s.(*net.TCPConn).SyscallConn()
	sraw.Control(func(sfd uintptr) { rxstamp.Enable(int(sfd)) })

	clk := transport.Clock{Start: time.Now()}
	w, wrelease := newTestThreadWaiter(clk, make(chan struct{}))
	defer wrelease()
	msg := []byte("hello, due time")
	b, oob := make([]byte, 64), make([]byte, rxstamp.OOBSize)
	stamped := 0
	for i := range 20 {
		due := clk.Now() + int64(time.Duration(i%4)*500*time.Microsecond) // 0 to 1.5 ms ahead
		iov := syscall.Iovec{Base: &msg[0]}
		iov.SetLen(len(msg))
		sent, n, e := w.sendAt(due, fd, &iov, 1)
		if e != 0 || n != len(msg) {
			t.Fatalf("send %d: wrote %d of %d, %v", i, n, len(msg), e)
		}
		if sent < due {
			t.Fatalf("send %d stamped %d, before its due time %d", i, sent, due)
		}
		var got int
		var arrived int64
		rerr := sraw.Read(func(sfd uintptr) bool {
			var en syscall.Errno
			got, arrived, en = rxstamp.Recv(int(sfd), b, oob)
			return en != syscall.EAGAIN
		})
		if rerr != nil || string(b[:got]) != string(msg) {
			t.Fatalf("peer read %q, %v", b[:got], rerr)
		}
		const tol = 50_000 // ns: the wall and monotonic readings of one time.Now
		if arrived != 0 {
			stamped++
		}
		if dueWall := clk.Start.UnixNano() + due; arrived != 0 && arrived < dueWall-tol {
			t.Fatalf("send %d reached the peer %d ns before its due time", i, dueWall-arrived)
		}
	}
	if stamped == 0 {
		t.Fatal("no send's arrival was stamped by the kernel: nothing checked")
	}
}

// dupSocket duplicates c's descriptor (as the raw client's ownSocket does), so that the
// thread waiter writes to a socket outside the runtime's netpoller once c is closed.
func dupSocket(c *net.TCPConn) (int, error) {
	sc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	cerr := sc.Control(func(s uintptr) {
		r, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			err = e
			return
		}
		fd = int(r)
	})
	if cerr != nil {
		return -1, cerr
	}
	return fd, err
}

// stampedListener holds the kernel's receive stamping on (rxstamp.Hold) and listens on
// loopback, both until the test ends.
func stampedListener(t *testing.T) net.Listener {
	t.Helper()
	release, err := rxstamp.Hold(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}
