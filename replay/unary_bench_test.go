package replay

import (
	"net/url"
	"testing"

	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// BenchmarkUnaryBody: the preparer's cost of an embeddings request of 8 inputs sharing 4,096
// prompt tokens (each built to its exact length by the prompt builder), and of one of 256
// inputs of 16 tokens: what the look-ahead pays per request, off the dispatcher's path.
func BenchmarkUnaryBody(b *testing.B) {
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		b.Fatal(err)
	}
	builder, err := tokenize.NewBuilder(enc, tokenize.BuilderOptions{})
	if err != nil {
		b.Fatal(err)
	}
	base, _ := url.Parse("http://127.0.0.1:9/v1")
	c, err := transport.NewClient(transport.ClientOptions{BaseURL: base, API: wire.APIEmbeddings, Backend: wire.BackendVLLM, Model: "m", HTTPClient: transport.HTTPClientNetHTTP})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, n := range []int{8, 256} {
		b.Run(map[int]string{8: "8x512", 256: "256x16"}[n], func(b *testing.B) {
			o := &Options{Client: c, Prompter: NewPrompter(PrompterOptions{Builder: builder}), Inputs: n}
			var s unaryScratch
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				tr := trace.Request{ID: int64(i), PromptTokens: 4096}
				body, err := s.body(o, c.DefaultBodyPrefix(), &tr)
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(len(body)))
			}
		})
	}
}
