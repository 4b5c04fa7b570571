package replay

import (
	"testing"

	"github.com/llmreplay/llmreplay/wire"
)

// TestLengthFieldsMessages: the preflight words the Messages API's bodies as they are
// sent, max_tokens alone whatever the backend (its engines' routes drop ignore_eos and
// min_tokens), and does not call a model that stops early a server ignoring fields it was
// never sent; chat with vLLM keeps its forcing fields.
func TestLengthFieldsMessages(t *testing.T) {
	for _, tc := range []struct {
		api    wire.API
		fields string
		forces bool
	}{
		{wire.APIMessages, "max_tokens", false},
		{wire.APIChat, "max_tokens, min_tokens and ignore_eos", true},
	} {
		p := &preparer{api: tc.api, backend: wire.BackendVLLM}
		if got := p.lengthFields("max_tokens"); got != tc.fields || p.forcesLength() != tc.forces {
			t.Errorf("%s: fields %q, forces %v; want %q, %v", tc.api, got, p.forcesLength(), tc.fields, tc.forces)
		}
	}
}
