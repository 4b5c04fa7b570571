//go:build linux

package transport

import (
	"context"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/llmreplay/llmreplay/internal/rxstamp"
	"github.com/llmreplay/llmreplay/replay/results"
)

// The raw client's connection pool: idle keep-alive connections (LIFO), the spare
// filler that dials ahead of a run's bursts, prewarm, and sockets taken out of the
// runtime's netpoller for the reactors.

// rawConn is a connection's socket: a descriptor the raw client owns, non-blocking, in
// no epoll but a reactor's while a response is read from it. Whoever holds the rawConn
// (the pool, or one request) closes it, once.
type rawConn struct {
	fd     int
	reused bool
	open   *atomic.Int64 // the transport's count of open connections
}

// close closes the socket; a second call does nothing.
func (cn *rawConn) close() {
	if cn.fd >= 0 {
		syscall.Close(cn.fd)
		cn.fd = -1
		if cn.open != nil {
			cn.open.Add(-1)
		}
	}
}

// get returns an idle connection or dials a new one.
func (t *rawTransport) get(ctx context.Context, deadline time.Time) (*rawConn, error) {
	if cn := t.takeIdle(); cn != nil {
		return cn, nil
	}
	return t.dial(ctx, deadline)
}

// takeIdle returns the most recently pooled connection, or nil; it never dials.
func (t *rawTransport) takeIdle() *rawConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.idle)
	if n <= rawSpare/2 && t.open.Load() >= rawSpareMinOpen {
		t.wantSpareLocked()
	}
	if n == 0 {
		return nil
	}
	cn := t.idle[n-1]
	t.idle = t.idle[:n-1]
	cn.reused = true
	return cn
}

// rawSpare is how many idle connections the spare filler keeps ready once the pool has
// run low (half of it or fewer). Without it, a request due when the pool is empty (its
// in-flight count at a new high: every Poisson burst) is sent by a new goroutine that
// dials first, and that wait is its lateness: at 300 req/s of 100-token streams it was
// most of the dispatcher's lateness p99 (replaybench fidelity: p99 1.43 and 2.49 ms with
// the 64 prewarmed connections alone, 0.89 and 1.09 with 400; the C sleeper's floor
// 0.65 to 1.03 in the same runs).
const rawSpare = 8

// rawSpareMinOpen is how many connections must be open before the filler starts: a load
// of a few requests at a time (sequential ones: one connection, reused) needs no spares,
// and the server sees no connection it did not need.
const rawSpareMinOpen = 2 * rawSpare

// rawSpareRetry is how long the filler stays stopped after a failed dial (the endpoint
// down, or refusing connections): requests dial for themselves meanwhile, and their
// failures are what the run reports.
const rawSpareRetry = time.Second

// rawSpareIdle is how long the filler waits for a pool that runs low again before it
// ends: a run leaves the goroutines it found (a variable for tests).
// Atomic: fillers of earlier tests' clients may still read it when a test changes it.
var rawSpareIdle atomic.Int64 // ns

func init() { rawSpareIdle.Store(int64(time.Second)) }

// wantSpareLocked starts the filler, or wakes it; t.mu is held.
func (t *rawTransport) wantSpareLocked() {
	if t.filling {
		select {
		case t.fillWake <- struct{}{}:
		default:
		}
		return
	}
	if !t.fillFail.IsZero() && time.Since(t.fillFail) < rawSpareRetry {
		return
	}
	if t.fillWake == nil {
		t.fillWake = make(chan struct{}, 1)
	}
	t.filling = true
	ctx, cancel := context.WithCancel(context.Background())
	t.fillStop = cancel
	go t.fillSpare(ctx, cancel, t.gen)
}

