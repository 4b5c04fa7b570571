package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// apiKind is the API a generation request came in by: it picks the request's parser, the
// stream's shapes and the error body's shape.
type apiKind uint8

const (
	apiCompletions apiKind = iota // /v1/completions
	apiChat                       // /v1/chat/completions
	apiMessages                   // /v1/messages, Anthropic's Messages API
	apiResponses                  // /v1/responses, OpenAI's Responses API
)

// apiNames are the APIs' names in the request log.
var apiNames = [...]string{"completions", "chat", "messages", "responses"}

// events reports whether the API streams named SSE events ("event: NAME" lines, no
// [DONE]) rather than OpenAI's data-only chunks.
func (a apiKind) events() bool { return a >= apiMessages }

// ToolOverheadTokens is what one tool definition adds to the prompt beside its
// description's cl100k_base tokens: its name, its parameter schema and the chat
// template's markers around it, counted as one constant so that a client can know a
// tool's cost from its description alone. docs/sim.md states the rule.
const ToolOverheadTokens = 16

// toolMarker is the token id the sim hashes for a tool's overhead tokens in the prefix
// cache's block chain: cl100k_base's <|endofprompt|>, a special token no text encodes to.
const toolMarker = 100276

// toolDef is a tool definition as each API words it: chat's {"type","function":{...}},
// Anthropic's {"name","description","input_schema"}, the Responses API's flat
// {"type","name","description","parameters"}.
type toolDef struct {
	Type        *string          `json:"type"`
	Function    *toolDef         `json:"function"`
	Name        *string          `json:"name"`
	Description *string          `json:"description"`
	Parameters  *json.RawMessage `json:"parameters"`
	InputSchema *json.RawMessage `json:"input_schema"`
}

// parseTools checks a request's tools in the API's shape and returns their descriptions,
// which (with ToolOverheadTokens each) are the tools' share of the prompt.
func parseTools(raw json.RawMessage, api apiKind) ([]string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var tools []toolDef
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, badRequest("tools", "tools: %s", jsonErr(err))
	}
	descs := make([]string, len(tools))
	for i, t := range tools {
		f, field := &t, fmt.Sprintf("tools[%d]", i)
		switch api {
		case apiChat:
			if t.Type == nil || *t.Type != "function" {
				return nil, badRequest("tools", "%s.type must be \"function\"", field)
			}
			if t.Function == nil {
				return nil, badRequest("tools", "%s.function is required", field)
			}
			f, field = t.Function, field+".function"
		case apiResponses:
			if t.Type == nil || *t.Type != "function" {
				return nil, badRequest("tools", "%s.type must be \"function\" (the simulated engine serves function tools only)", field)
			}
		case apiMessages:
			if t.InputSchema == nil || !isObject(*t.InputSchema) {
				return nil, badRequest("tools", "%s.input_schema is required and must be an object", field)
			}
		}
		if f.Name == nil || *f.Name == "" {
			return nil, badRequest("tools", "%s.name is required", field)
		}
		if api != apiMessages && f.Parameters != nil && !isObject(*f.Parameters) && string(*f.Parameters) != "null" {
			return nil, badRequest("tools", "%s.parameters must be an object", field)
		}
		if f.Description != nil {
			descs[i] = *f.Description
		}
	}
	return descs, nil
}

// isObject reports whether raw is a JSON object.
func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{'
}

// anthropicBlock is a content block of a Messages request (text, or an image with a
// base64 source) or a content part of a Responses input message (input_text,
// output_text, or input_image with a data URL).
type anthropicBlock struct {
	Type   string  `json:"type"`
	Text   *string `json:"text"`
	Source *struct {
		Type string `json:"type"`
		Data string `json:"data"`
	} `json:"source"`
	ImageURL *string `json:"image_url"`
}

// Image blocks' types, for blocksContent: Anthropic's and the Responses API's.
const (
	imageBlock      = "image"
	inputImageBlock = "input_image"
)

// blocksText reads content that is a string or a list of text blocks (a system prompt);
// field names it in errors.
func blocksText(raw json.RawMessage, field string, textTypes ...string) (string, *apiError) {
	text, _, aerr := blocksContent(raw, field, "", textTypes...)
	return text, aerr
}

