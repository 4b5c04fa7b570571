package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Token-count probes: how calibration asks a server to count a prompt. Each method is a
// way of asking; Prober.Count sends one probe, and tokenize fits its counts.
const (
	MethodTokenize         = "tokenize"          // POST /tokenize, vLLM and SGLang shape
	MethodTokenizeLlamaCpp = "tokenize-llamacpp" // POST /tokenize {content}, llama.cpp shape
	MethodUsage            = "usage"             // usage.prompt_tokens of max_tokens=1 probes
)

// maxProbeResponse bounds what a probe reads from the server: a /tokenize reply for a
// 4,000-token prompt is about 30 KB.
const maxProbeResponse = 8 << 20

// ProbeMethods returns the methods to try, in order, to count prompts of api: method
// alone when given, else /tokenize in both shapes, then usage probes (llama.cpp's
// /tokenize applies no chat template, so the chat API never tries it).
func ProbeMethods(api API, method string) ([]string, error) {
	if api != APICompletions && api != APIChat && api != APIMessages && api != APIResponses {
		return nil, fmt.Errorf("calibrate: api %q: want %s, %s, %s or %s", api, APICompletions, APIChat, APIMessages, APIResponses)
	}
	switch method {
	case "":
		if api != APICompletions {
			return []string{MethodTokenize, MethodUsage}, nil
		}
		return []string{MethodTokenize, MethodTokenizeLlamaCpp, MethodUsage}, nil
	case MethodTokenize, MethodUsage:
	case MethodTokenizeLlamaCpp:
		if api != APICompletions {
			return nil, fmt.Errorf("calibrate: llama.cpp's /tokenize does not apply the chat template; use usage probes for the %s api", api)
		}
	default:
		return nil, fmt.Errorf("calibrate: method %q: want %s, %s or %s", method, MethodTokenize, MethodTokenizeLlamaCpp, MethodUsage)
	}
	return []string{method}, nil
}

// Prober sends token-count probes to one endpoint. Its errors never quote a URL (the
// caller wraps them with the endpoint's safe form) nor a value of Header (a server may
// echo a key back).
type Prober struct {
	// Base is the API base as BaseURL returns it, without userinfo: credentials go in
	// Header.
	Base  *url.URL
	API   API
	Model string
	// Client sends the probes; nil means a client with a 60 s timeout.
	Client *http.Client
	// Header is added to every probe.
	Header http.Header
	// Backend says how a Messages API usage counts the prompt (Encoder.Decode's reading:
	// input_tokens alone on SGLang, with the cache reads and writes on every other).
	Backend Backend
	// Tools, when set, is the description (escaped as inside a JSON string) of one tool
	// every probe of a messages API carries, in the kind's own shape (Kind.AppendTools):
	// how calibration measures what a tool costs.
	Tools []byte
	// Before, when set, are earlier messages of a conversation, alternately user and
	// assistant, that every probe of the chat, Messages and Responses APIs sends before the probe's
	// text: how calibration measures what a conversation's earlier turns cost beyond their
	// text (the template's markers of each message).
	Before []string
	// Images, when set, go with the text of every usage probe of an API that takes
	// images, in one user message of the kind's shape (Kind.AppendUserMessage): how
	// calibration measures what the server counts an image for.
	Images []Image
}

