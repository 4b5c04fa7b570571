//go:build !linux

package replay

// preciseWaiter is, outside Linux, the timer waiter with its yield loop.
func preciseWaiter(clk clock, stop <-chan struct{}) dueWaiter { return newWaiter(clk, stop) }
