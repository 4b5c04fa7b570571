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

// ollamaServer streams /v1/completions as Ollama's OpenAI layer (v0.17.4) does when
// asked for usage, in its chunks' shape: every chunk, the finish chunk too, carries an all-zero placeholder usage; the
// real usage comes in a last chunk with no choices.
func ollamaServer(w http.ResponseWriter, r *http.Request) {
	var b vllmtest.ReqBody
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &b); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, 400)
		return
	}
	n := len(strings.Fields(b.Prompt)) + 1 // a BOS token
	const zero = `"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}`
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	for range b.MaxTokens {
		fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"choices\":[{\"text\":\" w\",\"index\":0,\"finish_reason\":null}],\"model\":\"tiny\",\"system_fingerprint\":\"fp_ollama\",%s}\n\n", zero)
		f.Flush()
	}
	fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"choices\":[{\"text\":\"\",\"index\":0,\"finish_reason\":\"length\"}],\"model\":\"tiny\",\"system_fingerprint\":\"fp_ollama\",%s}\n\n", zero)
	fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"choices\":[],\"model\":\"tiny\",\"system_fingerprint\":\"fp_ollama\",\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n",
		n, b.MaxTokens, n+b.MaxTokens)
}

// TestZeroPlaceholderUsageBothClients: against Ollama's zero placeholder usage, both
// HTTP clients record no chunk_tokens (the analysis then spreads output_tokens over the
// chunks) rather than 0 a chunk, the live progress counts a chunk a token, and the final
// usage still gives output_tokens.
func TestZeroPlaceholderUsageBothClients(t *testing.T) {
	base := vllmtest.Start(t, http.HandlerFunc(ollamaServer))
	for _, hc := range []string{transport.HTTPClientRaw, transport.HTTPClientNetHTTP} {
		if hc == transport.HTTPClientRaw && !transport.RawBuilt {
			continue
		}
		c := newTestClient(t, base, func(o *transport.ClientOptions) { o.HTTPClient = hc })
		prog := new(Progress)
		_, res, _ := runTrace(t, context.Background(), c, uniformTrace(6, time.Millisecond, 5, 4), func(o *Options) { o.Progress = prog })
		if len(res) != 6 {
			t.Fatalf("%s: %d results", hc, len(res))
		}
		for _, r := range res {
			if r.Status != results.StatusOK || len(r.ChunkNS) != 4 || r.ChunkTokens != nil {
				t.Errorf("%s: request %d: %s %q, %d chunks, chunk_tokens %v; want ok, 4 chunks, none", hc, r.RequestID, r.Status, r.Error, len(r.ChunkNS), r.ChunkTokens)
			}
			if r.OutputTokens != 4 || r.OutputTokensSource != results.SourceUsage || r.PromptTokensServer != 6 {
				t.Errorf("%s: request %d: output %d (%s), prompt %d; want 4 (usage), 6", hc, r.RequestID, r.OutputTokens, r.OutputTokensSource, r.PromptTokensServer)
			}
		}
		if got := prog.OutputTokens.Load(); got != 6*4 {
			t.Errorf("%s: progress counted %d output tokens, want 24 (a chunk a token)", hc, got)
		}
	}
}
