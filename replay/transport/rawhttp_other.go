//go:build !linux

package transport

import (
	"context"
	"net/http"
	"net/url"

	"github.com/llmreplay/llmreplay/replay/results"
)

// The raw client (rawhttp.go) is built for linux only; here RawBuilt is false, so
// useRaw never chooses it, Client.raw stays nil and these stand-ins are never called.
const RawBuilt = false

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

func (t *rawTransport) appendHead(b []byte, r *Request, n int, placeholder bool) []byte {
	return b
}

func (t *rawTransport) headCap() int { return 0 }

func (t *rawTransport) Prepare(req *Request, placeholder bool) {}

func (t *rawTransport) RoundTrip(ctx context.Context, clk Clock, req *Request, res *results.Result, sse *SSEReader, onTokens func(int), st SendStart) {
	res.Status, res.Error = results.StatusTransportError, errRawNotBuilt.Error()
}
