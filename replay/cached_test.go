package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
)

// cachedServer streams like vLLM with --enable-prompt-tokens-details: one chunk per token,
// then the usage chunk, whose prompt_tokens_details.cached_tokens is half the prompt's
// words for an even count and which has no prompt_tokens_details for an odd one.
func cachedServer(w http.ResponseWriter, r *http.Request) {
	var b vllmtest.ReqBody
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &b); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, 400)
		return
	}
	n := len(strings.Fields(b.Prompt))
	w.Header().Set("Content-Type", "text/event-stream")
	for i := 1; i <= b.MaxTokens; i++ {
		fmt.Fprint(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" tok\",\"finish_reason\":null}]}\n\n")
	}
	details := ""
	if n%2 == 0 {
		details = fmt.Sprintf(`,"prompt_tokens_details":{"cached_tokens":%d}`, n/2)
	}
	fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d,\"completion_tokens\":%d%s}}\n\ndata: [DONE]\n\n",
		n, n+b.MaxTokens, b.MaxTokens, details)
}

// TestCachedTokensBothClients: both HTTP clients record the server's cached_tokens in
// PromptTokensCached, and null when the server did not say.
func TestCachedTokensBothClients(t *testing.T) {
	base := vllmtest.Start(t, http.HandlerFunc(cachedServer))
	for _, hc := range []string{transport.HTTPClientRaw, transport.HTTPClientNetHTTP} {
		c := newTestClient(t, base, func(o *transport.ClientOptions) { o.HTTPClient = hc })
		reqs := uniformTrace(6, time.Millisecond, 0, 3)
		for i := range reqs {
			reqs[i].PromptTokens = int32(10 + i)
		}
		_, res, _ := runTrace(t, context.Background(), c, reqs, nil)
		if len(res) != len(reqs) {
			t.Fatalf("%s: %d results", hc, len(res))
		}
		for _, r := range res {
			want := int32(results.Null)
			if r.PromptTokens%2 == 0 {
				want = r.PromptTokens / 2
			}
			if r.Status != results.StatusOK || r.PromptTokensCached != want {
				t.Errorf("%s: request %d (%d prompt tokens): %s, cached %d, want %d", hc, r.RequestID, r.PromptTokens, r.Status, r.PromptTokensCached, want)
			}
		}
	}
}
