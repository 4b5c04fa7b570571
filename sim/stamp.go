package sim

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"
)

// stampListener wraps the sim's listener so that each connection stamps its reads: the
// request log's read_unix_ns is when the read that delivered the request returned, not
// handler entry (which comes after net/http has parsed the head and scheduled the
// handler's goroutine). On Linux each read also carries the kernel's receive timestamp of
// the bytes (SO_TIMESTAMPNS, internal/rxstamp): arrive_unix_ns, when the request reached
// the server's socket, before any of the sim's own scheduling (its goroutine's wake-up
// through the netpoller, a P to run on: milliseconds at the tail with the sim on one busy
// core). The schedule of every profile starts at the arrival, as a real server's clock
// for the request does from the client's point of view.
type stampListener struct{ net.Listener }

// acceptHook, when set (by tests), is called with each accepted connection.
var acceptHook func(net.Conn)

func (l stampListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if acceptHook != nil {
		acceptHook(c)
	}
	sc := &stampConn{Conn: c}
	if sy, ok := c.(syscall.Conn); ok {
		sc.raw, _ = sy.SyscallConn()
		sc.kstamp = sc.raw != nil && enableStamps(sc.raw)
	}
	return sc, nil
}

// stampConn is a server connection that remembers when its last read returned bytes.
type stampConn struct {
	net.Conn
	raw    syscall.RawConn // nil if the conn has no fd (then the precise writer is not used)
	kstamp bool            // reads go through recvmsg with the kernel's receive timestamps
	oob    []byte          // their control buffer (net/http reads a conn from one goroutine at a time)

	mu     sync.Mutex
	last   time.Time // when the last Read that returned n > 0 returned
	arrive int64     // the kernel's receive time of that read's bytes (CLOCK_REALTIME ns; 0: none)
}

func (c *stampConn) Read(b []byte) (int, error) {
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

// lastRead is when the last read that returned bytes returned, and when its bytes
// arrived (the kernel's stamp, zero when there is none). Read at handler entry it is the
// read that completed the request's head: net/http reads a connection's next request
// only after the previous handler has returned, reads no body before the handler runs,
// and the sim's generation requests are POSTs, whose handler reads the body only after
// this call. (With HTTP pipelining the next request's bytes may come in the same read as
// this one's head, which is then the right stamp too.)
func (c *stampConn) lastRead() (read, arrive time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.arrive != 0 {
		arrive = time.Unix(0, c.arrive)
	}
	return c.last, arrive
}

type connKey struct{}

// connContext is http.Server.ConnContext: it puts the stamping conn in each request's
// context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if sc, ok := c.(*stampConn); ok {
		return context.WithValue(ctx, connKey{}, sc)
	}
	return ctx
}

// connFrom returns the request's stamping conn, nil when the server was not started by
// Start (Server.Handler under another http.Server).
func connFrom(ctx context.Context) *stampConn {
	sc, _ := ctx.Value(connKey{}).(*stampConn)
	return sc
}
