package replay

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/wire"
)

// TestSimFaults replays against the simulated engine with every fault it injects and
// holds each request's status to the fault the engine counted.
func TestSimFaults(t *testing.T) {
	cfg, err := sim.Profile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.TimeScale = 10
	for _, f := range []string{"503=0.15", "429=0.1", "disconnect=0.15", "malformed=0.15", "stall=0.1:60s"} {
		if err := sim.ParseFault(f, &cfg.Faults); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := sim.Start(ctx, "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base, _ := wire.BaseURL(srv.BaseURL())
	c := newTestClient(t, base, func(o *transport.ClientOptions) { o.Model = cfg.Model; o.Timeout = 1500 * time.Millisecond })
	t0 := time.Now()
	_, res, _ := runTrace(t, context.Background(), c, uniformTrace(60, 5*time.Millisecond, 20, 8), nil)
	if el := time.Since(t0); el > 20*time.Second {
		t.Errorf("run took %v", el)
	}
	if len(res) != 60 {
		t.Fatalf("%d records, want 60", len(res))
	}
	resp, err := http.Get(srv.BaseURL()[:len(srv.BaseURL())-3] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	faults := map[string]int{}
	for _, m := range regexp.MustCompile(`llmreplay_sim_faults_total\{kind="([^"]+)"[^}]*\} (\d+)`).FindAllStringSubmatch(string(body), -1) {
		faults[m[1]], _ = strconv.Atoi(m[2])
	}
	byHTTP := map[int32]int{}
	st := byStatus(res)
	for _, r := range res {
		if r.Status == results.StatusHTTPError {
			byHTTP[r.HTTPStatus]++
		}
		if r.Status != results.StatusOK && r.Error == "" {
			t.Errorf("request %d: status %s without a message", r.RequestID, r.Status)
		}
	}
	t.Logf("statuses %v, sim faults %v", st, faults)
	if byHTTP[503] != faults["503"] || byHTTP[429] != faults["429"] {
		t.Errorf("HTTP errors %v, sim injected 503 x%d, 429 x%d", byHTTP, faults["503"], faults["429"])
	}
	broken := st[results.StatusStreamError] + st[results.StatusTimeout]
	injected := faults["disconnect"] + faults["malformed"] + faults["stall"]
	if broken == 0 || broken > injected {
		t.Errorf("%d stream errors + timeouts for %d injected stream faults", broken, injected)
	}
	if st[results.StatusTimeout] > faults["stall"] || (faults["stall"] > 0 && st[results.StatusTimeout] == 0) {
		t.Errorf("%d timeouts for %d stalls", st[results.StatusTimeout], faults["stall"])
	}
	if st[results.StatusOK]+st[results.StatusHTTPError]+broken != 60 {
		t.Errorf("unexpected statuses: %v", st)
	}
}
