package transport

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"net/http"
	"testing"
)

// TestClientPoolsSized: both clients' idle pools keep at least MaxInflight connections,
// so that a closed loop prewarmed to its concurrency never dials again.
func TestClientPoolsSized(t *testing.T) {
	u := vllmtest.Start(t, &vllmtest.Server{})
	for _, client := range []string{HTTPClientRaw, HTTPClientNetHTTP} {
		if client == HTTPClientRaw && !RawBuilt {
			continue
		}
		c := newTestClient(t, u, func(o *ClientOptions) { o.HTTPClient, o.MaxInflight = client, 1024 })
		tr := c.hc.Transport.(*http.Transport)
		if tr.MaxIdleConnsPerHost < 1024 || tr.MaxIdleConns < 1024 {
			t.Errorf("%s: net/http idle pool %d per host, %d in all; want >= 1024", client, tr.MaxIdleConnsPerHost, tr.MaxIdleConns)
		}
		if client == HTTPClientRaw && (c.raw == nil || rawMaxIdle(c.raw) < 1024) {
			t.Errorf("raw client %v, want an idle pool >= 1024", c.raw != nil)
		}
	}
}
