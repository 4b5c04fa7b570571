//go:build !linux

package replay

// preciseWaiter is, outside Linux, the timer waiter with its yield loop.
func preciseWaiter(clk clock, stop <-chan struct{}) dueWaiter { return newWaiter(clk, stop) }

// sendAtDue: only Linux's thread waiter sends at the due time itself.
func (r *runner) sendAtDue(w dueWaiter, req *request) (sent, ok bool) { return false, true }
