//go:build linux

package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/uring"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1 // the directory's own descriptor
}

// TestRawRunLeavesNoGoroutinesOrFDs: runs of the raw client against the simulated engine,
// with faults (503s, disconnects, malformed streams, stalls cut by the timeout) and one
// run aborted mid-stream, leave as many goroutines and open descriptors as they found once
// the client is closed: the reactor threads included, which end once idle for
// reactorIdle (the counts are taken after a warm-up run's reactor has ended, and again
// after the runs, when the reactor started by them must have ended too).
func TestRawRunLeavesNoGoroutinesOrFDs(t *testing.T) {
	cfg, err := sim.Profile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.TimeScale = 10
	for _, f := range []string{"503=0.1", "disconnect=0.15", "malformed=0.1", "stall=0.1:3s"} {
		if err := sim.ParseFault(f, &cfg.Faults); err != nil {
			t.Fatal(err)
		}
	}
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	srv, err := sim.Start(sctx, "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base, _ := wire.BaseURL(srv.BaseURL())
	run := func(ctx context.Context, n int) []results.Result {
		c, err := transport.NewClient(transport.ClientOptions{BaseURL: base, API: wire.APICompletions, Backend: wire.BackendVLLM, Model: cfg.Model,
			Timeout: 300 * time.Millisecond, MaxInflight: 64, HTTPClient: transport.HTTPClientRaw})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Prewarm(ctx, 4)
		_, res, _ := runTrace(t, ctx, c, uniformTrace(n, 2*time.Millisecond, 20, 8), func(o *Options) { o.Grace = 0 })
		return res
	}
	settled := func(g0, f0 int) (int, int) {
		var g, f int
		for range 100 {
			g, f = runtime.NumGoroutine(), openFDs(t)
			if g <= g0 && f <= f0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		return g, f
	}
	retired := func(when string) { waitRetired(t, when) }
	run(context.Background(), 5) // the sim's and the client's first-use state
	retired("after the warm-up")
	g0, f0 := settled(0, 0) // whatever the warm-up's ends leave settling, a second
	g0, f0 = settled(g0, f0)

	res := run(context.Background(), 60)
	st := byStatus(res)
	if st[results.StatusOK] == 0 || st[results.StatusOK] == len(res) {
		t.Errorf("statuses %v: want some ok and some faults", st)
	}
	ctx, abort := context.WithCancel(context.Background())
	time.AfterFunc(40*time.Millisecond, abort)
	res = run(ctx, 60)
	if st := byStatus(res); st[results.StatusCanceled] == 0 {
		t.Errorf("aborted run: statuses %v, want some canceled", st)
	}
	retired("after the runs")
	if g, f := settled(g0, f0); g > g0 || f > f0 {
		buf := make([]byte, 1<<20)
		t.Fatalf("after the runs: %d goroutines (%d before), %d descriptors (%d before)\n%s",
			g, g0, f, f0, buf[:runtime.Stack(buf, true)])
	}
}

// waitRetired waits (10 s at most) until no reactor runs: each ends reactorIdle after its
// last stream.
func waitRetired(t *testing.T, when string) {
	t.Helper()
	for range 200 {
		if transport.ReactorsRunning() == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: a reactor still runs 10 s after its last stream", when)
}

// goroutinesIn counts the goroutines whose stack holds fn (a function's full name).
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), fn+"(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestOpenLoopNoGoroutinePerResponse: a request the dispatcher wrote whole on a pooled
// connection is ended by the reactor that reads its response (the raw client's doRawAsync): with n
// responses in flight at once (the server holds each until all n are), no goroutine of
// the replayer runs a request, and every record is complete.
func TestOpenLoopNoGoroutinePerResponse(t *testing.T) {
	const n = 40
	srv := &vllmtest.Server{ITL: time.Millisecond, HoldFor: n}
	base := vllmtest.Start(t, srv)
	c := newTestClient(t, base, func(o *transport.ClientOptions) { o.HTTPClient = transport.HTTPClientRaw })
	if got := c.Prewarm(context.Background(), n); got != n {
		t.Fatalf("prewarmed %d connections, want %d", got, n)
	}
	var reqs []trace.Request
	for i := range n {
		reqs = append(reqs, trace.Request{ID: int64(i), Arrival: time.Duration(i) * time.Millisecond, PromptTokens: 3, OutputTokens: 5})
	}
	inSend := -1
	var once sync.Once
	_, res, _ := runTrace(t, context.Background(), c, reqs, func(o *Options) {
		o.seams.ended = func(*results.Result) {
			// The first request to end: the other n-1 are still in flight.
			once.Do(func() { inSend = goroutinesIn("github.com/llmreplay/llmreplay/replay.(*dispatcher).send") })
		}
	})
	if m := srv.MaxSeen.Load(); m != n {
		t.Fatalf("the server saw at most %d requests at once, want %d", m, n)
	}
	if inSend != 0 {
		t.Errorf("with %d responses in flight, %d goroutines in dispatcher.send, want 0", n-1, inSend)
	}
	if len(res) != n {
		t.Fatalf("%d records, want %d", len(res), n)
	}
	for _, r := range res {
		if r.Status != results.StatusOK || len(r.ChunkNS) != 5 || r.OutputTokens != 5 {
			t.Errorf("request %d: %s %q, %d chunks, %d output tokens", r.RequestID, r.Status, r.Error, len(r.ChunkNS), r.OutputTokens)
		}
	}
}

// TestOpenLoopAbortEndsReactorRequests: a hard stop ends at once every request the
// reactors hold (the raw client's doRawAsync): all n are recorded canceled, and Run returns.
func TestOpenLoopAbortEndsReactorRequests(t *testing.T) {
	const n = 20
	srv := &vllmtest.Server{Release: make(chan struct{})}
	defer close(srv.Release)
	base := vllmtest.Start(t, srv)
	c := newTestClient(t, base, func(o *transport.ClientOptions) { o.HTTPClient = transport.HTTPClientRaw })
	if got := c.Prewarm(context.Background(), n); got != n {
		t.Fatalf("prewarmed %d connections, want %d", got, n)
	}
	ctx, _, abort := WithStop(context.Background())
	defer abort()
	go func() {
		for srv.Inflight.Load() < n {
			time.Sleep(time.Millisecond)
		}
		abort()
	}()
	inSend := -1
	var once sync.Once
	_, res, _ := runTrace(t, ctx, c, uniformTrace(n, time.Millisecond, 3, 5), func(o *Options) {
		o.seams.ended = func(*results.Result) {
			once.Do(func() { inSend = goroutinesIn("github.com/llmreplay/llmreplay/replay.(*dispatcher).send") })
		}
	})
	if len(res) != n {
		t.Fatalf("%d records, want %d", len(res), n)
	}
	for _, r := range res {
		if r.Status != results.StatusCanceled {
			t.Errorf("request %d: %s %q, want canceled", r.RequestID, r.Status, r.Error)
		}
	}
	if inSend != 0 {
		t.Errorf("%d goroutines in dispatcher.send as the first request ended, want 0", inSend)
	}
}

// TestReactorBatchesOnlyWhenAllowed: with transport.ReactorBatchMin or more responses in flight
// that the reactor ends itself (open loop), the reactor batches its reads
// (transport.ClientOptions.ReadBatch); never with ReadBatch 0, nor in a closed loop, whose workers
// wait for each response's end. Every record is complete either way.
func TestReactorBatchesOnlyWhenAllowed(t *testing.T) {
	const n = transport.ReactorBatchMin + 16
	for _, tc := range []struct {
		name   string
		batch  time.Duration
		closed bool
		want   bool
	}{
		{"open loop", time.Millisecond, false, true},
		{"read-batch 0", 0, false, false},
		{"closed loop", time.Millisecond, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &vllmtest.Server{ITL: time.Millisecond, HoldFor: n}
			base := vllmtest.Start(t, srv)
			c := newTestClient(t, base, func(o *transport.ClientOptions) {
				o.HTTPClient, o.ReadBatch, o.MaxInflight = transport.HTTPClientRaw, tc.batch, 2*n
			})
			if got := c.Prewarm(context.Background(), n); got != n {
				t.Fatalf("prewarmed %d connections, want %d", got, n)
			}
			w0 := transport.ReactorBatchWaits()
			_, res, _ := runTrace(t, context.Background(), c, uniformTrace(n, 100*time.Microsecond, 3, 20), func(o *Options) {
				if tc.closed {
					o.Concurrency, o.Speedup = n, 0
				}
			})
			if m := srv.MaxSeen.Load(); m != n {
				t.Fatalf("the server saw at most %d requests at once, want %d", m, n)
			}
			if waits := transport.ReactorBatchWaits() - w0; (waits > 0) != tc.want {
				t.Errorf("%d batching waits, want them: %v", waits, tc.want)
			}
			if len(res) != n {
				t.Fatalf("%d records, want %d", len(res), n)
			}
			for _, r := range res {
				// chunk_ns: offsets from sent_ns
				if r.Status != results.StatusOK || len(r.ChunkNS) != 20 || !slices.IsSorted(r.ChunkNS) || r.ChunkNS[0] < 0 {
					t.Errorf("request %d: %s %q, chunks %v", r.RequestID, r.Status, r.Error, r.ChunkNS)
				}
			}
		})
	}
}

// TestReactorRingReads: streams found ready together are read through the reactor's
// io_uring, one submission for them all (ReactorRingReads counts the reads), and the
// records are those one recvmsg a read gives: every request ok with all its chunks, in
// order. The streams burst (tokens written back to back once all n are in flight), so
// reads fill the buffer and go on with recvmsg (readOn) after the ring's read.
func TestReactorRingReads(t *testing.T) {
	if r, err := uring.New(8); err != nil {
		t.Skip("no io_uring here:", err)
	} else {
		r.Close()
	}
	const n, tokens = transport.ReactorBatchMin + 16, 200
	run := func(ring bool) (int64, []results.Result) {
		waitRetired(t, "before the run") // a reactor takes the setting when it starts
		transport.SetReactorRing(ring)
		defer transport.SetReactorRing(true)
		srv := &vllmtest.Server{HoldFor: n}
		base := vllmtest.Start(t, srv)
		c := newTestClient(t, base, func(o *transport.ClientOptions) { o.HTTPClient, o.MaxInflight = transport.HTTPClientRaw, 2*n })
		if got := c.Prewarm(context.Background(), n); got != n {
			t.Fatalf("prewarmed %d connections, want %d", got, n)
		}
		r0 := transport.ReactorRingReads()
		_, res, _ := runTrace(t, context.Background(), c, uniformTrace(n, 100*time.Microsecond, 3, tokens), nil)
		if m := srv.MaxSeen.Load(); m != n {
			t.Fatalf("the server saw at most %d requests at once, want %d", m, n)
		}
		return transport.ReactorRingReads() - r0, res
	}
	for _, ring := range []bool{true, false} {
		reads, res := run(ring)
		if (reads > 0) != ring {
			t.Errorf("ring %v: %d reads through io_uring", ring, reads)
		}
		if len(res) != n {
			t.Fatalf("ring %v: %d records, want %d", ring, len(res), n)
		}
		for _, r := range res {
			if r.Status != results.StatusOK || len(r.ChunkNS) != tokens || r.OutputTokens != tokens || !slices.IsSorted(r.ChunkNS) || r.ChunkNS[0] < 0 {
				t.Errorf("ring %v, request %d: %s %q, %d chunks, %d tokens", ring, r.RequestID, r.Status, r.Error, len(r.ChunkNS), r.OutputTokens)
			}
		}
	}
}

// TestReactorRingFaultsAsRecvmsg: streams that a server cuts while the reactor reads them
// (a reset, a close mid-stream) and streams it completes, all ready at once, end in the
// same records whether the reactor reads through its io_uring or with one recvmsg each:
// the reads' errors, ends of stream and closed peers go the same way through both.
func TestReactorRingFaultsAsRecvmsg(t *testing.T) {
	if r, err := uring.New(8); err != nil {
		t.Skip("no io_uring here:", err)
	} else {
		r.Close()
	}
	const n = transport.ReactorBatchMin + 16 // enough for the reactor to batch: its wakes find many ready
	run := func(ring bool) (int64, []string) {
		waitRetired(t, "before the run") // a reactor takes the setting when it starts
		transport.SetReactorRing(ring)
		defer transport.SetReactorRing(true)
		base := startCuttingServer(t, n)
		c := newTestClient(t, base, func(o *transport.ClientOptions) { o.HTTPClient, o.MaxInflight = transport.HTTPClientRaw, 2*n })
		if got := c.Prewarm(context.Background(), n); got != n {
			t.Fatalf("prewarmed %d connections, want %d", got, n)
		}
		r0 := transport.ReactorRingReads()
		_, res, _ := runTrace(t, context.Background(), c, uniformTrace(n, 100*time.Microsecond, 3, 5), nil)
		var got []string
		for _, r := range res {
			got = append(got, fmt.Sprintf("%s %d chunks %q", r.Status, len(r.ChunkNS), r.Error))
		}
		slices.Sort(got)
		return transport.ReactorRingReads() - r0, got
	}
	ringReads, withRing := run(true)
	t.Logf("ring reads %d\n%s", ringReads, strings.Join(slices.Compact(slices.Clone(withRing)), "\n"))
	_, without := run(false)
	if ringReads == 0 {
		t.Error("no read went through the ring")
	}
	if strings.Join(withRing, "\n") != strings.Join(without, "\n") {
		t.Errorf("records through the ring:\n%s\nwith recvmsg:\n%s", strings.Join(withRing, "\n"), strings.Join(without, "\n"))
	}
	st := map[string]int{}
	for _, r := range without {
		st[strings.Fields(r)[0]]++
	}
	if len(without) != n || st[string(results.StatusOK)] != n/3 {
		t.Errorf("%d records, statuses %v: want %d, a third ok", len(without), st, n)
	}
}

// startCuttingServer serves GET (a prewarm) with an empty JSON body, and holds each POST
// until n have come; then it streams two events to each, and ends the k-th POST's stream
// (k from 0, in arrival order) with a reset when k%3 == 0, a close when k%3 == 1, and
// three more events, [DONE] and the body's end when k%3 == 2.
func startCuttingServer(t *testing.T, n int) *url.URL {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	posts := 0
	all := make(chan struct{})
	event := func(w io.Writer, data string) {
		e := "data: " + data + "\n\n"
		fmt.Fprintf(w, "%x\r\n%s\r\n", len(e), e)
	}
	tok := `{"choices":[{"index":0,"text":"a"}]}`
	serve := func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if req.Method == http.MethodGet {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
				continue
			}
			mu.Lock()
			k := posts
			if posts++; posts == n {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-time.After(10 * time.Second):
				return
			}
			w := bufio.NewWriter(c)
			io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			event(w, tok)
			event(w, tok)
			if k%3 == 2 {
				for range 3 {
					event(w, tok)
				}
				event(w, "[DONE]")
				io.WriteString(w, "0\r\n\r\n")
			}
			w.Flush()
			switch k % 3 {
			case 0:
				c.(*net.TCPConn).SetLinger(0) // the close sends a reset
				return
			case 1:
				return
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	u, err := wire.BaseURL("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return u
}