// blocksContent reads content that is a string or a list of blocks: text blocks of
// textTypes (Anthropic's "text"; the Responses API's input_text and output_text) and,
// when imageType is not "", image blocks of that type (Anthropic's "image" with a base64
// source, the Responses API's "input_image" with a data URL); field names it in errors.
func blocksContent(raw json.RawMessage, field, imageType string, textTypes ...string) (string, []parsedImage, *apiError) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) > 0 && raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", nil, badRequest(field, "%s: %s", field, jsonErr(err))
		}
		return s, nil, nil
	case len(raw) > 0 && raw[0] == '[':
		var blocks []anthropicBlock
		if err := json.Unmarshal(raw, &blocks); err != nil {
			return "", nil, badRequest(field, "%s: %s", field, jsonErr(err))
		}
		if len(blocks) == 0 {
			return "", nil, badRequest(field, "%s must not be empty", field)
		}
		var sb strings.Builder
		var imgs []parsedImage
		for j, b := range blocks {
			if imageType != "" && b.Type == imageType {
				img, aerr := blockImage(b, fmt.Sprintf("%s[%d]", field, j))
				if aerr != nil {
					return "", nil, aerr
				}
				imgs = append(imgs, img)
				continue
			}
			ok := false
			for _, tt := range textTypes {
				ok = ok || b.Type == tt
			}
			if !ok || b.Text == nil {
				want := strings.Join(textTypes, " or ") + " blocks with text"
				if imageType != "" {
					want += " and " + imageType + " blocks"
				}
				return "", nil, badRequest(field, "%s[%d]: only %s are supported (type %q)", field, j, want, b.Type)
			}
			sb.WriteString(*b.Text)
		}
		return sb.String(), imgs, nil
	}
	return "", nil, badRequest(field, "%s must be a string or a list of content blocks", field)
}

// blockImage reads an image block: Anthropic's {"type":"image","source":{"type":"base64",
// "media_type":...,"data":...}} or the Responses API's {"type":"input_image",
// "image_url":"data:..."}.
func blockImage(b anthropicBlock, field string) (parsedImage, *apiError) {
	if b.Type == inputImageBlock {
		if b.ImageURL == nil {
			return parsedImage{}, badRequest(topField(field), "%s.image_url is required (the simulated engine does not take file_id)", field)
		}
		return parseDataURL(*b.ImageURL, field+".image_url")
	}
	if b.Source == nil || b.Source.Type != "base64" {
		return parsedImage{}, badRequest(topField(field), "%s.source must be a base64 source (the simulated engine does not fetch URLs)", field)
	}
	return decodeImage(b.Source.Data, field+".source.data")
}

// messagesBody is an Anthropic Messages request, as vLLM's AnthropicMessagesRequest
// defines it (vllm/entrypoints/anthropic/protocol.py): the fields the sim uses. vLLM
// hands the request to its chat path with max_tokens, stop, temperature, top_p and top_k
// only (vllm/entrypoints/anthropic/serving.py, _build_base_request): min_tokens and
// ignore_eos do not pass, so the sim ignores them here too.
type messagesBody struct {
	Model     *string         `json:"model"`
	Messages  json.RawMessage `json:"messages"`
	System    json.RawMessage `json:"system"`
	MaxTokens *int            `json:"max_tokens"`
	Stream    *bool           `json:"stream"`
	Tools     json.RawMessage `json:"tools"`
}

// parseMessagesRequest decodes and checks a Messages request into the chat prompt vLLM
// makes of it: the system prompt (the top-level one, then any system messages, joined)
// as a system message first, then the user and assistant messages.
//
// countOnly parses a count_tokens request, which has no max_tokens
// (AnthropicCountTokensRequest).
func parseMessagesRequest(body []byte, countOnly bool) (*params, error) {
	var r messagesBody
	if err := decodeStrict(body, &r); err != nil {
		return nil, err
	}
	if r.Model == nil || *r.Model == "" {
		return nil, badRequest("model", "model is required")
	}
	p := &params{api: apiMessages, model: *r.Model, maxTokens: -1, stream: r.Stream != nil && *r.Stream, includeUsage: true}
	if !countOnly {
		if r.MaxTokens == nil {
			return nil, badRequest("max_tokens", "max_tokens is required")
		}
		if *r.MaxTokens < 1 {
			return nil, badRequest("max_tokens", "max_tokens must be positive, got %d", *r.MaxTokens)
		}
		p.maxTokens = *r.MaxTokens
	}
	var system strings.Builder
	if s := bytes.TrimSpace(r.System); len(s) > 0 && string(s) != "null" {
		text, err := blocksText(s, "system", "text")
		if err != nil {
			return nil, err
		}
		system.WriteString(text)
	}
	if m := bytes.TrimSpace(r.Messages); len(m) == 0 || string(m) == "null" {
		return nil, badRequest("messages", "messages is required")
	}
	var msgs []chatMessage
	if err := json.Unmarshal(r.Messages, &msgs); err != nil {
		return nil, badRequest("messages", "messages: %s", jsonErr(err))
	}
	if len(msgs) == 0 {
		return nil, badRequest("messages", "messages must contain at least one item")
	}
	var out []parsedMessage
	for i, m := range msgs {
		field := fmt.Sprintf("messages[%d]", i)
		switch m.Role {
		case "user", "assistant", "system":
		case "":
			return nil, badRequest("messages", "%s.role is required", field)
		default:
			return nil, badRequest("messages", "%s.role %q is not user or assistant", field, m.Role)
		}
		text, imgs, err := blocksContent(m.Content, field+".content", imageBlock, "text")
		if err != nil {
			return nil, err
		}
		if m.Role == "system" {
			if len(imgs) > 0 {
				return nil, badRequest("messages", "%s: a system message takes no images", field)
			}
			system.WriteString(text)
			continue
		}
		out = append(out, parsedMessage{role: m.Role, content: text, images: imgs})
	}
	if system.Len() > 0 {
		out = append([]parsedMessage{{role: "system", content: system.String()}}, out...)
	}
	if len(out) == 0 {
		return nil, badRequest("messages", "messages must hold a user or assistant message")
	}
	p.prompt.messages = out
	var aerr *apiError
	if p.prompt.tools, aerr = parseTools(r.Tools, apiMessages); aerr != nil {
		return nil, aerr
	}
	return p, nil
}

