package replay

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the renderer's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestProgressUnits: a generation run's progress lines show output tok/s; an embeddings
// or rerank run's (ProgressOptions.Inputs) show inputs/s instead, as it has no output.
func TestProgressUnits(t *testing.T) {
	for _, c := range []struct {
		inputs    int
		want, not string
	}{{0, " tok/s", "inputs/s"}, {8, " inputs/s", "tok/s"}} {
		p := &Progress{}
		p.StartUnixNS.Store(time.Now().UnixNano())
		p.Done.Store(3)
		var w syncBuffer
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			RenderProgress(ctx, &w, p, ProgressOptions{Interval: time.Millisecond, Inputs: c.inputs})
		}()
		for !strings.Contains(w.String(), "\n") {
			time.Sleep(time.Millisecond)
		}
		cancel()
		<-done
		line := w.String()
		if !strings.Contains(line, c.want) || strings.Contains(line, c.not) {
			t.Errorf("inputs %d: %q; want %q and no %q", c.inputs, line, c.want, c.not)
		}
	}
}
