//go:build !linux

package replay

import (
	"context"
	"net/http"
	"net/url"

	"github.com/llmreplay/llmreplay/replay/results"
)

// The raw client (rawhttp.go) is built for linux only; here rawBuilt is false, so
// useRaw never chooses it, Client.raw stays nil and these stand-ins are never called.
const rawBuilt = false

type rawTransport struct {
	head      []byte
	readBatch int64
	c         *Client
}

func newRawTransport(u, modelsURL *url.URL, header http.Header, maxIdle int, sessionHeader string) *rawTransport {
	return &rawTransport{}
}

func (t *rawTransport) prewarm(ctx context.Context, n int) int { return 0 }
func (t *rawTransport) closeIdle()                             {}

func (t *rawTransport) appendHead(b []byte, r *request, n int, placeholder bool) []byte {
	return b
}

func (t *rawTransport) headCap() int { return 0 }

func (t *rawTransport) prepare(req *request, placeholder bool) {}

func (t *rawTransport) roundTrip(ctx context.Context, clk clock, req *request, res *results.Result, sse *sseReader, onTokens func(int), st sendStart) {
	res.Status, res.Error = results.StatusTransportError, errRawNotBuilt.Error()
}
