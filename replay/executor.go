package replay

// executor decides when each request of a run is due and hands it to the dispatcher,
// until the schedule is over or the run stops: the open loop (exec_open.go), the closed
// loop (exec_closed.go), and sequential sessions in either (exec_sessions.go). It takes
// prepared requests from the runner's preparer (feed.next, or feed.prepared) and
// sends through the dispatcher only. A new way to schedule a run is one more executor.
type executor interface {
	run()
}

// newExecutor returns the executor of r's options.
func newExecutor(r *runner) executor {
	switch {
	case r.o.Concurrency > 0 && r.sess != nil:
		return &closedSessions{r: r, d: r.d, s: r.sess}
	case r.o.Concurrency > 0:
		return &closedLoop{r: r, d: r.d}
	case r.sess != nil:
		return &openSessions{r: r, d: r.d, s: r.sess}
	default:
		return &openLoop{r: r, d: r.d}
	}
}
