package wire

import (
	"encoding/json"
	"errors"
)

// A generation request that did not ask for a stream (stream false or absent) is
// answered with one JSON body: the recording proxy (replay/transport's Tap) decodes it into
// a Chunk holding the whole answer, as if it were the one chunk of a stream that carried
// the final usage. The shapes, per API:
//
//	completions  {"choices":[{"text","finish_reason"}],"usage":{...}}
//	             (OpenAI's Completion object)
//	chat         {"choices":[{"message":{"content","reasoning_content","reasoning",
//	             "tool_calls"},"finish_reason"}],"usage":{...}} (ChatCompletion; vLLM's
//	             and SGLang's reasoning fields)
//	             usage: prompt_tokens, completion_tokens,
//	             prompt_tokens_details.cached_tokens,
//	             completion_tokens_details.reasoning_tokens
//	messages     {"type":"message","content":[{"type":"text","text"},{"type":"thinking",
//	             "thinking"},{"type":"tool_use","id","name"}],"usage":{"input_tokens",
//	             "output_tokens","cache_read_input_tokens",...}} (Anthropic's Message);
//	             {"type":"error","error":{...}} an error
//	responses    {"object":"response","status","error","output":[{"type":"message",
//	             "content":[{"type":"output_text","text"},{"type":"refusal","refusal"}]},
//	             {"type":"reasoning","content":[{"text"}],"summary":[{"text"}]},
//	             {"type":"function_call","call_id","name","arguments"}],"usage":{
//	             "input_tokens","output_tokens","input_tokens_details.cached_tokens",
//	             "output_tokens_details.reasoning_tokens"}} (OpenAI's Response object)
//
// Text and Reasoning are what a stream of the same answer would have carried in its
// deltas (a tool call's arguments are not text, as in a stream), Output and Answer say
// whether any output or answer output came, and the usage (Choices 0) is the final one.
// A body is decoded with encoding/json: it is one per request, not one per token, and a
// whole answer's decode is microseconds (BenchmarkDecodeAnswer).

// openAIAnswerJSON is a completions or chat answer as encoding/json reads it.
type openAIAnswerJSON struct {
	Object  string          `json:"object"`
	Message string          `json:"message"` // vLLM's older top-level error object
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Text         string      `json:"text"`
		Message      openAIDelta `json:"message"`
		FinishReason *string     `json:"finish_reason"`
	} `json:"choices"`
	Usage *openAIUsage `json:"usage"`
}

// messagesAnswerJSON is a Messages API answer as encoding/json reads it.
type messagesAnswerJSON struct {
	Type       string              `json:"type"`
	Content    []messagesBlockJSON `json:"content"`
	StopReason *string             `json:"stop_reason"`
	Usage      *messagesUsageJSON  `json:"usage"`
	Error      *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// responsesAnswerJSON is a Responses API answer as encoding/json reads it.
type responsesAnswerJSON struct {
	Status string    `json:"status"`
	Error  *apiError `json:"error"`
	Output []struct {
		Type    string `json:"type"`
		Content []struct {
			Type    string `json:"type"`
			Text    string `json:"text"`
			Refusal string `json:"refusal"`
		} `json:"content"`
		Summary []struct {
			Text string `json:"text"`
		} `json:"summary"`
		CallID string `json:"call_id"`
		Name   string `json:"name"`
	} `json:"output"`
	Usage *responsesUsage `json:"usage"`
}

// DecodeAnswer decodes the body of a generation answer that was not streamed into c
// (the shapes above), reading the Messages API's usage as Decode does for the backend.
// It returns an error for a body that is not JSON or not an answer's shape (a field of
// another type). An error answer sets IsError and ErrorMessage.
func (e Encoder) DecodeAnswer(body []byte, c *Chunk) error {
	c.reset()
	k := e.kind
	switch {
	case k != nil && k.Unary:
		return errors.New("the " + string(k.Name) + " API's answers are read by a UnaryScanner")
	case k == nil || k.Decode == nil:
		return decodeOpenAIAnswer(body, c)
	case k.Name == APIMessages:
		return decodeMessagesAnswer(body, c, e.backend != BackendSGLang)
	case k.Name == APIResponses:
		return decodeResponsesAnswer(body, c)
	}
	return errors.New("no decoder of answers that were not streamed for the " + string(k.Name) + " API")
}

func decodeOpenAIAnswer(body []byte, c *Chunk) error {
	var a openAIAnswerJSON
	if err := json.Unmarshal(body, &a); err != nil {
		return err
	}
	e := chunkJSON{Object: a.Object, Message: a.Message, Error: a.Error}
	if msg, ok := e.errorMessage(); ok {
		c.IsError, c.ErrorMessage = true, msg
		return nil
	}
	for i := range a.Choices {
		ch := &a.Choices[i]
		c.choice(ch.Text, &ch.Message, ch.FinishReason)
	}
	if a.Usage != nil {
		a.Usage.set(c)
	}
	return nil
}

func decodeMessagesAnswer(body []byte, c *Chunk, uncached bool) error {
	var a messagesAnswerJSON
	if err := json.Unmarshal(body, &a); err != nil {
		return err
	}
	if a.Type == "error" || a.Error != nil {
		c.IsError, c.ErrorMessage = true, "error"
		if e := a.Error; e != nil && e.Message != "" {
			c.ErrorMessage = e.Type + ": " + e.Message
		} else if e != nil && e.Type != "" {
			c.ErrorMessage = e.Type
		}
		return nil
	}
	for i := range a.Content {
		c.contentBlock(&a.Content[i], i)
	}
	c.Finished = a.StopReason != nil && *a.StopReason != ""
	if a.Usage != nil {
		c.messagesUsage(a.Usage, uncached, true)
	}
	return nil
}

func decodeResponsesAnswer(body []byte, c *Chunk) error {
	var a responsesAnswerJSON
	if err := json.Unmarshal(body, &a); err != nil {
		return err
	}
	if a.Status == "failed" || a.Error != nil {
		c.IsError, c.ErrorMessage = true, "response.failed"
		if a.Error != nil {
			c.ErrorMessage = "response.failed: " + a.Error.text()
		}
		return nil
	}
	for i := range a.Output {
		it := &a.Output[i]
		switch it.Type {
		case "message":
			for _, p := range it.Content {
				c.output(p.Text, true)
				c.output(p.Refusal, true)
			}
		case "reasoning":
			for _, p := range it.Content {
				c.output(p.Text, false)
			}
			for _, p := range it.Summary {
				c.output(p.Text, false)
			}
		case "function_call", "custom_tool_call":
			c.Output, c.Answer = true, true
			c.ToolCalls = append(c.ToolCalls, ToolCallDelta{Index: i, ID: it.CallID, Type: "function", Name: it.Name})
		}
	}
	c.Finished = a.Status == "completed" || a.Status == "incomplete"
	if a.Usage != nil {
		a.Usage.set(c)
	}
	return nil
}

// ResponseID returns the "id" of a Responses API answer that was not streamed (a later
// request names it as its previous_response_id); "" when the body has none.
func ResponseID(body []byte) string {
	var a struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(body, &a) != nil {
		return ""
	}
	return a.ID
}
