//go:build linux

package transport

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/llmreplay/llmreplay/internal/osthread"
	"github.com/llmreplay/llmreplay/internal/raceio"
	"github.com/llmreplay/llmreplay/internal/rxstamp"
	"github.com/llmreplay/llmreplay/internal/uring"
)

// The stream reactor reads the raw client's responses. A few goroutines, each locked to
// its OS thread, each wait in their own epoll over their share of the connections that
// have a response in flight, and read each ready connection once per readiness: the read
// is stamped with the run clock as it returns, and the bytes are framed and parsed in
// place (rawResp.process). A request the dispatcher wrote whole has no goroutine: the
// reactor ends it on its thread once its response is over (doRawAsync). Any other
// request's goroutine waits once, for the response's end. A goroutine parked and woken by
// the netpoller per chunk cost a quarter of the replayer's CPU in the scheduler, and a
// goroutine per request still cost two thread wake-ups per request (replaybench fidelity).
//
// The sockets are not in Go's netpoller: rawTransport.dial takes a duplicate of the dialed
// socket's descriptor and closes the net.Conn, which removes it from the runtime's epoll
// (else that epoll would be woken by every chunk too). A connection is in a reactor's epoll
// only while a response is read from it: add registers it, finish removes it before the
// request's goroutine is told (or the request is ended), so the owner of a rawConn never
// closes a descriptor a reactor still reads.
//
// The reactors are a process-wide set of rawReactorThreads goroutines (each holding one
// locked thread, an epoll and an eventfd), started by the first response to read. A
// Client has no end its users must call, so a reactor ends by itself once it has had no
// stream for reactorIdle: a run leaves the goroutines and descriptors it found,
// and the next response starts the reactor again (TestRawRunLeavesNoGoroutinesOrFDs).
//
// Deadlines (the request's timeout, the drain after [DONE]) are checked every
// reactorScan by the thread itself; a cancellation (the run's hard stop) wakes the thread
// through its eventfd at once. A peer's FIN or reset is an epoll event (EPOLLRDHUP,
// EPOLLHUP, EPOLLERR), read at once.

// rawReactorThreads is the number of reactor threads: one per 4 CPUs, at least one. One
// thread reads 300 streams of 100 tokens a second on a 2-vCPU machine with room to spare,
// and two measured no less CPU per token there (replaybench fidelity: 15.9 and
// 15.3 µs/token with two, 15.5 and 15.1 with one, same sitting); a reactor thread beyond
// the CPUs the process has only adds wake-ups and hand-offs of Ps.
var rawReactorThreads = max(1, runtime.NumCPU()/4)

// ReactorThreadName is the reactor threads' name (top -H, /proc/self/task/TID/comm).
const ReactorThreadName = "llmr-reactor"

// reactorScan is how often a reactor with streams checks their deadlines.
const reactorScan = 50 * time.Millisecond

// reactorIdle is how long a reactor with no stream waits before it ends (a variable for
// tests).
var reactorIdle = time.Second

// ReactorBatchMin is how many streams a reactor must read, all of them batchable
// (rawResp.batch), before it batches its reads (ClientOptions.ReadBatch): below it,
// wake-ups are few, and every chunk is read as it arrives.
const ReactorBatchMin = 64

// reactorBatchWaits counts the reactors' batching waits (tests; replaybench prints it).
var reactorBatchWaits atomic.Int64

// ReactorBatchWaits returns how many times a reactor has waited to batch its reads
// (ClientOptions.ReadBatch) in this process.
func ReactorBatchWaits() int64 { return reactorBatchWaits.Load() }

// reactorRing says whether a reactor reads the streams it found ready in one io_uring
// submission (readRing) rather than one recvmsg each; SetReactorRing sets it, and a
// reactor started after reads it. Where the kernel has no io_uring (or filters it), the
// reactor reads with recvmsg whatever this says.
var reactorRing atomic.Bool

func init() { reactorRing.Store(true) }

// SetReactorRing chooses whether reactors started from now on read through io_uring
// (true, the default) or with one recvmsg(2) per stream (replaybench -ring=false).
func SetReactorRing(on bool) { reactorRing.Store(on) }

