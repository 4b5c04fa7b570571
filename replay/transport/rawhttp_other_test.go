//go:build !linux

package transport

import (
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/wire"
)

// TestHTTPClientChoiceNotLinux: where the raw client is not built, auto chooses net/http
// and raw is refused with a message that says what to use.
func TestHTTPClientChoiceNotLinux(t *testing.T) {
	u, _ := wire.BaseURL("http://127.0.0.1:8000")
	c, err := NewClient(ClientOptions{BaseURL: u, API: wire.APICompletions, Backend: wire.BackendVLLM, Model: "m"})
	if err != nil || c.HTTPClientName() != HTTPClientNetHTTP {
		t.Fatalf("auto: %v, %v; want net/http", c, err)
	}
	_, err = NewClient(ClientOptions{BaseURL: u, API: wire.APICompletions, Backend: wire.BackendVLLM, Model: "m", HTTPClient: HTTPClientRaw})
	if err == nil || !strings.Contains(err.Error(), "only built for linux; use --http-client net/http") {
		t.Fatalf("raw: %v", err)
	}
}
