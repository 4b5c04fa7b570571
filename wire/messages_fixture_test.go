package wire

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMessagesFixtures decodes each engine's stream (testdata/messages/SOURCES.md says
// where each comes from) and checks every figure it holds.
func TestMessagesFixtures(t *testing.T) {
	for file, want := range map[string]streamFigures{
		"anthropic-basic.sse": {events: 9, prompt: 11, output: 6, finished: true, outputs: 3, firstAnswer: 0, text: "Hello there!"},
		// Anthropic's input_tokens excludes cache reads: with --backend openai the prompt
		// adds them (0 here), the engines' reading takes input_tokens as it is.
		"anthropic-tool-use.sse": {events: 15, prompt: 377, output: 65, hasCached: true, finished: true, outputs: 7, firstAnswer: 0,
			text: "I'll check the current weather in Paris for you.", toolNames: "get_weather", callIDs: "toolu_01NRLabsLyVHZPKxbKvkfSMn", toolArgs: `{"location": "Paris"}`},
		"vllm-82df3f4-thinking.sse": {events: 14, prompt: 24, output: 7, finished: true, done: true, outputs: 5, firstAnswer: 3,
			text: "Okay, the user says hi.\nHello — hi!", reasoning: "Okay, the user says hi.\n"},
		"sglang-0198d48-text.sse": {events: 9, prompt: 24, output: 12, cached: 16, hasCached: true, finished: true, outputs: 4, firstAnswer: 0,
			text: "Hello! How can"},
		"ollama-v0.17.4-text.sse": {events: 10, prompt: 8, output: 5, finished: true, outputs: 5, firstAnswer: 0,
			text: " station relation error score one"},
	} {
		body, err := os.ReadFile(filepath.Join("testdata", "messages", file))
		if err != nil {
			t.Fatal(err)
		}
		if got := decodeStream(t, body, DecodeMessages, false); got != want {
			t.Errorf("%s:\n got %+v\nwant %+v", file, got, want)
		}
		// encoding/json alone reads every stream the same.
		slow := func(data []byte, c *Chunk) error { c.reset(); return decodeMessagesJSON(data, c, false) }
		if got := decodeStream(t, body, slow, false); got != want {
			t.Errorf("%s, encoding/json:\n got %+v\nwant %+v", file, got, want)
		}
	}
}
