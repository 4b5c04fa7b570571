package sim

import (
	"testing"
)

// BenchmarkChunkerToken measures the chunker's per-token append for each API: one op is
// one token's chunk appended to a reused buffer, so ns/op is the sim's own cost per
// streamed token and allocs/op must stay 0.
func BenchmarkChunkerToken(b *testing.B) {
	s, err := New(tinyFixed())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, bc := range benchAPIs {
		b.Run(bc.name, func(b *testing.B) {
			pl := plan{target: 1 << 30, finish: "length", stallAt: -1, malformedAt: -1, disconnectAt: -1, id: 7}
			ck := s.newChunker(bc.api, 100, false, &pl)
			buf := make([]byte, 0, 4096)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				buf = ck.appendToken(buf[:0], i+1)
			}
		})
	}
}

func tinyFixed() Config {
	cfg, _ := Profile("fixed")
	return cfg
}

var benchAPIs = []struct {
	name string
	api  apiKind
}{{"completions", apiCompletions}, {"chat", apiChat}, {"messages", apiMessages}, {"responses", apiResponses}}
