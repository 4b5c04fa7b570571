//go:build linux

package main

import (
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/llmreplay/llmreplay/internal/osthread"
	"github.com/llmreplay/llmreplay/stats"
)

// goSleeper is the sleeper (sleeper_linux.go) in Go, the way replay's dispatcher waits
// (replay/waiter_linux.go): a goroutine locked to its thread, sleeping to absolute
// deadlines in osthread.SleepUntil with its P handed off. Unlike the C sleeper, the
// thread must take a P back when it wakes (exitsyscall), before it reads the clock; when
// every P is busy it waits for one, and that wait shows in its lateness. The difference
// between the two in one run is what the Go runtime adds to a precise wake.
type goSleeper struct {
	stop atomic.Bool
	done chan []int64
	cpu  time.Duration // its thread's CPU time, once done
}

func startGoSleeper(period time.Duration) *goSleeper {
	period = max(period, time.Microsecond)
	s := &goSleeper{done: make(chan []int64, 1)}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer osthread.SetTimerSlack(osthread.SetTimerSlack(1)) // as the C sleeper and the dispatcher
		var late []int64
		c0 := threadCPUClock()
		next := osthread.Monotonic() + int64(period)
		for !s.stop.Load() {
			osthread.SleepUntil(next)
			late = append(late, osthread.Monotonic()-next)
			next += int64(period)
		}
		s.cpu = time.Duration(threadCPUClock() - c0)
		s.done <- late
	}()
	return s
}

// end stops the sleeper: p50, p99 and max lateness, ms.
func (s *goSleeper) end() (p50, p99, max float64) {
	p50, p99, max, _ = s.endCPU()
	return p50, p99, max
}

// endCPU is end, and the sleeper thread's CPU time (its wakes' share of the runtime's
// work on other threads is not in it).
func (s *goSleeper) endCPU() (p50, p99, max float64, cpu time.Duration) {
	s.stop.Store(true)
	p50, p99, max = lateStats(<-s.done)
	return p50, p99, max, s.cpu
}

// lateStats returns the p50, p99 and maximum of ns, in ms (sorting ns).
func lateStats(ns []int64) (p50, p99, max float64) {
	if len(ns) == 0 {
		return 0, 0, 0
	}
	ms := make([]float64, len(ns))
	for i, v := range ns {
		ms[i] = float64(v) / 1e6
	}
	slices.Sort(ms)
	return stats.Type7(ms, 0.5), stats.Type7(ms, 0.99), ms[len(ms)-1]
}