// Count sends text as one probe of method and returns the server's count of its tokens,
// and the model's context length when the server said it (vLLM's /tokenize does), else 0.
func (p *Prober) Count(ctx context.Context, method, text string) (tokens, maxModelLen int, err error) {
	tokens, maxModelLen, err = p.count(ctx, method, text)
	return tokens, maxModelLen, p.scrub(err)
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func (p *Prober) count(ctx context.Context, method, text string) (int, int, error) {
	// The Responses API's input string and the Messages API's one message are one user
	// message, rendered by the chat template as chat's: /tokenize counts them as chat's.
	var msgs []any
	if p.API == APIChat || p.API == APIResponses || p.API == APIMessages {
		for i, b := range p.Before {
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			msgs = append(msgs, chatMessage{Role: role, Content: b})
		}
		last, err := p.userMessage(method, text)
		if err != nil {
			return 0, 0, err
		}
		msgs = append(msgs, last)
	} else if len(p.Images) > 0 {
		return 0, 0, fmt.Errorf("calibrate: the %s API takes no images", p.API)
	}
	tools, err := p.tools()
	if err != nil {
		return 0, 0, err
	}
	switch method {
	case MethodTokenize:
		body := map[string]any{"model": p.Model}
		if msgs != nil {
			body["messages"] = msgs
		} else {
			body["prompt"] = text
		}
		if tools != nil {
			body["tools"] = tools
		}
		resp, err := p.post(ctx, method, TokenizeURL(p.Base), body)
		if err != nil {
			return 0, 0, err
		}
		tr, err := ParseTokenizeResponse(resp)
		return tr.Count, tr.MaxModelLen, err
	case MethodTokenizeLlamaCpp:
		// add_special: count the BOS that /completions adds too.
		resp, err := p.post(ctx, method, TokenizeURL(p.Base), map[string]any{"content": text, "add_special": true})
		if err != nil {
			return 0, 0, err
		}
		tr, err := ParseTokenizeResponse(resp)
		return tr.Count, 0, err
	case MethodUsage:
		body := map[string]any{"model": p.Model, "max_tokens": 1, "temperature": 0, "stream": false}
		switch {
		case p.API == APIResponses:
			// max_output_tokens 16: OpenAI's least, and SGLang generates 2 fewer than asked.
			body = map[string]any{"model": p.Model, "max_output_tokens": 16, "temperature": 0, "stream": false, "store": false, "input": text}
			if len(p.Before) > 0 || len(p.Images) > 0 {
				body["input"] = msgs // a conversation, or images: its input is a list of messages
			}
		case msgs != nil:
			body["messages"] = msgs
		default:
			body["prompt"] = text
		}
		if tools != nil {
			body["tools"] = tools
		}
		u := APIURL(p.Base, p.API)
		u.RawQuery, u.Fragment = "", ""
		resp, err := p.post(ctx, method, u, body)
		if err != nil {
			return 0, 0, err
		}
		if p.API == APIMessages {
			n, err := parseMessagesPromptTokens(resp, p.Backend != BackendSGLang)
			return n, 0, err
		}
		n, err := ParseUsagePromptTokens(resp)
		return n, 0, err
	}
	return 0, 0, fmt.Errorf("calibrate: unknown method %q", method)
}

// userMessage returns the probe's user message: text alone, or with Images the kind's
// user message holding both, which only usage probes send.
func (p *Prober) userMessage(method, text string) (any, error) {
	if len(p.Images) == 0 {
		return chatMessage{Role: "user", Content: text}, nil
	}
	k, ok := Lookup(p.API)
	if !ok || k.AppendUserMessage == nil {
		return nil, fmt.Errorf("calibrate: the %s API takes no images", p.API)
	}
	if method != MethodUsage {
		return nil, fmt.Errorf("calibrate: images are counted by usage probes, not %s", method)
	}
	return json.RawMessage(k.AppendUserMessage(nil, AppendJSONContent(nil, []byte(text)), p.Images)), nil
}

// tools returns the value of the probes' "tools" field, nil without Tools: the kind's
// AppendTools output without its leading `,"tools":`.
func (p *Prober) tools() (json.RawMessage, error) {
	if len(p.Tools) == 0 {
		return nil, nil
	}
	k, ok := Lookup(p.API)
	if !ok || k.AppendTools == nil {
		return nil, fmt.Errorf("calibrate: the %s API takes no tools", p.API)
	}
	const lead = `,"tools":`
	raw := k.AppendTools(nil, p.Tools)
	if !bytes.HasPrefix(raw, []byte(lead)) {
		return nil, fmt.Errorf("calibrate: the %s API's tools field starts %.20q, not %q", p.API, raw, lead)
	}
	return raw[len(lead):], nil
}

func (p *Prober) post(ctx context.Context, method string, target *url.URL, body any) ([]byte, error) {
	buf, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	path := target.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), bytes.NewReader(buf))
	if err != nil {
		return nil, fmt.Errorf("POST %s: bad request", path)
	}
	for k, vs := range p.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if k, ok := Lookup(p.API); ok {
		for name, v := range k.Headers { // anthropic-version; a caller's header wins
			if req.Header.Get(name) == "" {
				req.Header.Set(name, v)
			}
		}
	}
	req.Header.Set("Content-Type", "application/json")
	client := p.Client
	if client == nil {
		client = &http.Client{Timeout: 60 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		// *url.Error repeats the URL, which may hold credentials: keep only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeResponse+1))
	if err != nil {
		return nil, fmt.Errorf("POST %s: read response: %w", path, err)
	}
	if len(data) > maxProbeResponse {
		return nil, fmt.Errorf("POST %s: response larger than %d bytes", path, maxProbeResponse)
	}
	if resp.StatusCode/100 != 2 {
		hint := ""
		if resp.StatusCode == http.StatusBadRequest && method == MethodUsage {
			hint = " (a probe longer than the model's context? set shorter FitLengths and CheckLengths)"
		}
		return nil, fmt.Errorf("POST %s: HTTP %d: %s%s", path, resp.StatusCode, snippet(data), hint)
	}
	return data, nil
}

// scrub removes the values of the prober's headers (an API key, say) from an error whose
// text quotes a server's reply: a server or proxy may echo the request back. An error that
// quotes nothing of them keeps its identity (context.Canceled stays testable).
func (p *Prober) scrub(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := msg
	for _, vs := range p.Header {
		for _, v := range vs {
			for _, part := range append([]string{v}, strings.Fields(v)...) {
				if len(part) >= 4 {
					clean = strings.ReplaceAll(clean, part, "[redacted]")
				}
			}
		}
	}
	if clean == msg {
		return err
	}
	return errors.New(clean)
}

// snippet is the start of a response body for an error message, on one line.
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// TokenizeResponse is what a /tokenize endpoint said.
type TokenizeResponse struct {
	Count       int // tokens in the prompt
	MaxModelLen int // 0 when not given
}

// ParseTokenizeResponse parses a /tokenize reply: vLLM and SGLang's
// {"count": N, "tokens": [...], "max_model_len": M} or llama.cpp's {"tokens": [...]} (whose
// tokens may be ids or {"id", "piece"} objects). When both count and tokens are present they
// must agree.
func ParseTokenizeResponse(data []byte) (TokenizeResponse, error) {
	var raw struct {
		Count       *int64            `json:"count"`
		Tokens      []json.RawMessage `json:"tokens"`
		MaxModelLen *int64            `json:"max_model_len"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return TokenizeResponse{}, fmt.Errorf("tokenize response: %w", err)
	}
	if raw.Count == nil && raw.Tokens == nil {
		return TokenizeResponse{}, fmt.Errorf("tokenize response: neither count nor tokens: %s", snippet(data))
	}
	var r TokenizeResponse
	if raw.Count != nil {
		if *raw.Count < 0 || *raw.Count > math.MaxInt32 {
			return TokenizeResponse{}, fmt.Errorf("tokenize response: count %d out of range", *raw.Count)
		}
		r.Count = int(*raw.Count)
		if raw.Tokens != nil && len(raw.Tokens) != r.Count {
			return TokenizeResponse{}, fmt.Errorf("tokenize response: count %d but %d tokens", r.Count, len(raw.Tokens))
		}
	} else {
		r.Count = len(raw.Tokens)
	}
	if raw.MaxModelLen != nil {
		if *raw.MaxModelLen < 0 || *raw.MaxModelLen > math.MaxInt32 {
			return TokenizeResponse{}, fmt.Errorf("tokenize response: max_model_len %d out of range", *raw.MaxModelLen)
		}
		r.MaxModelLen = int(*raw.MaxModelLen)
	}
	return r, nil
}

// parseMessagesPromptTokens returns the prompt tokens of a non-streaming Messages API
// answer's usage, read as a stream's usage is (messagesUsage): input_tokens, plus with
// uncached the cache reads and writes.
func parseMessagesPromptTokens(data []byte, uncached bool) (int, error) {
	var raw struct {
		Usage *messagesUsageJSON `json:"usage"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return 0, fmt.Errorf("messages response: %w", err)
	}
	if raw.Usage == nil || raw.Usage.InputTokens == nil {
		return 0, fmt.Errorf("messages response: no usage.input_tokens: %s", snippet(data))
	}
	var c Chunk
	c.messagesUsage(raw.Usage, uncached, true)
	if !c.HasPrompt || c.PromptTokens < 0 {
		return 0, fmt.Errorf("messages response: usage.input_tokens %d out of range", *raw.Usage.InputTokens)
	}
	return int(c.PromptTokens), nil
}

// ParseUsagePromptTokens returns usage.prompt_tokens from a non-streaming completions or chat
// completions response, or usage.input_tokens from a Responses API one.
func ParseUsagePromptTokens(data []byte) (int, error) {
	var raw struct {
		Usage *struct {
			PromptTokens *int64 `json:"prompt_tokens"`
			InputTokens  *int64 `json:"input_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return 0, fmt.Errorf("completion response: %w", err)
	}
	if raw.Usage != nil && raw.Usage.PromptTokens == nil {
		raw.Usage.PromptTokens = raw.Usage.InputTokens
	}
	if raw.Usage == nil || raw.Usage.PromptTokens == nil {
		return 0, fmt.Errorf("completion response: no usage.prompt_tokens (or input_tokens): %s", snippet(data))
	}
	n := *raw.Usage.PromptTokens
	if n < 0 || n > math.MaxInt32 {
		return 0, fmt.Errorf("completion response: usage.prompt_tokens %d out of range", n)
	}
	return int(n), nil
}
