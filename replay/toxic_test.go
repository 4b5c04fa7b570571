package replay

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// The toxiproxy tests put a real fault-injecting TCP proxy (github.com/Shopify/toxiproxy,
// embedded as a library) between the replayer and the simulated engine's fixed profile,
// whose timing is exact: first token toxicTTFT after the request, then one token every
// toxicITL. Each replays toxicShort short requests and toxicLong long ones, all due at
// once, so that each has its own connection (none is free for reuse before the first
// token), and holds every record to what the toxic did. Run them alone with
//
//	LLMREPLAY_E2E=1 go test -run 'TestE2EToxiproxy' ./replay
const (
	toxicTTFT     = 100 * time.Millisecond
	toxicITL      = 10 * time.Millisecond
	toxicShort    = 3
	toxicLong     = 3
	toxicShortOut = 2
	toxicLongOut  = 80 // 0.9 s of stream: long after the short requests are recorded
	toxicTimeout  = 1500 * time.Millisecond
	toxicGrace    = time.Second
	// toxicSlack is what a loaded machine may add to a TTFT beyond the injected delay (the
	// sim's timer, the proxy's goroutines, the race detector, two CPU burners): the bound
	// below truth is exact but for the sim's precise writer, which may write a token up
	// to sim.WriteEarly before its due time; the one above is the injected delay plus this.
	toxicSlack = 150 * time.Millisecond
)

// toxic is one toxic as toxiproxy's API takes it.
type toxic struct {
	name, typ, stream string
	toxicity          float64
	attrs             string // JSON object
}

func (x toxic) json() string {
	return fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":%g,"attributes":%s}`, x.name, x.typ, x.stream, x.toxicity, x.attrs)
}

type toxicCase struct {
	name string
	// before: toxics in place before the run; during: toxics added (or, by name, updated)
	// once the short requests are recorded, while the long ones stream.
	before, during []toxic
	timeout        time.Duration // per request; 0: toxicTimeout
	delay          time.Duration // the most the toxics may add to an unaffected request's TTFT
	minDelay       time.Duration // the least they add
	// What the long requests get (the short ones, and the long ones when longStatus is
	// ok, must be exact): status, HTTP status and a part of the error.
	longStatus results.Status
	longHTTP   int32
	longErr    string
	shortHit   bool  // the toxic hits the short requests too, as the long ones
	longOut    int32 // the long requests' output tokens; 0: toxicLongOut
}

// TestE2EToxiproxy is real-time (TTFT bounds on a loaded machine): scripts/test runs it in
// its end-to-end pass, without the race detector.
func TestE2EToxiproxy(t *testing.T) {
	if os.Getenv("LLMREPLAY_E2E") == "" {
		t.Skip("real-time end-to-end test: set LLMREPLAY_E2E=1 (scripts/test does)")
	}
	zerolog.SetGlobalLevel(zerolog.Disabled) // toxiproxy logs through zerolog's global logger
	cases := []toxicCase{
		{name: "latency", before: []toxic{
			{name: "lat_up", typ: "latency", stream: "upstream", toxicity: 1, attrs: `{"latency":25,"jitter":10}`},
			{name: "lat_down", typ: "latency", stream: "downstream", toxicity: 1, attrs: `{"latency":25,"jitter":10}`},
		}, delay: 70 * time.Millisecond, minDelay: 30 * time.Millisecond, longStatus: results.StatusOK},
		// 32 KB/s: a long stream's 80 chunks take longer to pass than to generate.
		{name: "bandwidth", before: []toxic{
			{name: "bw", typ: "bandwidth", stream: "downstream", toxicity: 1, attrs: `{"rate":32}`},
		}, delay: 50 * time.Millisecond, longStatus: results.StatusOK},
		// Every response in segments of 1 to 7 bytes, 50 µs apart (each a goroutine's timer:
		// about 1 ms on a loaded machine, hence 10 tokens and a 5 s timeout): status lines,
		// chunk sizes, CRLFs and SSE lines are cut at every position. The first token is
		// behind about 450 bytes, 110 segments.
		{name: "slicer", before: []toxic{
			{name: "slicer", typ: "slicer", stream: "downstream", toxicity: 1, attrs: `{"average_size":4,"size_variation":3,"delay":50}`},
		}, longOut: 10, timeout: 5 * time.Second, delay: 300 * time.Millisecond, longStatus: results.StatusOK},
		// reset_peer sets SO_LINGER 0 on the links it is in when they start (toxicity 0 until
		// the short requests are done): raised to 1, it drops the next chunk of each live
		// stream and closes both ends with RST.
		{name: "reset_peer", before: []toxic{
			{name: "reset", typ: "reset_peer", stream: "downstream", toxicity: 0, attrs: `{"timeout":0}`},
		}, during: []toxic{
			{name: "reset", typ: "reset_peer", stream: "downstream", toxicity: 1, attrs: `{"timeout":0}`},
		}, longStatus: results.StatusStreamError, longHTTP: 200, longErr: "connection reset by peer"},
		// The peer goes silent mid-stream, without closing: the request timeout ends it.
		{name: "timeout", during: []toxic{
			{name: "silent", typ: "timeout", stream: "downstream", toxicity: 1, attrs: `{"timeout":0}`},
		}, longStatus: results.StatusTimeout, longHTTP: 200, longErr: "stream not finished within the 1.5s timeout"},
		// Silent from the start: no request reaches the engine.
		{name: "timeout_before_response", before: []toxic{
			{name: "silent", typ: "timeout", stream: "upstream", toxicity: 1, attrs: `{"timeout":0}`},
		}, shortHit: true, longStatus: results.StatusTimeout, longHTTP: results.Null, longErr: "no response within the 1.5s timeout"},
		// A gateway that closes a connection after 4 KiB of response: a short response
		// (about 1.3 KiB) passes whole, a long one (about 24 KiB) is cut.
		{name: "limit_data", before: []toxic{
			{name: "limit", typ: "limit_data", stream: "downstream", toxicity: 1, attrs: `{"bytes":4096}`},
		}, longStatus: results.StatusStreamError, longHTTP: 200, longErr: "unexpected EOF"},
	}
	for _, hc := range []string{transport.HTTPClientRaw, transport.HTTPClientNetHTTP} {
		if hc == transport.HTTPClientRaw && !transport.RawBuilt {
			continue // the raw client is built for linux only
		}
		for _, tc := range cases {
			t.Run(hc+"/"+tc.name, func(t *testing.T) { testToxic(t, hc, tc) })
		}
	}
}

