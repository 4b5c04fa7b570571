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
}

type rawStart struct{}

func newRawTransport(u, modelsURL *url.URL, header http.Header, maxIdle int, sessionHeader string) *rawTransport {
	return &rawTransport{}
}

func (t *rawTransport) prewarm(ctx context.Context, n int) int { return 0 }
func (t *rawTransport) closeIdle()                             {}
func (c *Client) startNow(clk clock, r *request) *rawStart     { return nil }

func (t *rawTransport) appendHead(b []byte, r *request, n int, placeholder bool) []byte {
	return b
}

func (t *rawTransport) headCap() int { return 0 }

func (c *Client) doRaw(ctx context.Context, clk clock, r *request, res *results.Result, sse *sseReader, onTokens func(int), pre *rawStart) {
	res.Status, res.Error = results.StatusTransportError, errRawNotBuilt.Error()
}

func (c *Client) rawAsyncOK(st *rawStart, r *request) bool { return false }

func (c *Client) doRawAsync(ctx context.Context, clk clock, r *request, res *results.Result, sse *sseReader, onTokens func(int),
	pre *rawStart, done func()) {
	c.doRaw(ctx, clk, r, res, sse, onTokens, pre)
	done()
}
