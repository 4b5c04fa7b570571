// Package stampconn wraps a server's listener so that each connection stamps its reads:
// when the read that delivered a request returned, and on Linux the kernel's receive
// timestamp of its bytes (SO_TIMESTAMPNS, internal/rxstamp). The simulated engine
// starts a request's schedule at the earliest of those stamps, as a real server's clock
// for the request does from the client's point of view; the request log records them.
package stampconn

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"
)

// Listener wraps a listener so that each accepted connection is a *Conn. A handler sees
// the read_unix_ns of the request log, when the read that delivered the request
// returned, rather than handler entry (which comes after net/http has parsed the head
// and scheduled the handler's goroutine). On Linux each read also carries the kernel's
// receive timestamp of the bytes: arrive_unix_ns, when the request reached the server's
// socket, before any of the server's own scheduling (its goroutine's wake-up through the
// netpoller, a P to run on: milliseconds at the tail with the sim on one busy core).
type Listener struct {
	net.Listener
	// OnAccept, when set (by tests), is called with each accepted connection before it
	// is wrapped.
	OnAccept func(net.Conn)
}

// Accept waits for the next connection and returns it as a *Conn.
func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.OnAccept != nil {
		l.OnAccept(c)
	}
	sc := &Conn{Conn: c}
	if sy, ok := c.(syscall.Conn); ok {
		sc.raw, _ = sy.SyscallConn()
		sc.kstamp = sc.raw != nil && enableStamps(sc.raw)
	}
	return sc, nil
}

// Conn is a server connection that remembers when its last read returned bytes.
type Conn struct {
	net.Conn
	raw    syscall.RawConn // nil if the conn has no fd
	kstamp bool            // reads go through recvmsg with the kernel's receive timestamps
	oob    []byte          // their control buffer (net/http reads a conn from one goroutine at a time)

	mu     sync.Mutex
	last   time.Time // when the last Read that returned n > 0 returned
	arrive int64     // the kernel's receive time of that read's bytes (CLOCK_REALTIME ns; 0: none)
}

// Read reads as net.Conn.Read does and stamps the read when it returns bytes.
func (c *Conn) Read(b []byte) (int, error) {
	var (
		n      int
		arrive int64
		err    error
	)
	if c.kstamp {
		n, arrive, err = c.readStamped(b)
	} else {
		n, err = c.Conn.Read(b)
	}
	if n > 0 {
		t := time.Now()
		c.mu.Lock()
		c.last, c.arrive = t, arrive
		c.mu.Unlock()
	}
	return n, err
}

// Raw is the connection's raw socket, for writers that write to it themselves (the
// sim's precise writer); nil if the conn has no fd.
func (c *Conn) Raw() syscall.RawConn { return c.raw }

// LastRead is when the last read that returned bytes returned, and when its bytes
// arrived (the kernel's stamp, zero when there is none). Read at handler entry it is the
// read that completed the request's head: net/http reads a connection's next request
// only after the previous handler has returned, reads no body before the handler runs,
// and the sim's generation requests are POSTs, whose handler reads the body only after
// this call. (With HTTP pipelining the next request's bytes may come in the same read as
// this one's head, which is then the right stamp too.)
func (c *Conn) LastRead() (read, arrive time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.arrive != 0 {
		arrive = time.Unix(0, c.arrive)
	}
	return c.last, arrive
}

type connKey struct{}

// ConnContext is for http.Server.ConnContext: it puts the stamping conn in each
// request's context.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if sc, ok := c.(*Conn); ok {
		return context.WithValue(ctx, connKey{}, sc)
	}
	return ctx
}

// FromContext returns the request's stamping conn, nil when the connection did not come
// from a Listener or the server set no ConnContext.
func FromContext(ctx context.Context) *Conn {
	sc, _ := ctx.Value(connKey{}).(*Conn)
	return sc
}
