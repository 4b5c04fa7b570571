package wire

// chatKind is OpenAI's chat completions API: POST /chat/completions with "messages", a
// prompt being one user message; its stream chunks carry choices[].delta (content,
// reasoning, tool calls). OpenAI caps its output with max_completion_tokens.
var chatKind = Kind{
	Name:            APIChat,
	Path:            "/chat/completions",
	OpenAIMaxTokens: "max_completion_tokens",
	AppendPrompt:    appendChatPrompt,
	AppendMessages:  appendChatMessages,
	AppendTools:     appendChatTools,
	// OpenAI's chat reference (platform.openai.com/docs/api-reference/chat/create, user
	// message content parts): a text part, then image_url parts, the shape vLLM, SGLang
	// and TGI take.
	AppendUserMessage: appendChatUserMessage,
}

// appendChatUserMessage appends a user message whose content is a text part (none when
// text is empty) and one image_url part per image, its url a data URL. No detail field:
// the API's default (auto), which the engines ignore.
func appendChatUserMessage(b, text []byte, images []Image) []byte {
	return appendTextFirst(b, text, images, `{"type":"text","text":"`, `{"type":"image_url","image_url":{"url":"`, `"}}`)
}

// appendChatTools appends one function tool in chat's shape (tools[].function).
func appendChatTools(b, desc []byte) []byte {
	b = append(b, `,"tools":[{"type":"function","function":{"name":"tool_0","description":"`...)
	b = append(b, desc...)
	return append(b, `","parameters":{"type":"object","properties":{}}}}]`...)
}

func appendChatPrompt(b, prompt []byte, _ bool) []byte {
	b = append(b, `,"messages":[{"role":"user","content":`...)
	b = AppendJSONBytes(b, prompt)
	return append(b, `}]}`...)
}

func appendChatMessages(b, messages []byte) []byte {
	b = append(b, `,"messages":[`...)
	b = append(b, messages...)
	return append(b, `]}`...)
}
