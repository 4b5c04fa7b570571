package record

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"sync"
	"time"
)

// upstreamPool keeps the raw relay's idle keep-alive connections to its one upstream.
type upstreamPool struct {
	addr   string // host:port
	tls    *tls.Config
	dialer net.Dialer
	max    int
	// idleTimeout drops a connection idle for longer, as http.Transport's
	// IdleConnTimeout does (the proxy's 90 s): an upstream behind a load balancer may
	// have forgotten it, and a request on it would fail.
	idleTimeout time.Duration

	mu     sync.Mutex
	idle   []*upConn
	closed bool
}

// upConn is one connection to the upstream, with the reader its responses are read from.
type upConn struct {
	c      net.Conn
	tcp    net.Conn // the TCP connection under c (c itself for http), to look at while idle
	br     *bufio.Reader
	reused bool      // it came from the pool: it may have been closed while idle
	idleAt time.Time // when it was put in the pool
}

func newUpstreamPool(u *url.URL, tc *tls.Config) *upstreamPool {
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	p := &upstreamPool{addr: net.JoinHostPort(host, port), max: 4096, idleTimeout: 90 * time.Second}
	if u.Scheme == "https" {
		if tc == nil {
			tc = &tls.Config{}
		} else {
			tc = tc.Clone()
		}
		if tc.ServerName == "" {
			tc.ServerName = host
		}
		// The relay speaks HTTP/1.1 only: offered h2, a server would choose it.
		tc.NextProtos = []string{"http/1.1"}
		p.tls = tc
	}
	return p
}

// get returns an idle connection that is still open, else a new one.
func (p *upstreamPool) get(ctx context.Context) (*upConn, error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		uc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if time.Since(uc.idleAt) <= p.idleTimeout && idleOpen(uc.tcp) {
			uc.reused = true
			return uc, nil
		}
		uc.c.Close()
	}
	return p.dial(ctx)
}

func (p *upstreamPool) dial(ctx context.Context) (*upConn, error) {
	c, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	uc := &upConn{c: c, tcp: c}
	if p.tls != nil {
		tc := tls.Client(c, p.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		uc.c = tc
	}
	uc.br = bufio.NewReaderSize(uc.c, 32<<10)
	return uc, nil
}

// put keeps uc for the next request, unless the pool is closed or full.
func (p *upstreamPool) put(uc *upConn) {
	p.mu.Lock()
	if p.closed || len(p.idle) >= p.max || uc.br.Buffered() > 0 {
		p.mu.Unlock()
		uc.c.Close()
		return
	}
	uc.idleAt = time.Now()
	p.idle = append(p.idle, uc)
	p.mu.Unlock()
}

// close closes the idle connections and every one put back after.
func (p *upstreamPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, uc := range idle {
		uc.c.Close()
	}
}