// toxicPath starts the fixed-profile simulated engine and a toxiproxy proxy in front of it
// on loopback, both stopped when the test ends.
func toxicPath(t *testing.T) (*sim.Running, *toxiproxy.Proxy) {
	t.Helper()
	cfg, err := sim.Profile("fixed")
	if err != nil {
		t.Fatal(err)
	}
	cfg.FixedTTFT, cfg.FixedITL = toxicTTFT, toxicITL
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := sim.Start(ctx, "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(api, "sim", "127.0.0.1:0", srv.Addr().String())
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		srv.Close()
		cancel()
	})
	return srv, p
}

func setToxic(t *testing.T, p *toxiproxy.Proxy, x toxic) {
	t.Helper()
	if p.Toxics.GetToxic(x.name) != nil {
		if _, err := p.Toxics.UpdateToxicJson(x.name, strings.NewReader(x.json())); err != nil {
			t.Fatalf("update toxic %s: %v", x.name, err)
		}
		return
	}
	if _, err := p.Toxics.AddToxicJson(strings.NewReader(x.json())); err != nil {
		t.Fatalf("add toxic %s: %v", x.name, err)
	}
}

// toxicTrace is toxicShort short requests and toxicLong long ones, interleaved, all due at
// the run start.
func toxicTrace(longOut int32) []trace.Request {
	reqs := make([]trace.Request, toxicShort+toxicLong)
	for i := range reqs {
		out := int32(toxicShortOut)
		if i%2 == 1 {
			out = longOut
		}
		reqs[i] = trace.Request{ID: int64(100 + i), PromptTokens: 8, OutputTokens: out}
	}
	return reqs
}

