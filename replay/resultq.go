package replay

import (
	"github.com/llmreplay/llmreplay/replay/results"

	"sync"
	"time"
)

// resultQueue hands finished requests' records to the writer. A producer appends under a
// mutex and never blocks (a reactor's thread is one: the raw client's doRawAsync); the writer takes the
// whole batch every resultDrain, or at once when resultBatch records wait or the queue is
// closed. A channel send per record woke the writer's goroutine once per request, and each
// wake of a parked goroutine wakes a thread as well (a futex wake, its spin, its sleep): a
// cost per request that a batch pays once.
type resultQueue struct {
	mu     sync.Mutex
	batch  []*results.Result
	closed bool
	wake   chan struct{} // cap 1: a full batch, or the close
}

// resultDrain is how long a record may wait for the writer; the progress's counts lag by
// as much. resultBatch records wake it at once.
const (
	resultDrain = 50 * time.Millisecond
	resultBatch = 1024
)

func newResultQueue() *resultQueue {
	return &resultQueue{wake: make(chan struct{}, 1)}
}

func (q *resultQueue) put(res *results.Result) {
	q.mu.Lock()
	q.batch = append(q.batch, res)
	full := len(q.batch) == resultBatch
	q.mu.Unlock()
	if full {
		q.signal()
	}
}

func (q *resultQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// close tells the writer that no record follows those queued.
func (q *resultQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

// take swaps the queued records for spare (emptied, its capacity reused) and reports
// whether the queue is closed: no record follows those returned.
func (q *resultQueue) take(spare []*results.Result) (batch []*results.Result, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	batch, q.batch = q.batch, spare[:0]
	return batch, q.closed
}
