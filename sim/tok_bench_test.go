package sim

import (
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/tokenize"
)

// BenchmarkPromptCount is the cost of counting a ~4k-token text prompt, which every
// text (not token-id) request pays once on arrival.
func BenchmarkPromptCount(b *testing.B) {
	enc, _ := tokenize.Get(tokenize.CL100kBase)
	text := strings.Repeat("The quick brown fox jumps over the lazy dog, again and again. ", 320)
	n := enc.Count(text)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		enc.Count(text)
	}
	b.ReportMetric(float64(n), "tokens")
}

// BenchmarkPromptCountCached is the same prompt through the server's count cache.
func BenchmarkPromptCountCached(b *testing.B) {
	cfg, _ := Profile("tiny")
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	text := strings.Repeat("The quick brown fox jumps over the lazy dog, again and again. ", 320)
	s.count(text, nil)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		s.count(text, nil)
	}
}

func TestCountCacheAgrees(t *testing.T) {
	cfg, _ := Profile("tiny")
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, text := range []string{"short", strings.Repeat("lorem ipsum dolor ", 40), strings.Repeat("x", 300), strings.Repeat("lorem ipsum dolor ", 40) + "!"} {
		want := s.enc.Count(text)
		for range 2 {
			if got := s.count(text, nil); got != want {
				t.Fatalf("count(%.20q...) = %d, want %d", text, got, want)
			}
		}
	}
}
