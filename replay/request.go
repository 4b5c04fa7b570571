package replay

import (
	"context"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
)

// request is one prepared request: what the transport sends (transport.Request) and
// what the executors keep beside it.
type request struct {
	transport.Request

	// Conversations (session.go): the turn's index in its session; in sequential mode its
	// session and wait for the predecessor (results.Null: none), and, when the next turn's
	// history needs it, what it sends (sent; the text it receives is Request.Answer,
	// captured by the stream when Request.Capture is set).
	turn          int32
	tools         int32 // the prompt tokens its tools are counted (Tools.split): history leaves them out
	images        int32 // images sent (images.Builder.Split); 0: none
	imageTokens   int32 // the prompt tokens they are counted
	conv          *conv
	sessionWaitNS int64
	sent          []byte

	// Agent sessions (exec_agents.go): the planned call, and the gap put before it
	// (results.Null for a call without parents).
	call  *agentCall
	gapNS int64
}

// funcTransport is a function as a transport: the tests' stand-in for a client
// (seams.do), which runs every request through it.
type funcTransport func(ctx context.Context, clk transport.Clock, req *transport.Request, res *results.Result)

func (f funcTransport) Prepare(*transport.Request, bool) {}

func (f funcTransport) RoundTrip(ctx context.Context, clk transport.Clock, req *transport.Request, res *results.Result, _ *transport.SSEReader, _ func(int), _ transport.SendStart) {
	f(ctx, clk, req, res)
}
