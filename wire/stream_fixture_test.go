package wire

import (
	"bytes"
	"testing"
)

// streamFigures are what a whole stream says, as a client reads it: the usage of the last
// usage event that has each count (a later one corrects an earlier: Ollama's message_start
// holds an estimate), the events and output events, where the answer began, the text,
// reasoning and tool calls.
type streamFigures struct {
	events, outputs        int
	firstAnswer            int // the output event the answer began at, -1 for none
	text, reasoning        string
	toolNames, callIDs     string
	toolArgs               string
	prompt, output         int32
	cached, reasonTk       int32
	hasCached, hasReasonTk bool
	finished, done         bool
}

// decodeStream decodes an SSE body event by event with dec, as the transport does. With
// typed, each event's "event:" line must name the type its data holds, as the typed
// streams' references write them.
func decodeStream(t *testing.T, body []byte, dec func([]byte, *Chunk) error, typed bool) streamFigures {
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
			}
		}
		f.events++
		if string(data) == "[DONE]" {
			f.done = true
			continue
		}
		if err := dec(data, &c); err != nil {
			t.Fatalf("event %d (%s): %v", f.events, name, err)
		}
		if typed && !bytes.Contains(data, []byte(`"type":"`+string(name)+`"`)) {
			t.Errorf("event %d: the event line says %s, the data %s", f.events, name, ShortText(data))
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
				f.callIDs += tc.ID
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
			if c.HasReasoningTokens {
				f.reasonTk, f.hasReasonTk = c.ReasoningTokens, true
			}
		}
		f.finished = f.finished || c.Finished
	}
	return f
}
