//go:build linux

package transport

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"context"
	"net"
	"net/url"
	"os"
	"runtime"
	"testing"
	"time"
)

// idleCount is the raw pool's idle connections.
func idleCount(t *rawTransport) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.idle)
}

// waitFor polls cond every millisecond, for at most 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The spare filler: with rawSpareMinOpen connections open, a pool at half of rawSpare or
// less is filled back to rawSpare, never beyond; closeIdle empties it for good (nothing
// dialed before is pooled after); the filler ends by itself, leaving no goroutine or
// descriptor; a failed dial stops it for rawSpareRetry; a client with few connections
// open (sequential requests) gets no spares.
func TestRawSpareConnections(t *testing.T) {
	defer rawSpareIdle.Store(rawSpareIdle.Load())
	rawSpareIdle.Store(int64(50 * time.Millisecond))
	base := vllmtest.Start(t, &vllmtest.Server{})
	c := newTestClient(t, base, func(o *ClientOptions) { o.HTTPClient = HTTPClientRaw })
	tr := c.raw
	g0, f0 := runtime.NumGoroutine(), openFDs(t)

	if cn := tr.takeIdle(); cn != nil {
		t.Fatal("a new client's pool holds a connection")
	}
	time.Sleep(20 * time.Millisecond)
	if n := idleCount(tr); n != 0 {
		t.Fatalf("%d connections dialed for a client with none open", n)
	}
	if got := c.Prewarm(context.Background(), rawSpareMinOpen); got != rawSpareMinOpen {
		t.Fatalf("prewarmed %d, want %d", got, rawSpareMinOpen)
	}
	var taken []*rawConn
	for range rawSpareMinOpen - rawSpare/2 + 1 { // leaves rawSpare/2 - 1: low
		taken = append(taken, tr.takeIdle())
	}
	waitFor(t, "pool refilled", func() bool { return idleCount(tr) == rawSpare })
	time.Sleep(20 * time.Millisecond)
	if n := idleCount(tr); n != rawSpare {
		t.Fatalf("%d idle after the fill, want %d", n, rawSpare)
	}
	for _, cn := range taken {
		if cn == nil || !cn.reused {
			t.Fatalf("taken %+v: want a pooled connection (reused)", cn)
		}
		cn.close()
	}
	tr.takeIdle().close() // one taken: still above half, no fill
	tr.closeIdle()
	time.Sleep(20 * time.Millisecond)
	if n := idleCount(tr); n != 0 {
		t.Fatalf("%d idle after closeIdle, want 0", n)
	}
	waitFor(t, "filler ended", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return !tr.filling
	})
	// The server's side of each connection ends at its EOF, a moment later.
	var g, f int
	for range 100 {
		if g, f = runtime.NumGoroutine(), openFDs(t); g <= g0 && f <= f0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if g > g0 || f > f0 {
		t.Errorf("after the filler: %d goroutines (%d before), %d descriptors (%d before)", g, g0, f, f0)
	}

	// An endpoint that refuses: one failed dial, then no filler for rawSpareRetry.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead, _ := url.Parse("http://" + ln.Addr().String() + "/v1")
	ln.Close()
	d := newTestClient(t, dead, func(o *ClientOptions) { o.HTTPClient = HTTPClientRaw })
	d.raw.open.Store(rawSpareMinOpen) // as if a run had them open
	d.raw.takeIdle()
	waitFor(t, "failed dial", func() bool {
		d.raw.mu.Lock()
		defer d.raw.mu.Unlock()
		return !d.raw.filling && !d.raw.fillFail.IsZero()
	})
	d.raw.takeIdle()
	d.raw.mu.Lock()
	restarted := d.raw.filling
	d.raw.mu.Unlock()
	if restarted {
		t.Error("the filler started again right after a failed dial")
	}
}

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1 // the directory's own descriptor
}