func testToxic(t *testing.T, hc string, tc toxicCase) {
	srv, p := toxicPath(t)
	for _, x := range tc.before {
		setToxic(t, p, x)
	}
	base, err := wire.BaseURL("http://" + p.Listen)
	if err != nil {
		t.Fatal(err)
	}
	timeout := tc.timeout
	if timeout == 0 {
		timeout = toxicTimeout
	}
	c := newTestClient(t, base, func(o *transport.ClientOptions) {
		o.Model, o.Timeout, o.HTTPClient = srv.Info().Config.Model, timeout, hc
	})
	longOut := tc.longOut
	if longOut == 0 {
		longOut = toxicLongOut
	}
	reqs := toxicTrace(longOut)
	before := countLeaks()

	// The run must end by the last due time (0) + the request timeout; the context's
	// deadline adds the grace and would stop the run (its records would say canceled).
	ctx, cancel := context.WithTimeout(context.Background(), timeout+toxicGrace+time.Second)
	defer cancel()
	prog := new(Progress)
	out := filepath.Join(t.TempDir(), "results.parquet")
	o := Options{Source: trace.NewSliceSource(reqs), Client: c, Prompter: wordPrompter, Speedup: 1,
		Output: out, Grace: toxicGrace, Progress: prog}
	done := make(chan error, 1)
	go func() { _, err := Run(ctx, o); done <- err }()
	if len(tc.during) > 0 {
		// Once the short requests are recorded the long ones are mid-stream: 80 tokens at
		// 10 ms from the same first token.
		for prog.Done.Load() < toxicShort && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		for _, x := range tc.during {
			setToxic(t, p, x)
		}
	}
	select {
	case err = <-done:
	case <-time.After(timeout + 2*toxicGrace + 10*time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("the run hangs past its timeout and grace:\n%s", buf[:runtime.Stack(buf, true)])
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ctx.Err() != nil {
		t.Errorf("the run outlasted the request timeout %v plus the grace %v", timeout, toxicGrace)
	}
	res, _, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkOneRecordEach(t, reqs, res)
	truth := toxicTTFT
	for _, r := range res {
		long := r.OutputTokensTarget == longOut
		if tc.shortHit || (long && tc.longStatus != results.StatusOK) {
			if r.Status != tc.longStatus || r.HTTPStatus != tc.longHTTP || !strings.Contains(r.Error, tc.longErr) ||
				len(r.ChunkNS) >= int(r.OutputTokensTarget) {
				t.Errorf("request %d (hit): status %s http %d, %d chunks, error %q; want %s http %d, fewer than %d chunks, error with %q",
					r.RequestID, r.Status, r.HTTPStatus, len(r.ChunkNS), r.Error, tc.longStatus, tc.longHTTP, r.OutputTokensTarget, tc.longErr)
			}
			t.Logf("request %d: %s after %d chunks: %s", r.RequestID, r.Status, len(r.ChunkNS), r.Error)
			continue
		}
		// Not hit: exact counts, and a TTFT the toxics explain.
		if r.Status != results.StatusOK || r.OutputTokens != r.OutputTokensTarget || r.OutputTokensSource != results.SourceUsage ||
			len(r.ChunkNS) != int(r.OutputTokensTarget) {
			t.Errorf("request %d (not hit): status %s %q, %d tokens (%s) in %d chunks; want ok, %d in as many chunks",
				r.RequestID, r.Status, r.Error, r.OutputTokens, r.OutputTokensSource, len(r.ChunkNS), r.OutputTokensTarget)
			continue
		}
		ttft := time.Duration(r.FirstTokenNS - r.SentNS)
		if ttft < truth+tc.minDelay-sim.WriteEarly || ttft > truth+tc.delay+toxicSlack {
			t.Errorf("request %d: TTFT %v; the engine's is %v (its writes may leave %v early), the toxics add %v to %v (+%v for a loaded machine)",
				r.RequestID, ttft, truth, sim.WriteEarly, tc.minDelay, tc.delay, toxicSlack)
		}
	}
	c.Close()
	checkNoLeak(t, before)
}

// checkOneRecordEach holds res to exactly one record per request of reqs.
func checkOneRecordEach(t *testing.T, reqs []trace.Request, res []results.Result) {
	t.Helper()
	seen := map[int64]int{}
	for _, r := range res {
		seen[r.RequestID]++
	}
	for _, q := range reqs {
		if seen[q.ID] != 1 {
			t.Errorf("request %d has %d records, want 1", q.ID, seen[q.ID])
		}
		delete(seen, q.ID)
	}
	for id, n := range seen {
		t.Errorf("%d records of request %d, which is not in the trace", n, id)
	}
}

// leaks counts what a run must give back: goroutines and open sockets (on linux, from
// /proc/self/fd; -1 elsewhere). Goroutines of toxiproxy are not counted: when a client
// closes a connection whose toxic still holds data, its toxic's goroutine waits forever
// to pass the data on (toxiproxy's own, in ToxicStub.Run; the proxy's sockets are closed).
type leaks struct{ goroutines, sockets int }

func countLeaks() leaks {
	l := leaks{goroutines: len(ownStacks()), sockets: -1}
	if runtime.GOOS != "linux" {
		return l
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return l
	}
	l.sockets = 0
	for _, e := range ents {
		if s, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(s, "socket:") {
			l.sockets++
		}
	}
	return l
}

// ownStacks returns the stacks of the goroutines with no toxiproxy frame.
func ownStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var own []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "github.com/Shopify/toxiproxy") {
			own = append(own, g)
		}
	}
	return own
}

// checkNoLeak waits until the goroutines and sockets are back to before (connections
// close asynchronously: the proxy's and the engine's ends notice the client's close),
// polling for up to 10 s, and fails with the goroutines' stacks if they never are.
func checkNoLeak(t *testing.T, before leaks) {
	t.Helper()
	var now leaks
	for deadline := time.Now().Add(10 * time.Second); ; {
		now = countLeaks()
		if now.goroutines <= before.goroutines && now.sockets <= before.sockets {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("leak: %d goroutines and %d sockets after the run, %d and %d before:\n%s",
		now.goroutines, now.sockets, before.goroutines, before.sockets, strings.Join(ownStacks(), "\n\n"))
}
