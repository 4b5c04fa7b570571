package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/wire"
)

// An API kind registered in wire reaches both clients with nothing else changed: the toy
// kind below posts {"input": ...} to /toy and streams {"piece":...,"n":k} events, then
// {"stop":true,"n":total}, which its own decoder reads.
var toyReplayKind = wire.Kind{
	Name: "toy-replay",
	Path: "/toy",
	AppendPrompt: func(b, prompt []byte, _ bool) []byte {
		b = append(b, `,"input":`...)
		b = wire.AppendJSONBytes(b, prompt)
		return append(b, '}')
	},
	Decode: func(data []byte, c *wire.Chunk) error {
		var ev struct {
			Piece string `json:"piece"`
			N     *int32 `json:"n"`
			Stop  bool   `json:"stop"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return err
		}
		*c = wire.Chunk{Text: append(c.Text[:0], ev.Piece...), Output: ev.Piece != "", Finished: ev.Stop}
		if ev.Stop && ev.N != nil {
			// The last event is usage alone, as OpenAI's final chunk (no choices).
			c.Usage, c.HasCompletion, c.CompletionTokens = true, true, *ev.N
		} else {
			c.Choices = 1
		}
		return nil
	},
}

func init() { wire.Register(&toyReplayKind) }

func toyServer(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Input     *string `json:"input"`
		MaxTokens int     `json:"max_tokens"`
	}
	raw, _ := io.ReadAll(r.Body)
	if r.URL.Path != "/v1/toy" || json.Unmarshal(raw, &b) != nil || b.Input == nil {
		http.Error(w, `{"error":{"message":"not a toy request"}}`, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for i := 0; i < b.MaxTokens; i++ {
		fmt.Fprint(w, "data: {\"piece\":\" tok\"}\n\n")
	}
	fmt.Fprintf(w, "data: {\"stop\":true,\"n\":%d}\n\ndata: [DONE]\n\n", b.MaxTokens)
}

func TestRegisteredKindBothClients(t *testing.T) {
	base := vllmtest.Start(t, http.HandlerFunc(toyServer))
	for _, hc := range []string{transport.HTTPClientRaw, transport.HTTPClientNetHTTP} {
		if hc == transport.HTTPClientRaw && !transport.RawBuilt {
			continue
		}
		c := newTestClient(t, base, func(o *transport.ClientOptions) { o.HTTPClient = hc; o.API = "toy-replay" })
		_, res, _ := runTrace(t, context.Background(), c, uniformTrace(4, time.Millisecond, 5, 3), nil)
		if len(res) != 4 {
			t.Fatalf("%s: %d results", hc, len(res))
		}
		for _, r := range res {
			if r.Status != results.StatusOK || len(r.ChunkNS) != 3 || r.OutputTokens != 3 || r.OutputTokensSource != results.SourceUsage {
				t.Errorf("%s: request %d: %s %q, %d chunks, %d tokens (%s)", hc, r.RequestID, r.Status, r.Error, len(r.ChunkNS), r.OutputTokens, r.OutputTokensSource)
			}
		}
	}
}
