package transport

import (
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"

	"github.com/llmreplay/llmreplay/wire"
)

// RequestIDHeader is the header that carries RUNID-REQUESTID on every request.
const RequestIDHeader = "X-Request-Id"

// RunIDLen is the length of results.RunID's ids (8 bytes in hex). The raw client's heads
// reserve it before the run id is known; Run checks the id has it.
const RunIDLen = 16

// RunIDPlaceholder holds a head's run id until the dispatcher writes the real one over it.
const RunIDPlaceholder = "0000000000000000"

// clientHeaders are the headers the clients set themselves; neither --header nor
// --session-header may name one.
var clientHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Content-Type", "Accept", RequestIDHeader}

// SetAPIKey puts key in h as a request of kind k to a backend's server carries it: a
// bearer token, and in the kind's own key header (the Messages API's x-api-key) too. The
// engines check the bearer token on every route, their Anthropic one too (vLLM's
// AuthenticationMiddleware and SGLang's add_api_key_middleware read Authorization alone):
// only a provider's own API (--backend openai) gets the kind's header alone. An empty key
// sets nothing.
func SetAPIKey(h http.Header, k *wire.Kind, backend wire.Backend, key string) {
	if key == "" {
		return
	}
	if k != nil && k.KeyHeader != "" {
		h.Set(k.KeyHeader, key)
	}
	if k == nil || k.KeyHeader == "" || backend != wire.BackendOpenAI {
		h.Set("Authorization", "Bearer "+key)
	}
}

// CheckSessionHeader checks a --session-header name ("" = none).
func CheckSessionHeader(name string) error {
	if name == "" {
		return nil
	}
	if !ValidHeaderName(name) {
		return fmt.Errorf("--session-header %q: not a valid HTTP header name", name)
	}
	for _, h := range clientHeaders {
		if strings.EqualFold(name, h) {
			return fmt.Errorf("--session-header %q: llmreplay sets %s itself", name, h)
		}
	}
	return nil
}

// CheckExtraHeader refuses a --header that would duplicate a per-request header.
func CheckExtraHeader(name, sessionHeader string) error {
	switch {
	case strings.EqualFold(name, RequestIDHeader):
		return fmt.Errorf("--header %s: llmreplay sends %s: RUNID-REQUESTID on every request", name, RequestIDHeader)
	case sessionHeader != "" && strings.EqualFold(name, sessionHeader):
		return fmt.Errorf("--header %s: it is the session header (--session-header), sent with each request's session id; give --session-header '' to send none", name)
	}
	return nil
}

// requestHeader returns the net/http client's headers for r: the client's own, plus r's
// X-Request-Id and session header.
func (c *Client) requestHeader(r *Request) http.Header {
	session := r.HasSession && c.opts.SessionHeader != ""
	if r.RunID == "" && !session {
		return c.header
	}
	h := make(http.Header, len(c.header)+2)
	maps.Copy(h, c.header)
	vals := make([]string, 2) // one allocation for both values' slices
	var buf [64]byte
	if r.RunID != "" {
		b := append(append(buf[:0], r.RunID...), '-')
		vals[0] = string(strconv.AppendInt(b, r.ID, 10))
		h[RequestIDHeader] = vals[0:1:1]
	}
	if session {
		// Set as given, not canonicalised: the raw client writes it so too.
		vals[1] = string(strconv.AppendInt(buf[:0], r.Session, 10))
		h[c.opts.SessionHeader] = vals[1:2:2]
	}
	return h
}
