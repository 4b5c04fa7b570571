package transport

import (
	"net/http"

	"github.com/llmreplay/llmreplay/replay/results"
)

type TapOptions struct{ Stream, Private bool }
type Tap struct {
	res *results.Result
	n   int
}

func (c *Client) NewTap(res *results.Result, o TapOptions) *Tap { return &Tap{res: res} }
func (t *Tap) Head(status int, h http.Header, stamp int64) {
	t.res.HTTPStatus = int32(status)
}
func (t *Tap) Body(b []byte, stamp int64) {
	if t.res.FirstTokenNS == results.Null {
		t.res.FirstTokenNS = stamp
	}
	t.res.EndNS = stamp
}
func (t *Tap) End(err error, stamp int64) {
	if err == nil {
		t.res.Status = results.StatusOK
		t.res.OutputTokens = 5
	} else {
		t.res.Status = results.StatusStreamError
	}
}