// responsesBody is a Responses API request, as vLLM's ResponsesRequest defines it
// (vllm/entrypoints/openai/responses/protocol.py): the fields the sim uses. Its
// to_sampling_params passes no min_tokens or ignore_eos, so the sim ignores them here.
type responsesBody struct {
	Model           *string         `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    *string         `json:"instructions"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Stream          *bool           `json:"stream"`
	Tools           json.RawMessage `json:"tools"`
}

// responsesItem is one input item: a message, or a function call's output (the agent
// loop's tool result), which the chat template sees as a tool message.
type responsesItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Output  *string         `json:"output"`
}

// parseResponsesRequest decodes and checks a Responses request into the chat prompt vLLM
// makes of it: instructions as a system message, then the input (a string is one user
// message).
func parseResponsesRequest(body []byte) (*params, error) {
	var r responsesBody
	if err := decodeStrict(body, &r); err != nil {
		return nil, err
	}
	p := &params{api: apiResponses, maxTokens: -1, stream: r.Stream != nil && *r.Stream, includeUsage: true}
	if r.Model != nil {
		p.model = *r.Model
	}
	if r.MaxOutputTokens != nil {
		if *r.MaxOutputTokens < 1 {
			return nil, badRequest("max_output_tokens", "max_output_tokens must be at least 1, got %d", *r.MaxOutputTokens)
		}
		p.maxTokens = *r.MaxOutputTokens
	}
	var msgs []parsedMessage
	if r.Instructions != nil && *r.Instructions != "" {
		msgs = append(msgs, parsedMessage{role: "system", content: *r.Instructions})
	}
	in := bytes.TrimSpace(r.Input)
	switch {
	case len(in) == 0 || string(in) == "null":
		return nil, badRequest("input", "input is required")
	case in[0] == '"':
		var s string
		if err := json.Unmarshal(in, &s); err != nil {
			return nil, badRequest("input", "input: %s", jsonErr(err))
		}
		if s == "" {
			return nil, badRequest("input", "input must not be empty")
		}
		msgs = append(msgs, parsedMessage{role: "user", content: s})
	default:
		var items []responsesItem
		if err := json.Unmarshal(in, &items); err != nil {
			return nil, badRequest("input", "input must be a string or a list of items: %s", jsonErr(err))
		}
		if len(items) == 0 {
			return nil, badRequest("input", "input must not be empty")
		}
		for i, it := range items {
			m, aerr := responsesMessage(it, i)
			if aerr != nil {
				return nil, aerr
			}
			msgs = append(msgs, m)
		}
	}
	p.prompt.messages = msgs
	var aerr *apiError
	if p.prompt.tools, aerr = parseTools(r.Tools, apiResponses); aerr != nil {
		return nil, aerr
	}
	return p, nil
}

// responsesMessage is input item i as a chat message.
func responsesMessage(it responsesItem, i int) (parsedMessage, *apiError) {
	field := fmt.Sprintf("input[%d]", i)
	switch it.Type {
	case "", "message":
	case "function_call_output":
		if it.Output == nil {
			return parsedMessage{}, badRequest("input", "%s.output is required", field)
		}
		return parsedMessage{role: "tool", content: *it.Output}, nil
	default:
		return parsedMessage{}, badRequest("input", "%s.type %q: the simulated engine takes message and function_call_output items", field, it.Type)
	}
	switch it.Role {
	case "user", "assistant", "system", "developer":
	case "":
		return parsedMessage{}, badRequest("input", "%s.role is required", field)
	default:
		return parsedMessage{}, badRequest("input", "%s.role %q is not user, assistant, system or developer", field, it.Role)
	}
	text, imgs, aerr := blocksContent(it.Content, field+".content", inputImageBlock, "input_text", "output_text")
	if aerr != nil {
		return parsedMessage{}, aerr
	}
	return parsedMessage{role: it.Role, content: text, images: imgs}, nil
}

// decodeStrict decodes one JSON object, refusing trailing data.
func decodeStrict(body []byte, v any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return badRequest("", "invalid JSON body: %s", jsonErr(err))
	}
	if dec.More() {
		return badRequest("", "invalid JSON body: trailing data after the object")
	}
	return nil
}
