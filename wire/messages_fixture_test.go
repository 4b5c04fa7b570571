package wire

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// streamFigures are what a whole stream says, as a client reads it: the usage of the last
// usage event that has each count (a later one corrects an earlier: Ollama's message_start
// holds an estimate), the output events, where the answer began, the text and reasoning.
type streamFigures struct {
	prompt, output, cached     int32
	hasCached, finished, done  bool
	outputs, firstAnswer       int // firstAnswer: the output event the answer began at, -1 for none
	text, reasoning, toolNames string
	toolArgs                   string
}

// decodeStream decodes an SSE body event by event with dec, as the transport does.
func decodeStream(t *testing.T, body []byte, dec func([]byte, *Chunk) error) streamFigures {
	t.Helper()
	f := streamFigures{firstAnswer: -1}
	var c Chunk
	for _, ev := range bytes.Split(bytes.TrimSpace(body), []byte("\n\n")) {
		var data []byte
		for _, line := range bytes.Split(ev, []byte("\n")) {
			if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				data = d
			}
		}
		if string(data) == "[DONE]" {
			f.done = true
			continue
		}
		if err := dec(data, &c); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		if c.Output {
			if c.Answer && f.firstAnswer < 0 {
				f.firstAnswer = f.outputs
			}
			f.outputs++
			f.text += string(c.Text)
			f.reasoning += string(c.Reasoning)
			for _, tc := range c.ToolCalls {
				f.toolNames += tc.Name
				f.toolArgs += tc.Arguments
			}
		}
		if c.Usage && c.Choices == 0 {
			if c.HasPrompt {
				f.prompt = c.PromptTokens
			}
			if c.HasCompletion {
				f.output = c.CompletionTokens
			}
			if c.HasCached {
				f.cached, f.hasCached = c.Cached, true
			}
		}
		f.finished = f.finished || c.Finished
	}
	return f
}

// TestMessagesFixtures decodes each engine's stream (testdata/messages/SOURCES.md says
// where each comes from) and checks every figure it holds.
func TestMessagesFixtures(t *testing.T) {
	for file, want := range map[string]streamFigures{
		"anthropic-basic.sse": {prompt: 11, output: 6, finished: true, outputs: 3, firstAnswer: 0, text: "Hello there!"},
		// Anthropic's input_tokens excludes cache reads: with --backend openai the prompt
		// adds them (0 here), the engines' reading takes input_tokens as it is.
		"anthropic-tool-use.sse": {prompt: 377, output: 65, hasCached: true, finished: true, outputs: 7, firstAnswer: 0,
			text: "I'll check the current weather in Paris for you.", toolNames: "get_weather", toolArgs: `{"location": "Paris"}`},
		"vllm-82df3f4-thinking.sse": {prompt: 24, output: 7, finished: true, done: true, outputs: 5, firstAnswer: 3,
			text: "Okay, the user says hi.\nHello — hi!", reasoning: "Okay, the user says hi.\n"},
		"sglang-0198d48-text.sse": {prompt: 24, output: 12, cached: 16, hasCached: true, finished: true, outputs: 4, firstAnswer: 0,
			text: "Hello! How can"},
		"ollama-v0.17.4-text.sse": {prompt: 8, output: 5, finished: true, outputs: 5, firstAnswer: 0,
			text: " station relation error score one"},
	} {
		body, err := os.ReadFile(filepath.Join("testdata", "messages", file))
		if err != nil {
			t.Fatal(err)
		}
		if got := decodeStream(t, body, DecodeMessages); got != want {
			t.Errorf("%s:\n got %+v\nwant %+v", file, got, want)
		}
		// encoding/json alone reads every stream the same.
		slow := func(data []byte, c *Chunk) error { c.reset(); return decodeMessagesJSON(data, c, false) }
		if got := decodeStream(t, body, slow); got != want {
			t.Errorf("%s, encoding/json:\n got %+v\nwant %+v", file, got, want)
		}
	}
}
