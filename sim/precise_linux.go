//go:build linux

package sim

import (
	"container/heap"
	"errors"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/llmreplay/llmreplay/internal/osthread"
)

// scheduler writes the fixed profile's streams from one OS-locked thread that sleeps on
// an absolute deadline: a timerfd (CLOCK_MONOTONIC, TFD_TIMER_ABSTIME) read with
// osthread.Read, which hands the thread's P off while it sleeps. A timerfd rather than
// clock_nanosleep because a new stream's first token may be due before the deadline the
// thread sleeps to (a TTFT shorter than the ITL, or an idle server): the submitter
// re-arms the timer to the earlier deadline with one timerfd_settime and the sleeping
// read returns then, where a clock_nanosleep could only be cut short by a signal.
//
// A wake serves every write due within writeEarly of it, so a write may leave up to
// writeEarly before its due time (the lateness histogram counts it as 0; the request
// log's stamps are the true times). Each sleep costs two system calls and a hand-off of
// the thread's P, which with the sim on one core means waking another thread to run the
// P's goroutines, and the writes of 300 streams at an ITL of 10 ms are ~30 µs apart:
// serving those due in the next 300 µs rather than 50 µs in one wake cut the sim's CPU
// per token from 19.1 and 17.6 to 14.9 and 13.6 µs (replaybench fidelity pinned, a loaded
// machine). 200 µs is well under the replayer's own TTFT error target (p99 1 ms).
//
// One thread: at 30k writes a second of ~5 µs each it is busy ~15% of the time, and
// one writer keeps the chunks that fall due together in deadline order.
const writeEarly = WriteEarly

type scheduler struct {
	tfd  int
	base time.Time // base and baseMono are the same instant, on Go's clock and on
	// CLOCK_MONOTONIC, to put due times (time.Time) on the timer's clock
	baseMono int64

	mu     sync.Mutex
	h      dueHeap
	armed  int64 // the deadline the timer is armed to (0: disarmed)
	closed bool
	exited chan struct{}
}

type dueItem struct {
	due int64 // CLOCK_MONOTONIC ns
	st  *pstream
}

type dueHeap []dueItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = dueItem{}
	*h = old[:len(old)-1]
	return it
}

// newScheduler starts the writer thread; nil if the timer cannot be made (then the
// goroutine path serves every stream).
func newScheduler() *scheduler {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	sc := &scheduler{tfd: fd, exited: make(chan struct{})}
	sc.base, sc.baseMono = time.Now(), osthread.Monotonic()
	go sc.run()
	return sc
}

func (sc *scheduler) mono(t time.Time) int64 { return sc.baseMono + int64(t.Sub(sc.base)) }

// arm sets the timer to fire at deadline (CLOCK_MONOTONIC ns; 0 disarms); sc.mu is held.
func (sc *scheduler) arm(deadline int64) {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(deadline)}
	unix.TimerfdSettime(sc.tfd, unix.TFD_TIMER_ABSTIME, &spec, nil)
	sc.armed = deadline
}

func (sc *scheduler) push(due int64, st *pstream) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.closed {
		return false
	}
	heap.Push(&sc.h, dueItem{due, st})
	if sc.armed == 0 || due < sc.armed {
		sc.arm(due)
	}
	return true
}

// submit queues a stream's first write; false when the scheduler is closed or absent.
func (sc *scheduler) submit(st *pstream) bool {
	if sc == nil || st.raw == nil {
		return false
	}
	st.writeFn = func(fd uintptr) bool {
		for {
			st.wn, st.werr = syscall.Write(int(fd), st.out)
			if st.werr != syscall.EINTR {
				return true // never wait for writability on the scheduler's thread
			}
		}
	}
	return sc.push(sc.mono(st.src.due(0)), st)
}

// close stops the thread and waits for it; streams still queued are dropped (their
// handlers see the server closing).
func (sc *scheduler) close() {
	if sc == nil {
		return
	}
	sc.mu.Lock()
	if !sc.closed {
		sc.closed = true
		sc.arm(1) // long past: the read returns at once
	}
	sc.mu.Unlock()
	<-sc.exited
}

func (sc *scheduler) run() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(sc.exited)
	var batch, again []dueItem
	var tick [8]byte
	for {
		sc.mu.Lock()
		if sc.closed {
			sc.h = nil
			unix.Close(sc.tfd)
			sc.mu.Unlock()
			return
		}
		for _, it := range again {
			heap.Push(&sc.h, it)
		}
		again = again[:0]
		now := osthread.Monotonic()
		batch = batch[:0]
		for len(sc.h) > 0 && sc.h[0].due <= now+int64(writeEarly) {
			batch = append(batch, heap.Pop(&sc.h).(dueItem))
		}
		if len(batch) == 0 {
			switch {
			case len(sc.h) > 0 && sc.h[0].due != sc.armed:
				sc.arm(sc.h[0].due)
			case len(sc.h) == 0 && sc.armed != 0:
				sc.arm(0)
			}
			sc.mu.Unlock()
			osthread.Read(sc.tfd, tick[:])
			continue
		}
		sc.mu.Unlock()
		for _, it := range batch {
			if next, ok := sc.write(it.st); ok {
				again = append(again, dueItem{next, it.st})
			}
		}
		clear(batch)
	}
}

// write makes the stream's due write and returns the deadline of its next one.
func (sc *scheduler) write(st *pstream) (next int64, more bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.canceled || st.result != 0 {
		return 0, false
	}
	f, s := st.src, st.srv
	now := time.Now()
	from := st.sent
	to := f.dueTokens(from, now.Add(writeEarly))
	late := now.Sub(f.due(from))
	s.fixedLate[min(from, 1)].observe(late)
	if s.lateness != nil {
		s.lateness.add(from == 0, late)
	}
	st.out, st.content = st.ck.appendDue(st.out[:0], st.content, from, to, st.includeUsage)
	t := time.Now().UnixNano()
	if err := st.raw.Write(st.writeFn); err != nil {
		st.finish(preciseErr, err)
		return 0, false
	}
	n, err := st.wn, st.werr
	st.sent = to
	st.writes++
	switch {
	case err == nil && n == len(st.out):
		st.stamp(t, from, to)
		if to == f.target {
			st.finish(preciseOK, nil)
			return 0, false
		}
		return sc.mono(f.due(to)), true
	case err == nil || errors.Is(err, syscall.EAGAIN):
		// The socket buffer is full (a slow reader): the handler writes the rest,
		// waiting for the socket as net/http would.
		n = max(n, 0)
		st.pending = append([]byte(nil), st.out[n:]...)
		st.pendingTokens, st.pendingFrom, st.pendingFinal = to-from, from, to == f.target
		st.finish(preciseFallback, nil)
	default:
		st.finish(preciseErr, err)
	}
	return 0, false
}
