package tokenize

import "testing"

// BenchmarkAppendPrompt reports prompt tokens built per second on one goroutine, reusing dst
// as the replayer does (so allocs/op must be 0).
func BenchmarkAppendPrompt(b *testing.B) {
	blocks := make([]int64, 64)
	for i := range blocks {
		blocks[i] = int64(1000 + i)
	}
	for _, bc := range []struct {
		name string
		spec PromptSpec
	}{
		{"tail/128", PromptSpec{Tokens: 128}},
		{"tail/2k", PromptSpec{Tokens: 2048}},
		{"tail/200k", PromptSpec{Tokens: 200000}},
		{"mooncake/12k", PromptSpec{Tokens: 12000, Blocks: blocks[:24], BlockTokens: 512}},
		{"blocks16/8k", PromptSpec{Tokens: 8192, Blocks: blocks, BlockTokens: 16}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bld := testBuilder(b, O200kBase, BuilderOptions{})
			buf := make([]byte, 0, 8*bc.spec.Tokens+64)
			p := bc.spec
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				p.RequestID = int64(i)
				var err error
				if buf, err = bld.AppendPrompt(buf[:0], p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(p.Tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkAppendTokenIDs is BenchmarkAppendPrompt for token-id prompts.
func BenchmarkAppendTokenIDs(b *testing.B) {
	for _, bc := range []struct {
		name string
		spec PromptSpec
	}{
		{"tail/2k", PromptSpec{Tokens: 2048}},
		{"tail/200k", PromptSpec{Tokens: 200000}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bld := testBuilder(b, O200kBase, BuilderOptions{})
			buf := make([]int32, 0, bc.spec.Tokens)
			p := bc.spec
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				p.RequestID = int64(i)
				var err error
				if buf, err = bld.AppendTokenIDs(buf[:0], p, 128256); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(p.Tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
