package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/llmreplay/llmreplay/wire"
)

// apiError is an OpenAI-style error answer.
type apiError struct {
	status int
	typ    string
	param  string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, a ...any) *apiError {
	return &apiError{status: 400, typ: "BadRequestError", param: param, msg: fmt.Sprintf(format, a...)}
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Name    *string         `json:"name"`
}

type contentPart struct {
	Type     string  `json:"type"`
	Text     *string `json:"text"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
}

// parsedPrompt is the prompt in one of its forms: text, token ids, or chat messages.
type parsedPrompt struct {
	text     string
	ids      []int
	isIDs    bool
	messages []parsedMessage
	tools    []string // the tool definitions' descriptions (chat, messages, responses)
}

// parsedMessage is one message of a chat prompt: its role, its text and its images (in
// the sim's token stream the images' tokens follow the text).
type parsedMessage struct {
	role, content string
	images        []parsedImage
}

// params is a validated generation request.
type params struct {
	api          apiKind
	model        string
	prompt       parsedPrompt
	maxTokens    int // -1: not given
	minTokens    int
	ignoreEOS    bool
	stream       bool
	includeUsage bool
	continuous   bool
}

// vocabSize is cl100k_base's id space (100256 ranks plus the special tokens up to 100276).
const vocabSize = 100277

// genBody is a completions or chat request: the client encoder's fields
// (wire.RequestBody) and chat's tool definitions.
type genBody struct {
	wire.RequestBody
	Tools json.RawMessage `json:"tools"`
}

// parseGenRequest decodes and checks a request body of the API. Every problem is a 400
// naming the field, as vLLM answers.
func parseGenRequest(body []byte, api apiKind) (*params, error) {
	switch api {
	case apiMessages:
		return parseMessagesRequest(body, false)
	case apiResponses:
		return parseResponsesRequest(body)
	}
	chat := api == apiChat
	// The body's fields are defined once, with the client's encoder (wire.RequestBody);
	// fields it does not name (temperature, top_p, ...) are accepted and ignored, as vLLM
	// ignores what it does not use.
	var r genBody
	if err := decodeStrict(body, &r); err != nil {
		return nil, err
	}
	p := &params{api: api, maxTokens: -1}
	if r.Model != nil {
		p.model = *r.Model
	}
	var err error
	if chat {
		if len(r.Prompt) > 0 && string(r.Prompt) != "null" {
			return nil, badRequest("prompt", "chat completions take messages, not prompt")
		}
		p.prompt.messages, err = parseMessages(r.Messages)
		if err == nil {
			var aerr *apiError
			if p.prompt.tools, aerr = parseTools(r.Tools, apiChat); aerr != nil {
				return nil, aerr
			}
		}
	} else {
		if len(r.Messages) > 0 && string(r.Messages) != "null" {
			return nil, badRequest("messages", "completions take prompt, not messages (use /v1/chat/completions)")
		}
		p.prompt, err = parsePrompt(r.Prompt)
	}
	if err != nil {
		return nil, err
	}
	if r.MaxTokens != nil && r.MaxCompletionTokens != nil && *r.MaxTokens != *r.MaxCompletionTokens {
		return nil, badRequest("max_tokens", "max_tokens (%d) and max_completion_tokens (%d) disagree", *r.MaxTokens, *r.MaxCompletionTokens)
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"max_tokens", r.MaxTokens}, {"max_completion_tokens", r.MaxCompletionTokens}} {
		if f.v != nil {
			if *f.v < 1 {
				return nil, badRequest(f.name, "%s must be at least 1, got %d", f.name, *f.v)
			}
			p.maxTokens = *f.v
		}
	}
	if r.MinTokens != nil {
		if *r.MinTokens < 0 {
			return nil, badRequest("min_tokens", "min_tokens must be >= 0, got %d", *r.MinTokens)
		}
		if p.maxTokens >= 0 && *r.MinTokens > p.maxTokens {
			return nil, badRequest("min_tokens", "min_tokens (%d) must be <= max_tokens (%d)", *r.MinTokens, p.maxTokens)
		}
		p.minTokens = *r.MinTokens
	}
	if r.N != nil && *r.N != 1 {
		return nil, badRequest("n", "the simulated engine serves n=1 only, got n=%d", *r.N)
	}
	p.ignoreEOS = r.IgnoreEOS != nil && *r.IgnoreEOS
	p.stream = r.Stream != nil && *r.Stream
	if r.StreamOptions != nil {
		if !p.stream {
			return nil, badRequest("stream_options", "stream_options can only be set when stream is true")
		}
		p.includeUsage = r.StreamOptions.IncludeUsage != nil && *r.StreamOptions.IncludeUsage
		p.continuous = r.StreamOptions.ContinuousUsageStats != nil && *r.StreamOptions.ContinuousUsageStats
	}
	return p, nil
}

// jsonErr makes encoding/json's errors name the field in the request's terms.
func jsonErr(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("field %s: expected %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return fmt.Sprintf("expected %s, got JSON %s", te.Type, te.Value)
	}
	return err.Error()
}

// parsePrompt accepts what vLLM accepts for one prompt: a string, a list of token ids, or
// a one-element list of either. Lists of several prompts (batched completions) are refused.
func parsePrompt(raw json.RawMessage) (parsedPrompt, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return parsedPrompt{}, badRequest("prompt", "prompt is required")
	}
	var pp parsedPrompt
	switch raw[0] {
	case '"':
		if err := json.Unmarshal(raw, &pp.text); err != nil {
			return pp, badRequest("prompt", "prompt: %s", jsonErr(err))
		}
		if pp.text == "" {
			return pp, badRequest("prompt", "prompt must not be empty")
		}
		return pp, nil
	case '[':
		if ids, ok := scanIDs(raw); ok {
			return checkIDs(ids)
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return pp, badRequest("prompt", "prompt: %s", jsonErr(err))
		}
		if len(items) == 0 {
			return pp, badRequest("prompt", "prompt must not be empty")
		}
		first := bytes.TrimSpace(items[0])
		if len(first) > 0 && (first[0] == '"' || first[0] == '[') {
			if len(items) > 1 {
				return pp, badRequest("prompt", "the simulated engine takes one prompt per request, got %d", len(items))
			}
			return parsePrompt(first)
		}
		var ids []int
		if err := json.Unmarshal(raw, &ids); err != nil {
			return pp, badRequest("prompt", "prompt: a list must hold token ids (integers): %s", jsonErr(err))
		}
		return checkIDs(ids)
	}
	return pp, badRequest("prompt", "prompt must be a string, a list of token ids, or a one-element list of either")
}

// checkIDs makes a token-id prompt of ids, each of which must be in the vocabulary.
func checkIDs(ids []int) (parsedPrompt, error) {
	for i, id := range ids {
		if id < 0 || id >= vocabSize {
			return parsedPrompt{}, badRequest("prompt", "prompt[%d]: token id %d is out of vocabulary [0,%d)", i, id, vocabSize)
		}
	}
	return parsedPrompt{ids: ids, isIDs: true}, nil
}

// scanIDs reads raw as a JSON list of plain integers (an optional minus sign and up to 18
// digits each) and reports whether it was one. encoding/json takes ~350 ns an element
// (the list is scanned twice, once into one RawMessage per element, to tell a list of
// ids from a list of prompts): 35 ms for an agent's 100k-token prompt, sent again with
// every call. Anything else (an empty list, nested lists, strings, fractions, exponents,
// bad syntax) reports false, and the general path decodes it and words its error.
func scanIDs(raw []byte) ([]int, bool) {
	i, n := 1, len(raw) // raw[0] is '['
	skip := func() {
		for i < n && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
			i++
		}
	}
	ids := make([]int, 0, len(raw)/7+1) // "12345, " is a typical element
	for {
		skip()
		neg := i < n && raw[i] == '-'
		if neg {
			i++
		}
		start, v := i, 0
		for i < n && raw[i] >= '0' && raw[i] <= '9' && i-start < 18 {
			v = v*10 + int(raw[i]-'0')
			i++
		}
		// No digits, a leading zero before more digits, or a number that goes on
		// (more digits, a fraction, an exponent): not a plain integer list.
		if i == start || (raw[start] == '0' && i-start > 1) || (i < n && (raw[i] >= '0' && raw[i] <= '9' || raw[i] == '.' || raw[i] == 'e' || raw[i] == 'E')) {
			return nil, false
		}
		if neg {
			v = -v
		}
		ids = append(ids, v)
		skip()
		if i >= n {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i++
		case ']':
			i++
			skip()
			return ids, i == n
		default:
			return nil, false
		}
	}
}

func parseMessages(raw json.RawMessage) ([]parsedMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, badRequest("messages", "messages is required")
	}
	var msgs []chatMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, badRequest("messages", "messages: %s", jsonErr(err))
	}
	if len(msgs) == 0 {
		return nil, badRequest("messages", "messages must not be empty")
	}
	out := make([]parsedMessage, len(msgs))
	for i, m := range msgs {
		switch m.Role {
		case "system", "user", "assistant", "tool", "developer":
		case "":
			return nil, badRequest("messages", "messages[%d].role is required", i)
		default:
			return nil, badRequest("messages", "messages[%d].role %q is not system, developer, user, assistant or tool", i, m.Role)
		}
		c := bytes.TrimSpace(m.Content)
		var text string
		switch {
		case len(c) == 0 || string(c) == "null":
			if m.Role != "assistant" {
				return nil, badRequest("messages", "messages[%d].content is required", i)
			}
		case c[0] == '"':
			if err := json.Unmarshal(c, &text); err != nil {
				return nil, badRequest("messages", "messages[%d].content: %s", i, jsonErr(err))
			}
		case c[0] == '[':
			var parts []contentPart
			if err := json.Unmarshal(c, &parts); err != nil {
				return nil, badRequest("messages", "messages[%d].content: %s", i, jsonErr(err))
			}
			var sb strings.Builder
			for j, p := range parts {
				switch {
				case p.Type == "text" && p.Text != nil:
					sb.WriteString(*p.Text)
				case p.Type == "image_url" && p.ImageURL != nil:
					img, aerr := parseDataURL(p.ImageURL.URL, fmt.Sprintf("messages[%d].content[%d].image_url", i, j))
					if aerr != nil {
						return nil, aerr
					}
					out[i].images = append(out[i].images, img)
				default:
					return nil, badRequest("messages", "messages[%d].content[%d]: only text and image_url parts are supported (type %q)", i, j, p.Type)
				}
			}
			text = sb.String()
		default:
			return nil, badRequest("messages", "messages[%d].content must be a string or a list of text and image_url parts", i)
		}
		out[i].role, out[i].content = m.Role, text
	}
	return out, nil
}
