package wire

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// streamFigures is what a Responses stream adds up to, decoded event by event as a client
// does, one Chunk reused.
type streamFigures struct {
	events, outputs  int
	firstAnswer      int // index of the first output chunk that is answer, -1 when none
	text, reasoning  string
	toolName, callID string
	toolArgs         string
	prompt, output   int32
	cached, reasonTk int32
	hasCached        bool
	hasReasonTk      bool
	finished         bool
}

// decodeFixture decodes every event of an SSE body with DecodeResponses; it checks that
// each event line names the type its data holds, as the streaming reference writes them.
func decodeFixture(t *testing.T, body []byte) streamFigures {
	t.Helper()
	f := streamFigures{firstAnswer: -1}
	var c Chunk
	for _, ev := range bytes.Split(bytes.TrimSpace(body), []byte("\n\n")) {
		var name, data []byte
		for _, line := range bytes.Split(ev, []byte("\n")) {
			if v, ok := bytes.CutPrefix(line, []byte("event: ")); ok {
				name = v
			} else if v, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				data = v
			} else {
				t.Fatalf("event %d: unexpected line %q", f.events+1, line)
			}
		}
		f.events++
		if err := DecodeResponses(data, &c); err != nil {
			t.Fatalf("event %d (%s): %v", f.events, name, err)
		}
		if !bytes.Contains(data, []byte(`"type":"`+string(name)+`"`)) {
			t.Errorf("event %d: the event line says %s, the data %s", f.events, name, ShortText(data))
		}
		if c.IsError {
			t.Fatalf("event %d: error %s", f.events, c.ErrorMessage)
		}
		if c.Output {
			if c.Answer && f.firstAnswer < 0 {
				f.firstAnswer = f.outputs
			}
			f.outputs++
			f.text += string(c.Text)
			f.reasoning += string(c.Reasoning)
			for _, tc := range c.ToolCalls {
				if tc.Name != "" {
					f.toolName, f.callID = tc.Name, tc.ID
				}
				f.toolArgs += tc.Arguments
			}
		}
		f.finished = f.finished || c.Finished
		if c.Usage && c.Choices == 0 {
			f.prompt, f.output, f.cached, f.hasCached = c.PromptTokens, c.CompletionTokens, c.Cached, c.HasCached
			f.reasonTk, f.hasReasonTk = c.ReasoningTokens, c.HasReasoningTokens
		}
	}
	return f
}

// TestResponsesFixtures decodes each engine's stream (wire/testdata/responses, their
// sources in SOURCES.md there) and checks every figure a record takes from it.
func TestResponsesFixtures(t *testing.T) {
	cases := map[string]streamFigures{
		"ollama-v0.17.4.sse": {events: 12, outputs: 4, firstAnswer: 0, text: " station relation error score",
			prompt: 6, output: 4, hasCached: true, hasReasonTk: true, finished: true},
		"vllm-reasoning.sse": {events: 20, outputs: 7, firstAnswer: 3, text: "Okay, the userHello!\n \"Hi\" there", reasoning: "Okay, the user",
			prompt: 12, output: 7, hasCached: true, reasonTk: 3, hasReasonTk: true, finished: true},
		"vllm-function-call.sse": {events: 11, outputs: 6, firstAnswer: 0, toolName: "tool_0", callID: "call_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d",
			toolArgs: `{"city": "Paris"}`, prompt: 40, output: 9, cached: 32, hasCached: true, hasReasonTk: true, finished: true},
		"sglang-reasoning.sse": {events: 19, outputs: 7, firstAnswer: 3, text: "Let me thinkBonjour à tous.", reasoning: "Let me think",
			prompt: 12, output: 7, cached: 4, hasCached: true, reasonTk: 3, hasReasonTk: true, finished: true},
		"openai-reference.sse": {events: 16, outputs: 8, firstAnswer: 3, text: "**Checking the weather**", reasoning: "**Checking the weather**",
			toolName: "tool_0", callID: "call_zXh0wRa1aXfUY0yGdmTxrKPz", toolArgs: `{"location":"Paris`,
			prompt: 81, output: 64, cached: 64, hasCached: true, reasonTk: 56, hasReasonTk: true, finished: true},
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "responses", "*.sse"))
	if len(files) != len(cases) {
		t.Errorf("%d fixtures, %d checked: every fixture needs its figures here", len(files), len(cases))
	}
	for name, want := range cases {
		body, err := os.ReadFile(filepath.Join("testdata", "responses", name))
		if err != nil {
			t.Fatal(err)
		}
		if got := decodeFixture(t, body); got != want {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
		if !strings.Contains(readSources(t), "`"+name+"`") {
			t.Errorf("%s: not in SOURCES.md", name)
		}
	}
}

func readSources(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "responses", "SOURCES.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