// reactorRingReads counts the reads made through the reactors' rings (tests; replaybench
// prints it).
var reactorRingReads atomic.Int64

// ReactorRingReads returns how many stream reads the reactors made through io_uring in
// this process.
func ReactorRingReads() int64 { return reactorRingReads.Load() }

// reactorRingMin is the fewest ready streams a reactor reads through its ring: one read
// is one system call either way.
const reactorRingMin = 2

type reactor struct {
	ep  int // epoll
	efd int // eventfd: a cancellation, or a first stream while the thread waits untimed

	mu       sync.Mutex
	streams  map[int32]*rawResp // by descriptor
	pending  int                // handed out by reactorFor, not yet added (or failed to be)
	prompt   int                // streams whose reads must not be batched (rawResp.batch 0)
	batch    int64              // the batch wait of the last batchable stream added, ns
	canceled []*rawResp
	untimed  bool // the thread waits without the deadline scan: a new stream must wake it
	exited   bool // the loop has ended and closed ep and efd

	hold bool // the thread keeps its P while it waits in epoll (it has an extra P of its own)
}

var (
	reactorsMu sync.Mutex
	reactors   []*reactor // a slot is nil until started, and again once its reactor ended
)

// ReactorsRunning returns how many reactors run: each ends a second after its last
// stream, taking its thread, epoll and io_uring descriptors with it (leak checks).
func ReactorsRunning() int {
	reactorsMu.Lock()
	defer reactorsMu.Unlock()
	n := 0
	for _, r := range reactors {
		if r != nil {
			n++
		}
	}
	return n
}

// reactorFor returns the reactor that will read fd's responses, starting it if needed.
// The caller must add (or drop) exactly one stream to it: until then the reactor counts
// it as pending and does not end.
func reactorFor(fd int) (*reactor, error) {
	reactorsMu.Lock()
	defer reactorsMu.Unlock()
	if reactors == nil {
		reactors = make([]*reactor, rawReactorThreads)
	}
	i := fd % len(reactors)
	r := reactors[i]
	if r == nil {
		var err error
		if r, err = newReactor(); err != nil {
			return nil, err
		}
		reactors[i] = r
		r.hold = claimP(&extraP.reactors) // a P of its own, kept while it waits (extrap_linux.go)
		go r.loop(i)
	}
	r.mu.Lock()
	r.pending++
	r.mu.Unlock()
	return r, nil
}

// retire ends slot i's reactor r if it still has no stream; it reports whether it did.
// Called by r's own thread, which then returns.
func (r *reactor) retire(i int) bool {
	reactorsMu.Lock()
	defer reactorsMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.streams) > 0 || r.pending > 0 {
		return false
	}
	r.exited = true
	syscall.Close(r.ep)
	syscall.Close(r.efd)
	if reactors[i] == r {
		reactors[i] = nil
	}
	if r.hold {
		releaseP(&extraP.reactors)
	}
	return true
}

func newReactor() (*reactor, error) {
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	efd, _, e := syscall.RawSyscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if e != 0 {
		syscall.Close(ep)
		return nil, os.NewSyscallError("eventfd2", e)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(efd)}
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, int(efd), &ev); err != nil {
		syscall.Close(ep)
		syscall.Close(int(efd))
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	return &reactor{ep: ep, efd: int(efd), streams: make(map[int32]*rawResp)}, nil
}

// add starts reading p's response (p.fd, p.done set). From here until p.done is closed,
// p belongs to the reactor's thread.
func (r *reactor) add(p *rawResp) error {
	r.mu.Lock()
	r.pending--
	r.streams[int32(p.fd)] = p
	r.counted(p, 1)
	wake := r.untimed
	r.untimed = false
	r.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(p.fd)}
	if err := syscall.EpollCtl(r.ep, syscall.EPOLL_CTL_ADD, p.fd, &ev); err != nil {
		r.mu.Lock()
		delete(r.streams, int32(p.fd))
		r.counted(p, -1)
		r.mu.Unlock()
		return os.NewSyscallError("epoll_ctl", err)
	}
	if wake { // its deadline must be watched
		r.wake()
	}
	return nil
}