// fillSpare dials, one connection at a time, until the pool holds rawSpare (or maxIdle)
// idle connections, then waits to be woken; it ends after rawSpareIdle without a wake,
// at a failed dial, or when closeIdle has run since it started (gen).
func (t *rawTransport) fillSpare(ctx context.Context, cancel context.CancelFunc, gen int) {
	defer cancel()
	idle := time.NewTimer(time.Duration(rawSpareIdle.Load()))
	defer idle.Stop()
	for {
		t.mu.Lock()
		if t.gen != gen {
			t.filling = false
			t.mu.Unlock()
			return
		}
		need := len(t.idle) < min(rawSpare, t.maxIdle)
		t.mu.Unlock()
		if !need {
			idle.Reset(time.Duration(rawSpareIdle.Load()))
			select {
			case <-t.fillWake:
				continue
			case <-idle.C:
			}
			t.mu.Lock()
			if len(t.fillWake) == 0 { // no wake raced the timer
				t.filling = false
				t.mu.Unlock()
				return
			}
			t.mu.Unlock()
			continue
		}
		cn, err := t.dial(ctx, time.Now().Add(10*time.Second))
		t.mu.Lock()
		switch {
		case t.gen != gen: // closeIdle ran (and canceled a dial in progress: not a failure)
			t.filling = false
		case err != nil:
			t.fillFail = time.Now()
			t.filling = false
		case len(t.idle) >= t.maxIdle:
			t.filling = false
		default:
			cn.reused = true // pooled: the server may close it while it waits, as any idle one
			t.idle = append(t.idle, cn)
			t.mu.Unlock()
			continue
		}
		t.mu.Unlock()
		if cn != nil {
			cn.close()
		}
		return
	}
}

func (t *rawTransport) dial(ctx context.Context, deadline time.Time) (*rawConn, error) {
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	c, err := t.dialer.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	fd, err := ownSocket(c.(*net.TCPConn))
	c.Close()
	if err != nil {
		return nil, err
	}
	// The kernel's receive timestamps date each chunk (rawResp.stamp); without them
	// (an old kernel, a seccomp filter) the read's return does.
	rxstamp.Enable(fd)
	t.open.Add(1)
	return &rawConn{fd: fd, open: &t.open}, nil
}

// ownSocket returns a duplicate of c's socket (close-on-exec, non-blocking as c's: the
// flag is the socket's). Closing c then takes c's descriptor out of the runtime's
// netpoller (it deregisters a descriptor before closing it) and leaves the socket open
// through the duplicate, which no epoll but a reactor's will hold. Dialing with net.Dialer
// keeps its name resolution, address fallback, timeout, context and keep-alive settings.
func ownSocket(c *net.TCPConn) (int, error) {
	sc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	cerr := sc.Control(func(s uintptr) {
		r, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			err = os.NewSyscallError("fcntl", e)
			return
		}
		fd = int(r)
	})
	if cerr != nil {
		return -1, cerr
	}
	return fd, err
}

// put returns a connection whose last response ended cleanly to the pool.
func (t *rawTransport) put(cn *rawConn) {
	t.mu.Lock()
	if len(t.idle) >= t.maxIdle {
		t.mu.Unlock()
		cn.close()
		return
	}
	t.idle = append(t.idle, cn)
	t.mu.Unlock()
}

// closeIdle closes the idle connections.
func (t *rawTransport) closeIdle() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.gen++ // the spare filler pools nothing it dialed before this
	if t.filling {
		t.fillStop() // its dial in progress ends
		select {
		case t.fillWake <- struct{}{}:
		default:
		}
	}
	t.mu.Unlock()
	for _, cn := range idle {
		cn.close()
	}
}

// prewarm opens up to n connections at once, each with a GET BASE/models, and pools
// those that answer 200; it returns how many did.
func (t *rawTransport) prewarm(ctx context.Context, n int) int {
	n = min(n, t.maxIdle)
	conns := make(chan *rawConn, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(10 * time.Second)
			cn, err := t.dial(ctx, deadline)
			if err != nil {
				return
			}
			if err := writeAll(ctx, cn.fd, [][]byte{t.models}, deadline); err != nil {
				cn.close()
				return
			}
			bp := t.bufs.Get().(*[]byte)
			defer t.bufs.Put(bp)
			p := &rawResp{buf: *bp, res: &results.Result{}, conn: cn, deadline: deadline, discard: true}
			err = p.run(ctx)
			if err != nil || p.state != rsDone || p.closeConn || p.status != http.StatusOK || p.lo != p.hi {
				cn.close()
				return
			}
			conns <- cn
		}()
	}
	wg.Wait()
	close(conns)
	got := 0
	for cn := range conns {
		t.put(cn)
		got++
	}
	return got
}

// appendHead appends r's request head for a body of n bytes: the constant part, r's
