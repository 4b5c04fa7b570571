package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/llmreplay/llmreplay/wire"
)

// LengthCheck is what one short streaming request showed of how a server limits a
// request's output: asked for Asked tokens in Field (with the backend's other length
// fields), it sent Chunks output chunks and, when its usage said so, CompletionTokens.
type LengthCheck struct {
	Field string // the field that capped the output: max_tokens, max_completion_tokens or max_output_tokens
	// Fields names every length field the request carried ("max_tokens, min_tokens and
	// ignore_eos"; wire.Encoder.LengthFieldNames), and Forced says whether they ask for
	// exactly Asked tokens rather than at most (wire.Encoder.ForcesLength).
	Fields string
	Forced bool
	Asked  int
	// Chunks is the output chunks read. Each carries at least one token: a server sends a
	// token's text once (one that is not valid UTF-8 alone waits for the next), so more
	// chunks than asked is more tokens than asked.
	Chunks int
	// CompletionTokens is the largest usage.completion_tokens the stream carried, 0 when
	// none (the largest: Ollama puts zeros on every chunk before the real count).
	CompletionTokens int
	// Cut: reading stopped at LengthCheckCap(Asked) output chunks while the server was
	// still sending; the request was canceled.
	Cut      bool
	Finished bool // a finish_reason came
	Done     bool // [DONE] came
}

// LengthCheckCap is the output chunks a length check reads before it stops: far enough
// past asked that only a server that ignores the limit gets there, few enough that
// reading them costs a moment.
func LengthCheckCap(asked int) int { return 4*asked + 16 }

// Tokens returns the output the check saw: usage's count, or the chunks when they are
// more (a stream cut short carries no usage).
func (l LengthCheck) Tokens() int { return max(l.CompletionTokens, l.Chunks) }

// Over reports whether the server sent more than asked: it ignored Field.
func (l LengthCheck) Over() bool { return l.Cut || l.Tokens() > l.Asked }

// CheckLength sends one streaming request for maxTokens output tokens after prompt
// (text), with the client's API, backend, model, credentials and headers and X-Request-Id
// wire.PreflightRequestID, through net/http whichever client the run uses, and reads its
// stream until it ends or passes LengthCheckCap(maxTokens) output chunks. Nothing of it is
// recorded. An HTTP error, an error in the stream, a body that is not an event stream or a
// stream broken before it showed anything are errors, their text scrubbed of the
// client's secrets; ctx and the client's per-request timeout bound it.
func (c *Client) CheckLength(ctx context.Context, prompt []byte, maxTokens int) (LengthCheck, error) {
	l, err := c.checkLength(ctx, prompt, maxTokens)
	if err != nil {
		err = errors.New(Scrub(err.Error(), c.secrets))
	}
	return l, err
}

func (c *Client) checkLength(ctx context.Context, prompt []byte, maxTokens int) (LengthCheck, error) {
	enc, err := wire.NewEncoder(c.opts.API, c.opts.Backend, false)
	if err != nil {
		return LengthCheck{}, err
	}
	l := LengthCheck{Field: enc.MaxTokensField(), Fields: enc.LengthFieldNames(), Forced: enc.ForcesLength(), Asked: maxTokens}
	body := enc.AppendBody(nil, enc.AppendStart(nil, c.opts.Model), prompt, int32(maxTokens))
	rctx, cancel := context.WithCancel(ctx)
	// Canceling ends a stream that is still going: the server stops generating for it.
	defer cancel()
	if c.opts.Timeout > 0 {
		var stop context.CancelFunc
		rctx, stop = context.WithTimeout(rctx, c.opts.Timeout)
		defer stop()
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return l, fmt.Errorf("build request: %v", err)
	}
	req.Header = c.header.Clone()
	req.Header.Set(RequestIDHeader, wire.PreflightRequestID)
	path := wire.APIURL(c.opts.BaseURL, c.opts.API).Path
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL may hold credentials; the caller names the endpoint
		}
		return l, fmt.Errorf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	ce := resp.Header.Get("Content-Encoding")
	switch {
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		if wire.Encoded(ce) {
			return l, fmt.Errorf("POST %s: %s", path, wire.EncodedErrorText(resp.StatusCode, ce))
		}
		return l, fmt.Errorf("POST %s: %s", path, httpErrorMessage(resp))
	case wire.Encoded(ce):
		return l, fmt.Errorf("POST %s: %s", path, wire.EncodedStreamText(ce))
	case !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"):
		return l, fmt.Errorf("POST %s: the response is not an event stream (Content-Type %q)", path, resp.Header.Get("Content-Type"))
	}
	sse := NewSSEReader(resp.Body, func() int64 { return 0 }, 0, c.opts.MaxLine)
	var ch wire.Chunk
	for sse.Next() {
		data := sse.Data()
		if string(sse.Event()) == "error" {
			return l, fmt.Errorf("POST %s: server error event: %s", path, wire.ShortText(data))
		}
		if string(bytes.TrimSpace(data)) == "[DONE]" {
			l.Done = true
			break
		}
		if err := enc.Decode(data, &ch); err != nil {
			return l, fmt.Errorf("POST %s: malformed chunk: %v: %s", path, err, wire.ShortText(data))
		}
		if ch.IsError {
			return l, fmt.Errorf("POST %s: server error mid-stream: %s", path, wire.ShortText([]byte(ch.ErrorMessage)))
		}
		if ch.Output {
			l.Chunks++
		}
		l.Finished = l.Finished || ch.Finished
		if ch.Usage && ch.HasCompletion {
			l.CompletionTokens = max(l.CompletionTokens, int(ch.CompletionTokens))
		}
		if l.Chunks >= LengthCheckCap(maxTokens) {
			l.Cut = true
			return l, nil
		}
	}
	// A stream that breaks or ends early has still shown its length when it overran; one
	// that broke before that showed nothing.
	if err := sse.Err(); err != nil && !l.Over() {
		if rctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
			return l, fmt.Errorf("POST %s: not finished within the %v timeout (--timeout) after %d output chunks", path, c.opts.Timeout, l.Chunks)
		}
		return l, fmt.Errorf("POST %s: stream broken after %d output chunks: %v", path, l.Chunks, err)
	}
	return l, nil
}