// cancel ends p's read promptly, as its deadline would (ctx canceled); a p already
// finished is left alone.
func (r *reactor) cancel(p *rawResp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exited { // p ended long ago (its reactor has since retired)
		return
	}
	r.canceled = append(r.canceled, p)
	r.wakeLocked()
}

func (r *reactor) wake() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wakeLocked()
}

// wakeLocked wakes the thread through its eventfd; r.mu is held, so the descriptor is
// not closed (by retire) under the write.
func (r *reactor) wakeLocked() {
	if r.exited {
		return
	}
	one := uint64(1)
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(r.efd), uintptr(unsafe.Pointer(&one)), 8)
}

// finish takes p out of the epoll and hands it back: to its goroutine, or to p.onDone,
// called here on the reactor's thread (doRawAsync).
func (r *reactor) finish(p *rawResp) {
	syscall.EpollCtl(r.ep, syscall.EPOLL_CTL_DEL, p.fd, nil)
	r.mu.Lock()
	delete(r.streams, int32(p.fd))
	r.counted(p, -1)
	r.mu.Unlock()
	if p.onDone != nil {
		p.onDone(p)
		return
	}
	close(p.done)
}

// counted counts p in (d 1) or out of (d -1) the streams; r.mu is held.
func (r *reactor) counted(p *rawResp, d int) {
	if p.batch == 0 {
		r.prompt += d
	} else if d > 0 {
		r.batch = p.batch
	}
}

// batchWaitLocked is how long the reactor waits after a wake before it looks for ready
// streams again: ClientOptions.ReadBatch while it reads at least ReactorBatchMin
// streams and every one of them may be batched, else 0. r.mu is held.
func (r *reactor) batchWaitLocked() int64 {
	if r.prompt > 0 || len(r.streams) < ReactorBatchMin {
		return 0
	}
	return r.batch
}

type readyStream struct {
	p  *rawResp
	ev uint32
}

// ringRead is one stream's read in a ring submission: the message (into the stream's
// buffer from p.hi, with room for the receive stamp) and the read's result.
type ringRead struct {
	m    rxstamp.Msg
	p    *rawResp
	room int
	res  int32
	done bool
}

