package transport

import (
	"bytes"
	"testing"

	"github.com/llmreplay/llmreplay/wire"
)

// BenchmarkAppendBody: the request body as the preparer builds it per request, for each
// API and a length-forcing backend, from a 4 KiB prompt with characters to escape, and for
// an API with tools, with a 20 KB tool description too.
func BenchmarkAppendBody(b *testing.B) {
	u, _ := wire.BaseURL("http://127.0.0.1:8000/v1")
	prompt := bytes.Repeat([]byte("the \"quick\" fox\n"), 256)
	for _, api := range []wire.API{wire.APICompletions, wire.APIChat} {
		c, err := NewClient(ClientOptions{BaseURL: u, API: api, Backend: wire.BackendVLLM, Model: "m", HTTPClient: HTTPClientNetHTTP})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(string(api), func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 2*len(prompt)+256)
			for b.Loop() {
				buf = c.AppendBody(buf[:0], prompt, 128)
			}
		})
		if !c.TakesTools() {
			continue
		}
		// With tool definitions of about 4,000 tokens (a coding agent's), already escaped
		// as the replay keeps them: one more copy into the body.
		tools := bytes.Repeat([]byte(" word"), 4000)
		b.Run(string(api)+"+tools", func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 2*len(prompt)+len(tools)+512)
			for b.Loop() {
				buf = c.AppendPromptBody(buf[:0], c.DefaultBodyPrefix(), prompt, 128, tools, nil)
			}
		})
	}
}
