package transport

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/wire"
)

// The non-streamed path (wire.Kind.Unary: embeddings, rerank): the answer is one JSON body,
// read as it arrives through a wire.UnaryScanner, which keeps the answer's count and usage
// and none of the body (an embeddings answer of 1,000 inputs is megabytes). Both clients
// feed unaryState, so that an answer means the same to either. The record: ok only for
// HTTP 200 and a body whose answer has one element per input sent (Result.Inputs);
// end_ns when the body's last byte was read; prompt_tokens_server the usage's count
// (wire.UnaryAnswer.Usage); no chunks, first_token_ns and the output columns null.

// unaryState turns a unary answer's body into its record.
type unaryState struct {
	sc     wire.UnaryScanner
	res    *results.Result
	status int   // the HTTP status (2xx: others are http_error before the body)
	bytes  int64 // body bytes read
	lastNS int64 // when the last of them was read (run clock)
	failed bool  // the body is not JSON: nothing more is read
	// private (the recording proxy's Tap): errors carry no byte of the body, which can
	// echo the inputs.
	private bool
}

func newUnary(k *wire.Kind, res *results.Result, status int) *unaryState {
	u := &unaryState{res: res, status: status, lastNS: results.Null}
	u.sc.Reset(k.Answer)
	return u
}

// write reads body bytes that arrived at stamp; false means stop reading (not JSON).
func (u *unaryState) write(b []byte, stamp int64) bool {
	u.bytes += int64(len(b))
	u.lastNS = stamp
	if u.sc.Write(b) != nil {
		u.failed = true
	}
	return !u.failed
}

// end completes the record once the body ended (or was found not to be JSON) at endNS.
func (u *unaryState) end(endNS int64) {
	res := u.res
	res.EndNS = endNS
	body, err := u.sc.Close()
	if body.PromptTokens >= 0 {
		res.PromptTokensServer = body.PromptTokens
	}
	res.Status = results.StatusStreamError
	switch {
	case err != nil && u.private:
		res.Error = "answer is not JSON" // the scanner's error quotes a byte of it
	case err != nil:
		res.Error = "answer is not JSON: " + err.Error()
	case body.Error != "" && u.private:
		res.Error = "server error in the answer"
	case body.Error != "":
		res.Error = "server error in the answer: " + wire.ShortText([]byte(body.Error))
	case u.status != http.StatusOK:
		res.Error = fmt.Sprintf("HTTP %d: an answer is HTTP 200", u.status)
	case body.Count < 0:
		res.Error = "answer has no array of results"
	case res.Inputs != results.Null && int32(body.Count) != res.Inputs:
		// Inputs is null when the request's count is not known (a recording): the
		// answer's count is not held against it then.
		res.Error = fmt.Sprintf("answer has %d results for the %d inputs sent", body.Count, res.Inputs)
	default:
		res.Status, res.Error = results.StatusOK, ""
	}
}

// broken words an answer whose body did not end: the run's stop first, then the
// request's timeout, then err.
func (u *unaryState) broken(canceled, timedOut bool, timeout time.Duration, err error) {
	res := u.res
	switch {
	case canceled:
		res.Status, res.Error = results.StatusCanceled, fmt.Sprintf("canceled after %d bytes of the answer: run interrupted", u.bytes)
	case timedOut:
		res.Status, res.Error = results.StatusTimeout, fmt.Sprintf("answer not read within the %v timeout (%d bytes)", timeout, u.bytes)
	default:
		res.Status, res.Error = results.StatusStreamError, fmt.Sprintf("answer broken after %d bytes: %v", u.bytes, err)
	}
}

// unaryBufs are the net/http path's read buffers.
var unaryBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// readUnary reads a unary answer's body over net/http into res.
func (c *Client) readUnary(ctx, rctx context.Context, clk Clock, resp *http.Response, res *results.Result) {
	u := newUnary(c.enc.Kind(), res, resp.StatusCode)
	bp := unaryBufs.Get().(*[]byte)
	defer unaryBufs.Put(bp)
	for {
		n, err := resp.Body.Read(*bp)
		now := clk.Now()
		if n > 0 && !u.write((*bp)[:n], now) {
			u.end(now)
			return
		}
		if err == io.EOF {
			u.end(now)
			return
		}
		if err != nil {
			u.broken(ctx.Err() != nil, rctx.Err() == context.DeadlineExceeded, c.opts.Timeout, err)
			return
		}
	}
}
