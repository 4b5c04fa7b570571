package main

// TEMPORARY: a stand-in for the dispatch helper's sleeper_linux.go (issue 18 contract 1),
// so that replaybench builds before it lands. Deleted before the fidelity branch's final
// commit.

import (
	"runtime"
	"slices"
	"time"

	"github.com/llmreplay/llmreplay/internal/osthread"
	"github.com/llmreplay/llmreplay/internal/quantile"
)

type sleeper struct {
	stop chan struct{}
	done chan []float64
}

func startSleeper(period time.Duration) *sleeper {
	s := &sleeper{stop: make(chan struct{}), done: make(chan []float64, 1)}
	go func() {
		runtime.LockOSThread()
		var late []float64
		next := osthread.Monotonic()
		for {
			select {
			case <-s.stop:
				s.done <- late
				return
			default:
			}
			next += int64(period)
			osthread.SleepUntil(next)
			late = append(late, float64(osthread.Monotonic()-next)/1e6)
		}
	}()
	return s
}

func (s *sleeper) end() (p50, p99, max float64) {
	close(s.stop)
	x := <-s.done
	if len(x) == 0 {
		return 0, 0, 0
	}
	slices.Sort(x)
	return quantile.Type7(x, 0.5), quantile.Type7(x, 0.99), x[len(x)-1]
}
