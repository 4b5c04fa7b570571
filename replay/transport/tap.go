package transport

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/wire"
)

// The recording proxy's view of a response (llmreplay record): the proxy passes the
// upstream's response to its client unchanged and hands each piece to a Tap, stamped when
// the proxy read it. The Tap records it through the replayer's own machinery (streamState,
// the push SSE parser pushSSE, unaryState), so that production's record and a replay's
// mean the same for the same bytes. It differs from the replayer's client only where a
// proxy must:
//   - it never cuts a stream: where the replayer fails one (too many chunks, a malformed
//     chunk, a line over the cap) the record says so and the Tap stops looking at the
//     bytes that follow, which the proxy keeps passing;
//   - a request without max_tokens has no chunk cap from it (tapMaxTokens), and one of n
//     choices has n times one choice's (TapOptions.N);
//   - the text kept for counting tokens is capped (tapTextCap);
//   - with TapOptions.Private no error carries a byte of any body;
//   - an answer that was not streamed (a generation request with stream false) is
//     decoded from its one JSON body (wire.Encoder.DecodeAnswer).

// TapOptions say what the request asked for and how errors are worded.
type TapOptions struct {
	Stream  bool // the request asked for a stream
	Private bool // errors carry no byte of a body (an error message can echo the prompt)
	// N is the request's n, the choices it asked for (0: not sent, one): a stream of n
	// choices carries n times the chunks, and its cap is n times one choice's.
	N int32
}

// Tap records one response as it passes. Its methods are called by one goroutine, in
// order: Head once, Body for each piece, End once. It never blocks and keeps counts,
// stamps and, while it must count tokens, the text (capped).
type Tap struct {
	c      *Client
	res    *results.Result
	o      TapOptions
	mode   int
	status int
	enc    string // the error body's Content-Encoding, when not identity
	sse    *SSEReader
	st     streamState
	un     *unaryState
	body   []byte // an error body's first bytes, or an answer's body
	bytes  int64  // body bytes seen
	lastNS int64  // the stamp of the last body bytes; results.Null before any
	ended  bool
	id     string // the answer's response id (ResponseID), when not streamed
}

// What the Tap does with the body.
const (
	tapNoHead  = iota // no head yet
	tapSSE            // a 2xx event stream: pushSSE into st
	tapErrBody        // a non-2xx answer: its first bytes make the message
	tapIgnore         // the record is complete at the head (not a stream, compressed)
	tapUnary          // a 2xx answer of a unary API: into un
	tapAnswer         // a 2xx answer of a generation that was not streamed
)

// tapMaxTokens stands for the output cap of a request that sent none (OutputTokensTarget
// 0) when the stream's chunks are capped (maxOutputChunks): 262,144 tokens, the longest
// context of the open models engines serve (Qwen3's native 262,144), which no answer can
// outgrow; the cap keeps a record's chunk lists bounded (2·262,144+16 chunks, 6 MiB)
// against a server that never stops.
const tapMaxTokens = 1 << 18

// tapTextCap bounds the text a Tap keeps to count tokens when the server reports no
// usage: 1 MiB, some 250,000 tokens of English. Past it the output's count is null
// rather than a count of part of it.
const tapTextCap = 1 << 20

// tapAnswerCap bounds the body of an answer that was not streamed, which is decoded
// whole: 16 MiB. A generation's answer is kilobytes (n choices with logprobs, a few MB);
// a longer one is recorded as not read rather than held.
const tapAnswerCap = 16 << 20

// NewTap returns a Tap recording into res, which the caller has filled with what the
// request says (RequestID, ScheduledNS, SentNS, PromptTokens, OutputTokensTarget: the
// request's max_tokens, 0 when it sent none). c is a client of the request's API; it
// sends nothing for the Tap.
func (c *Client) NewTap(res *results.Result, o TapOptions) *Tap {
	return &Tap{c: c, res: res, o: o, lastNS: results.Null}
}

