package replay

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/wire"
)

// Calibrate fits how the server at base counts the builder's prompts (tokenize.Calibrate),
// counting through the wire's probes with the client's credentials. The probes see the
// base URL without userinfo (its password goes as a basic Authorization header, whose
// value the prober scrubs from its errors); the errors returned are wrapped with the
// endpoint's safe form.
func Calibrate(ctx context.Context, base *url.URL, api wire.API, model, apiKey string, header http.Header, insecure bool, b *tokenize.Builder) (tokenize.Calibration, error) {
	methods, err := wire.ProbeMethods(api, "")
	if err != nil {
		return tokenize.Calibration{}, fmt.Errorf("%s: %w", wire.SafeEndpoint(base), err)
	}
	h := header.Clone()
	if h == nil {
		h = http.Header{}
	}
	if auth := transport.BasicAuth(base); auth != "" {
		h.Set("Authorization", auth)
	}
	if apiKey != "" {
		h.Set("Authorization", "Bearer "+apiKey)
	}
	clean := *base
	clean.User = nil
	p := &wire.Prober{Base: &clean, API: api, Model: model, Header: h,
		Client: &http.Client{Transport: transport.NewTransport(8, insecure), Timeout: time.Minute}}
	c, err := tokenize.Calibrate(ctx, tokenize.CalibrateOptions{API: string(api), Methods: methods, Count: p.Count, Builder: b})
	if err != nil {
		return c, fmt.Errorf("%s: %w", wire.SafeEndpoint(base), err)
	}
	return c, nil
}
