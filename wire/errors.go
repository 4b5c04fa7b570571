package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// chunkJSON is the part of an OpenAI-compatible stream chunk, or of an error body, the
// replayer reads: the exact decoding the fast chunk scanner is checked against.
type chunkJSON struct {
	Object  string          `json:"object"`
	Message string          `json:"message"` // vLLM's older top-level error object
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Text         string      `json:"text"`
		Delta        openAIDelta `json:"delta"`
		FinishReason *string     `json:"finish_reason"`
	} `json:"choices"`
	Usage *openAIUsage `json:"usage"`
}

// openAIDelta is what a choice generated: a stream chunk's delta, or the message of a chat
// answer that was not streamed (answer.go).
type openAIDelta struct {
	Content          string          `json:"content"`
	ReasoningContent string          `json:"reasoning_content"`
	Reasoning        string          `json:"reasoning"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
}

// openAIUsage is the usage object of the OpenAI-compatible APIs (completions, chat), in a
// stream's chunk or in an answer that was not streamed (answer.go).
type openAIUsage struct {
	PromptTokens     *int32 `json:"prompt_tokens"`
	CompletionTokens *int32 `json:"completion_tokens"`
	// vLLM (--enable-prompt-tokens-details), SGLang, OpenAI: prompt tokens served
	// from the prefix cache; the object or the count may be null or absent.
	PromptTokensDetails *struct {
		CachedTokens *int32 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	// vLLM, SGLang, OpenAI: the part of completion_tokens that was reasoning.
	CompletionTokensDetails *struct {
		ReasoningTokens *int32 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// set puts u in c as the final usage.
func (u *openAIUsage) set(c *Chunk) {
	c.Usage = true
	if u.PromptTokens != nil {
		c.PromptTokens, c.HasPrompt = *u.PromptTokens, true
	}
	if u.CompletionTokens != nil {
		c.CompletionTokens, c.HasCompletion = *u.CompletionTokens, true
	}
	if d := u.PromptTokensDetails; d != nil && d.CachedTokens != nil {
		c.Cached, c.HasCached = *d.CachedTokens, true
	}
	if d := u.CompletionTokensDetails; d != nil && d.ReasoningTokens != nil {
		c.ReasoningTokens, c.HasReasoningTokens = *d.ReasoningTokens, true
	}
}

// errorMessage extracts a server's error message from an error field or object.
func (c *chunkJSON) errorMessage() (string, bool) {
	if c.Object == "error" {
		return c.Message, true
	}
	if len(c.Error) == 0 || string(c.Error) == "null" {
		return "", false
	}
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(c.Error, &e) == nil && e.Message != "" {
		return e.Message, true
	}
	var s string
	if json.Unmarshal(c.Error, &s) == nil {
		return s, true
	}
	return string(c.Error), true
}

// HTTPErrorText words an error response from its status and first bytes: the server's
// error message when the body is an OpenAI or vLLM error object, else the body itself,
// on one line (ShortText).
func HTTPErrorText(status int, body []byte) string {
	var e chunkJSON
	msg := ""
	if json.Unmarshal(body, &e) == nil {
		msg, _ = e.errorMessage()
	}
	if msg == "" {
		msg = string(body)
	}
	return fmt.Sprintf("HTTP %d: %s", status, ShortText([]byte(msg)))
}

// ShortText returns b on one line, at most 200 bytes, for error messages.
func ShortText(b []byte) string {
	const max = 200
	s := strings.Join(strings.Fields(string(bytes.ToValidUTF8(b, []byte("?")))), " ")
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// Encoded reports a Content-Encoding other than identity. The clients send no
// Accept-Encoding (compression would hold chunks back), so a server that compresses
// anyway is answered with an error rather than decompressed: the timings of a stream that
// went through a compressor are not the engine's.
func Encoded(contentEncoding string) bool {
	return contentEncoding != "" && !strings.EqualFold(strings.TrimSpace(contentEncoding), "identity")
}

// EncodedStreamText words a 2xx response compressed without being asked to.
func EncodedStreamText(contentEncoding string) string {
	return fmt.Sprintf("response body has Content-Encoding %s, which the client did not ask for (no Accept-Encoding): not read",
		ShortText([]byte(contentEncoding)))
}

// EncodedErrorText words an error response whose body is compressed without being asked to.
func EncodedErrorText(status int, contentEncoding string) string {
	return fmt.Sprintf("HTTP %d: (a %s body, which the client did not ask for)", status, ShortText([]byte(contentEncoding)))
}