// Head takes the response's head as it passed. An interim (1xx) head is ignored: the
// final one follows.
func (t *Tap) Head(status int, h http.Header, stamp int64) {
	if t.mode != tapNoHead || t.ended || status < 200 {
		return
	}
	res := t.res
	t.status = status
	res.HTTPStatus = int32(status)
	enc := h.Get("Content-Encoding")
	ct := h.Get("Content-Type")
	switch {
	case status > 299:
		t.mode = tapErrBody
		if wire.Encoded(enc) {
			t.enc = enc
		}
	case wire.Encoded(enc):
		// A compressed body's timings are not the engine's, and the Tap cannot read it:
		// as the replayer says (its requests send no Accept-Encoding).
		t.mode = tapIgnore
		res.Status, res.Error = results.StatusStreamError, wire.EncodedStreamText(enc)
	case t.c.Unary():
		t.mode = tapUnary
		t.un = newUnary(t.c.enc.Kind(), res, status)
		t.un.private = t.o.Private
	case strings.HasPrefix(ct, "text/event-stream"):
		t.mode = tapSSE
		target := res.OutputTokensTarget
		res.OutputTokensTarget = t.capTokens() // for begin's cap only
		t.st.begin(t.c, res, nil)
		res.OutputTokensTarget = target
		t.st.private, t.st.textCap = t.o.Private, tapTextCap
		t.st.wantID = t.responses()
		// A small buffer: most events go through SSEReader.direct without it, and it
		// grows to the line cap for a long line.
		t.sse = NewSSEReader(nil, nil, 4<<10, t.c.opts.MaxLine)
	case !t.o.Stream:
		t.mode = tapAnswer
	default:
		t.mode = tapIgnore
		res.Status = results.StatusStreamError
		res.Error = fmt.Sprintf("response is not an event stream (Content-Type %q)", ct)
	}
}

// capTokens is the output cap the stream's chunks are capped for (maxOutputChunks): the
// request's max_tokens times its n, or tapMaxTokens when it sent no max_tokens; at most
// tapMaxChoiceTokens.
func (t *Tap) capTokens() int32 {
	target := int64(t.res.OutputTokensTarget)
	if target <= 0 {
		return tapMaxTokens
	}
	return int32(min(target*int64(max(t.o.N, 1)), tapMaxChoiceTokens))
}

// tapMaxChoiceTokens bounds max_tokens times n for the chunk cap: 8 times tapMaxTokens
// (2,097,152 tokens, n = 128 choices of 16,384), 48 MiB of chunk times at worst.
const tapMaxChoiceTokens = 8 * tapMaxTokens

// responses reports whether the Tap's client is of the Responses API.
func (t *Tap) responses() bool {
	k := t.c.enc.Kind()
	return k != nil && k.Name == wire.APIResponses
}

// ResponseID returns the Responses API's id of the response (its response object's
// "id"), which a later request names as its previous_response_id; "" for another API or
// a response that carried none. Valid after End.
func (t *Tap) ResponseID() string {
	if t.mode == tapSSE {
		return t.st.id
	}
	return t.id
}

// Body takes body bytes as they passed, stamped when the proxy read them. b is not kept.
func (t *Tap) Body(b []byte, stamp int64) {
	if t.ended || len(b) == 0 {
		return
	}
	t.bytes += int64(len(b))
	t.lastNS = stamp
	switch t.mode {
	case tapSSE:
		if !t.st.over() {
			pushSSE(t.sse, &t.st, b, stamp)
			if t.st.over() {
				t.sse = nil // nothing more is read: its buffers go
			}
		}
	case tapErrBody:
		if !t.o.Private && t.enc == "" && len(t.body) < rawErrBody {
			t.body = append(t.body, b[:min(len(b), rawErrBody-len(t.body))]...)
		}
	case tapUnary:
		if !t.un.failed {
			t.un.write(b, stamp)
		}
	case tapAnswer:
		if t.bytes > tapAnswerCap {
			t.body = nil
			return
		}
		t.body = append(t.body, b...)
	}
}

