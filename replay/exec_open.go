package replay

// openLoop dispatches each prepared request at its due time, whatever the server does:
// the trace's arrivals, scaled by the speedup (docs/replay.md, "Open loop").
type openLoop struct {
	r *runner
	d *dispatcher
}

func (e *openLoop) run() {
	w := e.d.dueWaiter()
	defer w.release()
	for {
		req, ok := e.r.feed.next()
		if !ok {
			return
		}
		sent, ok := e.d.sendAtDue(w, req)
		if !ok {
			return
		}
		if sent {
			continue
		}
		if !w.until(req.DueNS) {
			return
		}
		e.d.dispatch(req)
	}
}