// loop is reactor r's thread, in slot i of the set.
func (r *reactor) loop(i int) {
	runtime.LockOSThread() // never unlocked: the thread ends with the reactor
	osthread.SetName(ReactorThreadName)
	evs := make([]syscall.EpollEvent, 256)
	var ring *uring.Ring
	var reads []ringRead
	if reactorRing.Load() {
		// A ring of its own, made on its thread. Without one (an old kernel, io_uring
		// disabled or filtered) the reactor reads with recvmsg.
		if rg, err := uring.New(uint32(len(evs))); err == nil && rg.Entries() >= len(evs) {
			ring, reads = rg, make([]ringRead, len(evs))
		} else if err == nil {
			rg.Close()
		}
	}
	var ready []readyStream
	var canceled, expired []*rawResp
	var buf [8]byte
	var oob [rxstamp.OOBSize]byte
	nextScan := time.Now().Add(reactorScan)
	var idleSince time.Time // when the reactor last found itself with no stream
	for {
		r.mu.Lock()
		idle := len(r.streams) == 0 && r.pending == 0
		if !idle {
			idleSince = time.Time{}
		} else if idleSince.IsZero() {
			idleSince = time.Now()
		}
		// A wait may end early with no event (EINTR: the runtime's preemption signal ends a
		// held wait every 10 ms): the reactor retires only once idle for reactorIdle.
		wait := int(reactorIdle / time.Millisecond)
		if idle {
			wait = max(1, int((reactorIdle-time.Since(idleSince))/time.Millisecond)+1)
		}
		if len(r.streams) > 0 {
			wait = max(0, int(time.Until(nextScan)/time.Millisecond)+1)
		} else {
			r.untimed = true
		}
		r.mu.Unlock()
		var n int
		var err error
		if r.hold {
			n, err = osthread.EpollWaitHold(r.ep, evs, wait)
		} else {
			n, err = osthread.EpollWait(r.ep, evs, wait)
		}
		if err != nil {
			n = 0 // EINTR
		}
		woke := osthread.Monotonic()
		if n == 0 && idle && time.Since(idleSince) >= reactorIdle && r.retire(i) {
			if ring != nil {
				ring.Close()
			}
			return
		}
		ready = ready[:0]
		r.mu.Lock()
		r.untimed = false
		for _, ev := range evs[:n] {
			if ev.Fd == int32(r.efd) {
				syscall.RawSyscall(syscall.SYS_READ, uintptr(r.efd), uintptr(unsafe.Pointer(&buf[0])), 8)
				continue
			}
			if p := r.streams[ev.Fd]; p != nil {
				ready = append(ready, readyStream{p, ev.Events})
			}
		}
		canceled = append(canceled[:0], r.canceled...)
		clear(r.canceled)
		r.canceled = r.canceled[:0]
		var batch int64 // decided at the wake, with the streams it found
		if n > 0 {
			batch = r.batchWaitLocked()
		}
		r.mu.Unlock()

		if ring != nil && len(ready) >= reactorRingMin {
			if !r.readRing(ring, ready, reads, oob[:]) {
				ring.Close() // what the kernel did not take is dropped with it
				ring, reads = nil, nil
			}
		} else {
			for _, s := range ready {
				if s.p.onReady(s.ev, oob[:]) {
					r.finish(s.p)
				}
			}
		}
		for _, p := range canceled {
			r.mu.Lock()
			live := r.streams[int32(p.fd)] == p
			r.mu.Unlock()
			if live {
				p.timedOut = true
				r.finish(p)
			}
		}
		clear(canceled)
		// Batching: the next wait starts ReadBatch after this wake, so whatever arrives
		// meanwhile is read in one wake-up instead of one each. A wake-up costs a thread
		// switch each way; the chunks keep their kernel arrival stamps.
		if batch > 0 {
			reactorBatchWaits.Add(1)
			if r.hold {
				osthread.SleepHold(woke + batch) // a signal ends it early: no harm
			} else {
				osthread.SleepUntil(woke + batch)
			}
		}
		if now := time.Now(); !now.Before(nextScan) {
			nextScan = now.Add(reactorScan)
			expired = expired[:0]
			r.mu.Lock()
			for _, p := range r.streams {
				if !p.deadline.IsZero() && !now.Before(p.deadline) {
					expired = append(expired, p)
				}
			}
			r.mu.Unlock()
			for _, p := range expired {
				p.timedOut = true
				r.finish(p)
			}
			clear(expired)
		}
	}
}

// readRing reads every ready stream once in one io_uring submission, then takes each
// read as onReady takes its first: a stream whose read filled its buffer, or whose peer
// has closed, is read on with recvmsg (readOn), and one that is over is finished. The
// reads are non-blocking, so each has completed when Submit returns (uring.New checked
// that the kernel completes them at once). It reports false when the kernel did not take
// every read: the ring must not be used again (a read left in it would run at the next
// submission, into a buffer moved on from), and the streams it did not read were read
// with recvmsg.
func (r *reactor) readRing(ring *uring.Ring, ready []readyStream, reads []ringRead, oob []byte) bool {
	queued := 0
	for i, s := range ready {
		p, rd := s.p, &reads[i]
		rd.p, rd.done = nil, false
		if !p.makeRoom() {
			p.err = errRawHeadTooLarge
			r.finish(p)
			continue
		}
		rd.p, rd.room = p, len(p.buf)-p.hi
		ring.PrepRecvmsg(p.fd, rd.m.Header(p.buf[p.hi:]), uint64(i)) // the ring has a slot per epoll event
		queued++
	}
	took, err := ring.Submit()
	reaped := ring.Reap(func(i uint64, res int32) {
		reads[i].res, reads[i].done = res, true
	})
	reactorRingReads.Add(int64(took))
	for i, s := range ready {
		rd := &reads[i]
		p := rd.p
		if p == nil {
			continue
		}
		rd.p = nil
		hup := hangUp(s.ev)
		if !rd.done { // not taken: read it as onReady would
			if p.readOn(hup, oob, 0) {
				r.finish(p)
			}
			continue
		}
		n, errno, arrived := 0, syscall.Errno(0), int64(0)
		if rd.res < 0 {
			errno = syscall.Errno(-rd.res)
		} else {
			n = int(rd.res)
			raceio.Acquire(p.fd)
			arrived = rd.m.Stamp()
		}
		over, again := p.afterRead(n, arrived, errno, rd.room, hup)
		if !over && again {
			full := 0
			if errno == 0 && n == rd.room {
				full = 1
			}
			over = p.readOn(hup, oob, full)
		}
		if over {
			r.finish(p)
		}
	}
	return err == nil && took == queued && reaped == queued
}

