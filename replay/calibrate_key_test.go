package replay

import (
	"net/url"
	"testing"

	"github.com/llmreplay/llmreplay/wire"
)

// TestProberKeyHeaders: calibration's probes carry the key as the run's requests do
// (transport.NewClient): a bearer token, and in the Messages API's x-api-key too, where a
// provider's own API (--backend openai) takes x-api-key alone; the backend reaches the
// prober, which reads a Messages usage by it.
func TestProberKeyHeaders(t *testing.T) {
	base, _ := url.Parse("http://127.0.0.1:1/v1")
	for _, tc := range []struct {
		api            wire.API
		backend        wire.Backend
		bearer, apiKey string
	}{
		{wire.APIChat, wire.BackendVLLM, "Bearer sk-1", ""},
		{wire.APIMessages, wire.BackendVLLM, "Bearer sk-1", "sk-1"},
		{wire.APIMessages, wire.BackendSGLang, "Bearer sk-1", "sk-1"},
		{wire.APIMessages, wire.BackendOpenAI, "", "sk-1"},
		{wire.APIResponses, wire.BackendOpenAI, "Bearer sk-1", ""},
	} {
		p := newProber(Endpoint{Base: base, API: tc.api, Backend: tc.backend, Model: "m", APIKey: "sk-1"})
		if got, key := p.Header.Get("Authorization"), p.Header.Get("x-api-key"); got != tc.bearer || key != tc.apiKey || p.Backend != tc.backend {
			t.Errorf("%s/%s: Authorization %q, x-api-key %q, backend %q; want %q, %q, %q", tc.api, tc.backend, got, key, p.Backend, tc.bearer, tc.apiKey, tc.backend)
		}
	}
}
