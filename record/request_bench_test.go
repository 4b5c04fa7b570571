package record

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParseGrowingContext parses the next call of an agent whose context has grown
// to about 100k tokens by appends: every call resends the earlier calls' messages and
// adds one. With the token cache (the default) only the new message is tokenized; without
// it (CacheTokens -1), all of them, every call.
//
//	go test ./record -run '^$' -bench ParseGrowingContext -benchtime 20x
func BenchmarkParseGrowingContext(b *testing.B) {
	for _, c := range []struct {
		name  string
		cache int
	}{{"cache", 0}, {"nocache", -1}} {
		b.Run(c.name, func(b *testing.B) {
			p := testParser(b, 16, c.cache)
			// 50 earlier messages of about 2,000 tokens each, then one new per call.
			var prefix strings.Builder
			prefix.WriteString(`{"model":"m","messages":[{"role":"system","content":"You are an agent."}`)
			for i := range 50 {
				role := "user"
				if i%2 == 1 {
					role = "assistant"
				}
				fmt.Fprintf(&prefix, `,{"role":%q,"content":%q}`, role, words(i*1000, 670))
			}
			warm := prefix.String() + `]}`
			r := mustParse(b, p, "/v1/chat/completions", warm)
			encodes := p.cache.encodes.Load()
			b.SetBytes(int64(len(warm)))
			b.ResetTimer()
			i := 0
			for b.Loop() {
				i++
				body := fmt.Sprintf(`%s,{"role":"user","content":"next step %d: %s"}]}`, prefix.String(), i, words(i*100, 50))
				if _, err := p.Parse("/v1/chat/completions", []byte(body)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(p.cache.encodes.Load()-encodes)/float64(i), "tokenized-messages/op")
			b.ReportMetric(float64(r.PromptTokens), "context-tokens")
		})
	}
}

// BenchmarkParseSmall parses a typical small streamed chat request: what the recorder
// adds to each request of a chat service.
//
//	go test ./record -run '^$' -bench ParseSmall
func BenchmarkParseSmall(b *testing.B) {
	p := testParser(b, 16, 0)
	body := []byte(`{"model":"llama","stream":true,"max_tokens":256,"user":"u-1","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write a haiku about the sea, please."}]}`)
	mustParse(b, p, "/v1/chat/completions", string(body))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Parse("/v1/chat/completions", body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseDistinct parses chat requests whose 100-word prompts all differ (no
// token cache hit), as the recorder does after the response: with prefix blocks (every
// prompt tokenized) and with none when the server counted the prompt (none tokenized).
//
//	go test ./record -run '^$' -bench ParseDistinct
func BenchmarkParseDistinct(b *testing.B) {
	for _, c := range []struct {
		name        string
		blockTokens int
	}{{"blocks64", 64}, {"noblocks-server-counted", 0}} {
		b.Run(c.name, func(b *testing.B) {
			p := testParser(b, c.blockTokens, 0)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":16,"messages":[{"role":"user","content":%q}]}`, words(i*100, 100))
				if _, err := p.ParseCounted("/v1/chat/completions", []byte(body), 150); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
