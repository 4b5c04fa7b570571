package wire

import "encoding/json"

// RequestBody is a completions or chat completions request as a server decodes it: the
// fields the Encoder writes (and the ones OpenAI clients send that the simulated engine
// checks), each a pointer or raw value so that absent, null and zero stay apart. Fields it
// does not name (top_p, ...) are accepted and ignored by encoding/json, as vLLM ignores
// what it does not use.
type RequestBody struct {
	Model               *string         `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`   // completions: a string or token ids
	Messages            json.RawMessage `json:"messages"` // chat: a list of messages
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"` // OpenAI's newer name for chat
	MinTokens           *int            `json:"min_tokens"`            // vLLM, SGLang
	IgnoreEOS           *bool           `json:"ignore_eos"`            // vLLM, SGLang, llama.cpp
	Stream              *bool           `json:"stream"`
	StreamOptions       *StreamOptions  `json:"stream_options"`
	N                   *int            `json:"n"`
}

// StreamOptions is OpenAI's stream_options plus vLLM's continuous_usage_stats (usage in
// every chunk, which gives each chunk's token count).
type StreamOptions struct {
	IncludeUsage         *bool `json:"include_usage"`
	ContinuousUsageStats *bool `json:"continuous_usage_stats"`
}
