package sim

import (
	"context"
	"net"
	"sync"
	"syscall"
	"time"
)

// stampListener wraps the sim's listener so that each connection stamps its reads: the
// request log's read_unix_ns and the fixed profile's schedule start at the read that
// delivered the request, not at handler entry (which comes after net/http has parsed
// the head and scheduled the handler's goroutine).
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
	}
	return sc, nil
}

// stampConn is a server connection that remembers when its last read returned bytes.
type stampConn struct {
	net.Conn
	raw syscall.RawConn // nil if the conn has no fd (then the precise writer is not used)

	mu   sync.Mutex
	last time.Time // when the last Read that returned n > 0 returned
}

func (c *stampConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		t := time.Now()
		c.mu.Lock()
		c.last = t
		c.mu.Unlock()
	}
	return n, err
}

// lastRead is when the last read that returned bytes returned. Read at handler entry it
// is the read that completed the request's head: net/http reads a connection's next
// request only after the previous handler has returned, reads no body before the handler
// runs, and the sim's generation requests are POSTs, whose handler reads the body only
// after this call. (With HTTP pipelining the next request's bytes may come in the same
// read as this one's head, which is then the right stamp too.)
func (c *stampConn) lastRead() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
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
