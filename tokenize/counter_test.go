package tokenize

import (
	"strings"
	"testing"
)

func TestCounterCountsTheWholeText(t *testing.T) {
	for _, name := range encodings {
		enc, _ := Get(name)
		text := "The quick brown fox jumps over the lazy dog. Tokenization isn't chunk-aligned: héllo wörld 12345!"
		want := enc.Count(text)
		// Split every word in two across chunks: per-chunk counting would overcount.
		c := enc.NewCounter()
		perChunk := 0
		for i := 0; i < len(text); i += 3 {
			chunk := text[i:min(i+3, len(text))]
			c.WriteString(chunk)
			perChunk += enc.Count(chunk)
		}
		if got := c.Count(); got != want {
			t.Errorf("%s: Counter = %d, want %d", name, got, want)
		}
		if perChunk <= want {
			t.Errorf("%s: per-chunk sum %d not above %d: the test no longer shows why Counter buffers", name, perChunk, want)
		}
		if c.Len() != len(text) {
			t.Errorf("Len = %d", c.Len())
		}
		c.Reset()
		if c.Count() != 0 || c.Len() != 0 {
			t.Error("Reset left text behind")
		}
		c.Write([]byte(strings.Repeat(" hello", 10)))
		if got := c.Count(); got != 10 {
			t.Errorf("after Reset: %d, want 10", got)
		}
	}
}
