package transport

import (
	"net/url"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/wire"
)

// newTestClient is a client of base for the transport's tests, as replay's tests make one.
func newTestClient(t *testing.T, base *url.URL, mod func(*ClientOptions)) *Client {
	t.Helper()
	o := ClientOptions{BaseURL: base, API: wire.APICompletions, Backend: wire.BackendVLLM, Model: "m", Timeout: 5 * time.Second, MaxInflight: 64}
	if mod != nil {
		mod(&o)
	}
	c, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
