package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
)

// TestPrepare: the bundled sample at a rate against a loopback server with a password in
// its URL: the speedup comes from the rate, the model is the first listed, the metadata
// holds the endpoint and flags in their safe forms, and the session runs.
func TestPrepare(t *testing.T) {
	u := vllmtest.Start(t, &vllmtest.Server{})
	cfg := DefaultConfig()
	cfg.Endpoint = strings.Replace(u.String(), "http://", "http://user:pw-Secret1@", 1)
	cfg.Rate, cfg.RateSet = 400, true
	cfg.Limit, cfg.Prewarm, cfg.Quiet = 5, 1, true
	cfg.Output = filepath.Join(t.TempDir(), "r.parquet")
	flags := map[string]string{"endpoint": cfg.Endpoint, "rate": "400"}
	sess, err := Prepare(context.Background(), cfg, Env{ToolVersion: "test", Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	o := sess.Options
	m := o.Meta
	if m.Model != "model-a" || m.Endpoint != u.String() || m.Flags["endpoint"] != u.String() || m.Rate != 400 ||
		m.TraceFile != trace.SampleName || m.Flags["http-client"] != transport.HTTPClientRaw || m.Flags["rate"] != "400" {
		t.Errorf("metadata %+v", m)
	}
	if flags["endpoint"] != cfg.Endpoint {
		t.Error("Prepare changed the caller's flag map")
	}
	if !(o.Speedup > 0) || o.Speedup == trace.SampleSpeedup || o.Limit != 5 || o.Prewarm != 1 {
		t.Errorf("options: speedup %v limit %d prewarm %d", o.Speedup, o.Limit, o.Prewarm)
	}
	sum, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if sum.ByStatus[results.StatusOK] != 5 {
		t.Errorf("ran %v, want 5 ok", sum.ByStatus)
	}

	// A bad configuration is a *ConfigError naming the flag; the endpoint's password is
	// never in an error.
	cfg.RateSet = false
	cfg.Output = filepath.Join(t.TempDir(), "r.parquet") // r.parquet exists: it would be refused first
	cfg.Endpoint = "ftp://user:pw-Secret1@h/v1"
	if _, err := Prepare(context.Background(), cfg, Env{}); !IsConfigError(err) || strings.Contains(err.Error(), "pw-Secret1") ||
		!strings.HasPrefix(err.Error(), "--endpoint") {
		t.Errorf("Prepare with an ftp endpoint: %v", err)
	}
	cfg.Endpoint = ""
	if _, err := Prepare(context.Background(), cfg, Env{}); !IsConfigError(err) {
		t.Errorf("Prepare with no endpoint and no StartSim: %v", err)
	}
}

// TestHandOverLowWater: past a full look-ahead the preparer waits until the dispatcher has
// taken it down to half (one wake-up per half look-ahead), then fills it again; nothing
// is lost or reordered.
func TestHandOverLowWater(t *testing.T) {
	const look, total = 8, 100
	r := &feed{prepared: make(chan *request, look), lowWater: look / 2, prepLow: make(chan struct{}, 1)}
	stopped := make(chan struct{})
	defer close(stopped)
	r.stopped = stopped
	go func() {
		for i := range total {
			if !r.handOver(&request{Request: transport.Request{ID: int64(i)}}) {
				return
			}
		}
		close(r.prepared)
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for i := 0; !cond(); i++ {
			if i == 10000 {
				t.Fatalf("10 s without %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFor("a full look-ahead with the preparer waiting", func() bool { return r.prepWaiting.Load() && len(r.prepared) == look })
	next := int64(0)
	take := func(k int) {
		t.Helper()
		for range k {
			q, ok := r.next()
			if !ok || q.ID != next {
				t.Fatalf("took %v (ok %v), want request %d", q, ok, next)
			}
			next++
		}
	}
	take(look/2 - 1)
	if l, w := len(r.prepared), r.prepWaiting.Load(); l != look/2+1 || !w {
		t.Fatalf("after %d taken: %d in the look-ahead, preparer waiting %v; want %d and true (no wake-up above half)", look/2-1, l, w, look/2+1)
	}
	take(1)
	waitFor("the preparer filling the look-ahead again", func() bool { return len(r.prepared) == look })
	for {
		q, ok := r.next()
		if !ok {
			break
		}
		if q.ID != next {
			t.Fatalf("took request %d, want %d", q.ID, next)
		}
		next++
	}
	if next != total {
		t.Fatalf("took %d requests, want %d", next, total)
	}
}