// End completes the record once the body ended at stamp: err nil at its clean end, else
// the error that cut it (the upstream's read, the client's write), which the message
// gives.
func (t *Tap) End(err error, stamp int64) {
	if t.ended {
		return
	}
	t.ended = true
	res := t.res
	switch t.mode {
	case tapNoHead:
		if err == nil {
			err = errors.New("the body ended before a response head")
		}
		res.Status, res.Error = beforeResponse(false, false, 0, err)
	case tapSSE:
		if t.st.over() || err == nil {
			t.st.end()
		} else {
			res.Status, res.Error = midStream(false, false, 0, len(res.ChunkNS), err)
		}
		t.sse = nil
	case tapErrBody:
		res.Status = results.StatusHTTPError
		switch {
		case t.o.Private:
			res.Error = fmt.Sprintf("HTTP %d", t.status)
		case t.enc != "":
			res.Error = wire.EncodedErrorText(t.status, t.enc)
		default:
			res.Error = wire.HTTPErrorText(t.status, t.body)
		}
		t.body = nil
	case tapUnary:
		switch {
		case t.un.failed || err == nil:
			end := t.un.lastNS
			if end == results.Null {
				end = stamp // an empty body
			}
			t.un.end(end)
		default:
			t.un.broken(false, false, 0, err)
		}
	case tapAnswer:
		t.answer(err, stamp)
	}
	t.c.Scrub(res)
}

// answer records an answer that was not streamed, from its whole body: the usage's counts,
// else the text counted; its first token and end are the body's last byte, when it
// carries output; no chunks.
func (t *Tap) answer(err error, stamp int64) {
	res := t.res
	body := t.body
	t.body = nil
	end := t.lastNS
	if end == results.Null {
		end = stamp
	}
	switch {
	case err != nil:
		res.Status, res.Error = results.StatusStreamError, fmt.Sprintf("answer broken after %d bytes: %v", t.bytes, err)
		return
	case t.bytes > tapAnswerCap:
		res.Status = results.StatusStreamError
		res.Error = fmt.Sprintf("answer of %d bytes, over the %d MiB a recording decodes: not read", t.bytes, tapAnswerCap>>20)
		return
	}
	var ci wire.Chunk
	derr := t.c.enc.DecodeAnswer(body, &ci)
	if derr == nil && t.responses() {
		t.id = wire.ResponseID(body)
	}
	if derr != nil {
		res.Status, res.Error = results.StatusStreamError, "answer is not a generation's JSON"
		if !t.o.Private {
			res.Error += ": " + wire.ShortText([]byte(derr.Error()))
		}
		return
	}
	if ci.IsError {
		res.Status, res.Error = results.StatusStreamError, "server error in the answer"
		if !t.o.Private {
			res.Error += ": " + wire.ShortText([]byte(ci.ErrorMessage))
		}
		return
	}
	res.Status, res.Error = results.StatusOK, ""
	res.EndNS = end
	if ci.Output || ci.HasCompletion && ci.CompletionTokens > 0 {
		res.FirstTokenNS = end
	}
	if ci.Answer {
		res.FirstAnswerNS = end
	}
	t.answerCounts(&ci)
}

// answerCounts takes an answer's counts: the usage's as said, else the text counted with
// the client's tokenizer (0 for an answer without output), as a stream's end does.
func (t *Tap) answerCounts(ci *wire.Chunk) {
	res, count := t.res, t.c.opts.CountTokens
	if ci.Usage {
		if ci.HasPrompt {
			res.PromptTokensServer = ci.PromptTokens
		}
		if ci.HasCached && ci.Cached >= 0 {
			res.PromptTokensCached = ci.Cached
		}
	}
	switch {
	case ci.Usage && ci.HasCompletion:
		res.OutputTokens, res.OutputTokensSource = ci.CompletionTokens, results.SourceUsage
	case !ci.Output:
		res.OutputTokens, res.OutputTokensSource = 0, results.SourceTokenizer
	case len(ci.Text) > 0 && count != nil:
		res.OutputTokens, res.OutputTokensSource = int32(count(string(ci.Text))), results.SourceTokenizer
	}
	reasoned := len(ci.Reasoning) > 0
	switch {
	// A count of 0 for an answer that reasoned is no count (Ollama's constant 0), as
	// in a stream.
	case ci.Usage && ci.HasReasoningTokens && (ci.ReasoningTokens > 0 || !reasoned):
		res.ReasoningTokens, res.ReasoningTokensSource = ci.ReasoningTokens, results.SourceUsage
	case reasoned && count != nil:
		res.ReasoningTokens, res.ReasoningTokensSource = int32(count(string(ci.Reasoning))), results.SourceTokenizer
	}
}
