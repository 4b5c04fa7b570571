package wire

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResponsesFixtures decodes each engine's stream (wire/testdata/responses, their
// sources in SOURCES.md there) and checks every figure a record takes from it.
func TestResponsesFixtures(t *testing.T) {
	cases := map[string]streamFigures{
		"ollama-v0.17.4.sse": {events: 12, outputs: 4, firstAnswer: 0, text: " station relation error score",
			prompt: 6, output: 4, hasCached: true, hasReasonTk: true, finished: true},
		"vllm-reasoning.sse": {events: 20, outputs: 7, firstAnswer: 3, text: "Okay, the userHello!\n \"Hi\" there", reasoning: "Okay, the user",
			prompt: 12, output: 7, hasCached: true, reasonTk: 3, hasReasonTk: true, finished: true},
		"vllm-function-call.sse": {events: 11, outputs: 6, firstAnswer: 0, toolNames: "tool_0", callIDs: "call_1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d",
			toolArgs: `{"city": "Paris"}`, prompt: 40, output: 9, cached: 32, hasCached: true, hasReasonTk: true, finished: true},
		"sglang-reasoning.sse": {events: 19, outputs: 7, firstAnswer: 3, text: "Let me thinkBonjour à tous.", reasoning: "Let me think",
			prompt: 12, output: 7, cached: 4, hasCached: true, reasonTk: 3, hasReasonTk: true, finished: true},
		"openai-reference.sse": {events: 16, outputs: 8, firstAnswer: 3, text: "**Checking the weather**", reasoning: "**Checking the weather**",
			toolNames: "tool_0", callIDs: "call_zXh0wRa1aXfUY0yGdmTxrKPz", toolArgs: `{"location":"Paris`,
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
		if got := decodeStream(t, body, DecodeResponses, true); got != want {
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
