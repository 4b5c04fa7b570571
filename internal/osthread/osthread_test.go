//go:build linux

package osthread

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestSleepUntilAbsolute: the sleep ends at or after its absolute deadline (never
// before: clock_nanosleep with TIMER_ABSTIME), on Go's monotonic clock.
func TestSleepUntilAbsolute(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range 20 {
		start := time.Now()
		d := Monotonic() + int64(2*time.Millisecond)
		SleepUntil(d)
		if now := Monotonic(); now < d {
			t.Fatalf("woke %d ns before the deadline", d-now)
		}
		if el := time.Since(start); el < 2*time.Millisecond {
			t.Fatalf("slept %v by Go's monotonic clock, want >= 2ms: not the same clock", el)
		}
	}
}

// TestSleepLetsOthersRun: with GOMAXPROCS=1, a goroutine sleeping in SleepUntil
// leaves the only P to the others, and takes one back when it wakes: the linkname'd
// entry and exit of the runtime's syscall state neither deadlock nor crash (the test
// counts progress, not time).
func TestSleepLetsOthersRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	progressed := false
	go func() {
		defer wg.Done()
		<-stop
	}()
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		SleepUntil(Monotonic() + int64(200*time.Millisecond))
		close(done)
	}()
	// This goroutine shares the single P; it must run while the sleeper sleeps.
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-done:
			close(stop)
			wg.Wait()
			if !progressed {
				t.Fatal("the other goroutine never ran while the sleeper slept")
			}
			return
		default:
		}
		progressed = true
		runtime.Gosched()
		if time.Now().After(deadline) {
			t.Fatal("the sleeper never woke")
		}
	}
}

func TestEpollWaitAndRead(t *testing.T) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(ep)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(p[0])}
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, p[0], &ev); err != nil {
		t.Fatal(err)
	}
	evs := make([]syscall.EpollEvent, 4)
	if n, err := EpollWait(ep, evs, 0); n != 0 || err != nil {
		t.Fatalf("empty pipe: %d events, %v", n, err)
	}
	go syscall.Write(p[1], []byte("hi"))
	n, err := EpollWait(ep, evs, 5000)
	if n != 1 || err != nil || evs[0].Fd != int32(p[0]) {
		t.Fatalf("got %d events %v, %v", n, evs[:max(n, 0)], err)
	}
	b := make([]byte, 8)
	if m, err := Read(p[0], b); m != 2 || err != nil || string(b[:m]) != "hi" {
		t.Fatalf("read %d %q %v", m, b[:max(m, 0)], err)
	}
}

func TestSetTimerSlack(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev := SetTimerSlack(1)
	if prev <= 0 {
		t.Fatalf("previous slack %d, want the thread's (50000 ns by default)", prev)
	}
	if got := SetTimerSlack(prev); got != 1 {
		t.Fatalf("slack read back %d, want 1", got)
	}
}

// TestSleepHold: the sleep never ends before its deadline when it says it reached it,
// and a stop of the world (runtime.GC) does not wait for a long held sleep: the
// preemption signal ends it early (false), and the loop around it lets the runtime stop
// the goroutine. Without the early end, GC would return only after the sleeper's 30 s.
func TestSleepHold(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + 1))
	runtime.LockOSThread()
	for range 20 {
		d := Monotonic() + int64(time.Millisecond)
		for !SleepHold(d) {
		}
		if now := Monotonic(); now < d {
			t.Fatalf("woke %d ns before the deadline", d-now)
		}
	}
	runtime.UnlockOSThread()

	var early, done, stop atomic.Int64
	var tid atomic.Int64
	started := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid.Store(int64(syscall.Gettid()))
		d := Monotonic() + int64(30*time.Second)
		close(started)
		for !SleepHold(d) {
			early.Add(1)
			if stop.Load() != 0 {
				return
			}
		}
		done.Store(1)
	}()
	<-started
	time.Sleep(10 * time.Millisecond) // asleep in the kernel by now, most likely
	runtime.GC()
	if done.Load() != 0 {
		t.Error("GC returned only after the held sleep's 30 s")
	}
	if early.Load() == 0 {
		t.Error("GC completed without ending the held sleep: it did not stop the sleeper")
	}
	// End the sleeper: SIGURG (the runtime's own preemption signal, otherwise ignored)
	// ends its sleep early, and it sees stop.
	stop.Store(1)
	for {
		syscall.Tgkill(syscall.Getpid(), int(tid.Load()), syscall.SIGURG)
		select {
		case <-ended:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}
