//go:build !linux

package replay

import "github.com/llmreplay/llmreplay/replay/transport"

// preciseWaiter is, outside Linux, the timer waiter with its yield loop.
func preciseWaiter(clk transport.Clock, stop <-chan struct{}) dueWaiter { return newWaiter(clk, stop) }