// onReady reads p's connection after a readiness event ev (oob: the reactor's control
// buffer for the kernel's receive timestamps): once if the read leaves the
// socket empty (it returned less than the room given), again while reads fill the buffer
// (up to rawMaxFullReads: the epoll is level-triggered, so a socket still holding data is
// ready again at the next wait, after the other streams had their turn), and until the
// end of the stream or EAGAIN when the peer has closed or failed (ev says so: the read
// that returns 0 or the error must be made). It reports whether the response is over.
func (p *rawResp) onReady(ev uint32, oob []byte) bool {
	return p.readOn(hangUp(ev), oob, 0)
}

// hangUp reports whether a readiness event says the peer closed or the connection failed.
func hangUp(ev uint32) bool {
	return ev&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0
}

// readOn is onReady's loop, after full reads that filled the buffer.
func (p *rawResp) readOn(hup bool, oob []byte, full int) bool {
	for full < rawMaxFullReads {
		if !p.makeRoom() {
			p.err = errRawHeadTooLarge
			return true
		}
		room := len(p.buf) - p.hi
		n, arrived, err := rxstamp.Recv(p.fd, p.buf[p.hi:], oob)
		over, again := p.afterRead(n, arrived, err, room, hup)
		if over {
			return true
		}
		if !again {
			return false
		}
		if err == 0 && n == room {
			full++
		}
	}
	return false
}

// afterRead takes the outcome of one read of room bytes into p.buf[p.hi:] (n bytes, the
// kernel's receive stamp arrived, or errno): over when the response is over, again when
// the socket must be read again now (the read filled the buffer, was interrupted, or left
// bytes of a peer that has closed).
func (p *rawResp) afterRead(n int, arrived int64, errno syscall.Errno, room int, hup bool) (over, again bool) {
	switch errno {
	case 0:
	case syscall.EINTR:
		return false, true
	case syscall.EAGAIN:
		return false, false
	default:
		p.opErr = os.NewSyscallError("read", errno)
		return true, false
	}
	stamp := p.stamp(arrived)
	if n == 0 {
		p.eof = true
	} else {
		p.hi += n
		p.gotBytes = true
	}
	if p.process(stamp) || p.eof {
		return true, false
	}
	return false, n == room || hup
}

// stamp is the run-clock time of a read that returned bytes the kernel received at
// arrived (CLOCK_REALTIME ns, SO_TIMESTAMPNS of the last segment read; 0: unstamped).
// The bytes' arrival, not the read's return, is what a chunk time means (docs/metrics.md):
// the time the reactor thread took to wake and get a P back is the replayer's, not the
// server's, and it is milliseconds at the tail on a busy machine. One clock reading gives
// both clocks (time.Now carries the wall and the monotonic reading), so the arrival is put
// on the run clock by their difference at the read; the result is clamped between the
// stream's last stamp (never before the request was sent) and the read's return, so a
// step of the wall clock can never order chunks wrongly or date one in the future.
func (p *rawResp) stamp(arrived int64) int64 {
	now := time.Now()
	read := int64(now.Sub(p.clk.Start))
	s := read
	if arrived > 0 {
		s = min(read, arrived-(now.UnixNano()-read))
	}
	s = max(s, p.lastStamp, p.res.SentNS)
	p.lastStamp = s
	return s
}
