package sweep

import (
	"github.com/llmreplay/llmreplay/replay/scrape"
	"github.com/llmreplay/llmreplay/wire"

	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/llmreplay/llmreplay/internal/prom"
)

// idlePoll is how often the idle check scrapes a busy endpoint.
const idlePoll = time.Second

// waitIdle polls the endpoint's Prometheus /metrics until no request is running or
// waiting, so a point does not start while the previous one's requests still occupy the
// engine; after timeout it says so on log and returns. An endpoint without /metrics, or
// without any of wire.BusyGauges, is taken as idle.
func waitIdle(ctx context.Context, endpoint string, timeout time.Duration, log io.Writer) {
	base, err := wire.BaseURL(endpoint)
	if err != nil {
		return
	}
	root := wire.MetricsURL(base)
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		busy, known := scrapeBusy(ctx, client, root.String())
		if !known || busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(log, "llmreplay: sweep: WARNING: the endpoint still has %g requests running or waiting after %v; starting the point anyway\n", busy, timeout)
			return
		}
		select {
		case <-time.After(idlePoll):
		case <-ctx.Done():
			return
		}
	}
}

// scrapeBusy sums the running and waiting request gauges of a Prometheus exposition.
func scrapeBusy(ctx context.Context, client *http.Client, url string) (busy float64, known bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false
	}
	req.Header.Set("Accept", prom.Accept)
	resp, err := client.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false
	}
	return parseBusy(io.LimitReader(resp.Body, scrape.MaxExposition), resp.Header)
}

// parseBusy sums wire.BusyGauges over their label sets; known is false when the exposition does
// not parse or has none of them.
func parseBusy(r io.Reader, h http.Header) (busy float64, known bool) {
	samples, err := prom.Parse(r, h)
	if err != nil {
		return 0, false
	}
	for _, s := range samples {
		if slices.Contains(wire.BusyGauges, s.Name) {
			busy += s.Value
			known = true
		}
	}
	return busy, known
}
