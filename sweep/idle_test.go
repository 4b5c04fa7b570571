package sweep

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseBusy(t *testing.T) {
	page := `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2
vllm:num_requests_waiting_by_reason{reason="capacity"} 7
sglang:num_queue_reqs 1
`
	busy, known := parseBusy(strings.NewReader(page), nil)
	if !known || busy != 6 {
		t.Errorf("parseBusy = %v, %v; want 6, true (the _by_reason gauge is not a match)", busy, known)
	}
	if _, known := parseBusy(strings.NewReader("# nothing\nfoo 1\n"), nil); known {
		t.Error("a page without the gauges was taken as known")
	}
	// OpenMetrics, as negotiated by prom.Accept: parsed by expfmt, # EOF and all.
	om := "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 4\n" +
		"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 1.5\n# EOF\n"
	h := http.Header{"Content-Type": {"application/openmetrics-text; version=1.0.0; charset=utf-8"}}
	if busy, known := parseBusy(strings.NewReader(om), h); !known || busy != 5.5 {
		t.Errorf("OpenMetrics: parseBusy = %v, %v; want 5.5, true", busy, known)
	}
	// A malformed exposition is not taken as idle-with-numbers: it is unknown.
	if _, known := parseBusy(strings.NewReader("vllm:num_requests_running{ 3\n"), nil); known {
		t.Error("a malformed page was taken as known")
	}
}

// TestWaitIdle: the idle check reads the server root's /metrics of a /v1 endpoint, goes on
// at once when the engine is idle or has no metrics, waits while it is busy, and gives up
// with a warning at its timeout.
func TestWaitIdle(t *testing.T) {
	var busy atomic.Int64
	var scrapes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		scrapes.Add(1)
		n := busy.Load()
		if n > 0 {
			busy.Add(-1) // one request fewer at each scrape
		}
		fmt.Fprintf(w, "vllm:num_requests_running %d\n", n)
	}))
	defer srv.Close()
	ctx := context.Background()
	var log bytes.Buffer

	waitIdle(ctx, srv.URL+"/v1", time.Minute, &log)
	if scrapes.Load() != 1 || log.Len() != 0 {
		t.Errorf("idle engine: %d scrapes, log %q; want 1 and nothing", scrapes.Load(), log.String())
	}

	busy.Store(2) // 2 at the first scrape, 1 at the second, idle at the third
	scrapes.Store(0)
	waitIdle(ctx, srv.URL+"/v1", time.Minute, &log)
	if scrapes.Load() != 3 || log.Len() != 0 {
		t.Errorf("busy engine: %d scrapes, log %q; want 3 and nothing", scrapes.Load(), log.String())
	}

	busy.Store(100)
	scrapes.Store(0)
	waitIdle(ctx, srv.URL+"/v1", 0, &log)
	if scrapes.Load() != 1 || !strings.Contains(log.String(), "WARNING: the endpoint still has 100 requests running or waiting after 0s") {
		t.Errorf("busy past the timeout: %d scrapes, log %q", scrapes.Load(), log.String())
	}

	// A stop ends the wait.
	log.Reset()
	stopped, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	waitIdle(stopped, srv.URL+"/v1", time.Hour, &log)
	if d := time.Since(start); d > 10*time.Second || log.Len() != 0 {
		t.Errorf("stopped wait: returned after %v, log %q", d, log.String())
	}

	// No /metrics: idle.
	noMetrics := httptest.NewServer(http.NotFoundHandler())
	defer noMetrics.Close()
	waitIdle(ctx, noMetrics.URL+"/v1", time.Hour, &log)
}
