package transport

import (
	"testing"

	"github.com/llmreplay/llmreplay/wire"
)

// BenchmarkRequestHeader: net/http's header map per request: the client's shared one
// (no routing headers), or a copy with X-Request-Id and the session header.
func BenchmarkRequestHeader(b *testing.B) {
	u, _ := wire.BaseURL("http://127.0.0.1:8000/v1")
	c, err := NewClient(ClientOptions{BaseURL: u, API: wire.APICompletions, Backend: wire.BackendVLLM, Model: "m", HTTPClient: HTTPClientNetHTTP, SessionHeader: "X-Session-ID"})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		runID string
		sess  bool
	}{{"client-header", "", false}, {"request-id+session", "48ab9150de323e0d", true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				req := &Request{ID: int64(1_000_000 + i), RunID: bc.runID, Session: int64(i), HasSession: bc.sess}
				if h := c.requestHeader(req); len(h) == 0 {
					b.Fatal("no header")
				}
			}
		})
	}
}
