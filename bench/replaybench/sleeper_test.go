//go:build linux

package main

import (
	"flag"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var (
	sleeperFor    = flag.Duration("sleeper-for", 100*time.Millisecond, "TestSleeper: how long the sleepers run (e.g. 25s beside a fidelity run, with -v)")
	sleeperPeriod = flag.Duration("sleeper-period", time.Second/300, "TestSleeper: the sleepers' period (the mean gap at 300 req/s)")
)

// TestSleeper runs the C sleeper and the Go one side by side: each returns from end,
// and neither ever woke before its deadline (absolute sleeps: p50 <= p99 <= max, all >= 0).
// With -v it prints both (go test -run TestSleeper -v -sleeper-for 25s ./bench/replaybench
// beside a replaybench run gives the floor of that moment).
func TestSleeper(t *testing.T) {
	c, g := startSleeper(*sleeperPeriod), startGoSleeper(*sleeperPeriod)
	time.Sleep(*sleeperFor)
	cs, gs := lateness3(c.end()), lateness3(g.end())
	for _, s := range []struct {
		name string
		v    [3]float64
	}{{"C sleeper", cs}, {"Go sleeper", gs}} {
		t.Logf("%s (period %v, %v, load %s): late p50 %.3f p99 %.3f max %.3f ms", s.name, *sleeperPeriod, *sleeperFor, loadavg(), s.v[0], s.v[1], s.v[2])
		if !(0 <= s.v[0] && s.v[0] <= s.v[1] && s.v[1] <= s.v[2]) || s.v[2] == 0 {
			t.Errorf("%s: p50 %v p99 %v max %v: not 0 <= p50 <= p99 <= max, or no wake", s.name, s.v[0], s.v[1], s.v[2])
		}
	}
}

func lateness3(p50, p99, max float64) [3]float64 { return [3]float64{p50, p99, max} }

// BenchmarkSleepers reports each sleeper's lateness (ms) at a 1 ms period, on an idle
// process and with every P kept busy by goroutines that never block (busy): there the Go
// sleeper's thread finds no idle P when it wakes and waits for one (exitsyscall), which
// the C thread never does.
//
//	go test -run '^$' -bench Sleepers -benchtime 1x ./bench/replaybench
func BenchmarkSleepers(b *testing.B) {
	for _, busy := range []bool{false, true} {
		for _, kind := range []string{"C", "Go"} {
			b.Run(fmt.Sprintf("%s/busy=%v", kind, busy), func(b *testing.B) {
				var stop atomic.Bool
				var wg sync.WaitGroup
				if busy {
					for range runtime.GOMAXPROCS(0) {
						wg.Add(1)
						go func() {
							defer wg.Done()
							x := 0
							for !stop.Load() {
								x++
							}
							_ = x
						}()
					}
				}
				var v [3]float64
				for range b.N {
					if kind == "C" {
						s := startSleeper(time.Millisecond)
						time.Sleep(2 * time.Second)
						v = lateness3(s.end())
					} else {
						s := startGoSleeper(time.Millisecond)
						time.Sleep(2 * time.Second)
						v = lateness3(s.end())
					}
				}
				stop.Store(true)
				wg.Wait()
				b.ReportMetric(v[0], "p50-ms")
				b.ReportMetric(v[1], "p99-ms")
				b.ReportMetric(v[2], "max-ms")
			})
		}
	}
}

// TestSleeperCPU: each sleeper reports its thread's CPU time (what fidelity takes out of
// the replayer's figure): more than none after it woke, and no more than the process's.
func TestSleeperCPU(t *testing.T) {
	p0 := cpuTime()
	c, g := startSleeper(time.Millisecond), startGoSleeper(time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	_, _, _, cc := c.endCPU()
	_, _, _, gc := g.endCPU()
	proc := cpuTime() - p0
	for _, s := range []struct {
		name string
		cpu  time.Duration
	}{{"C sleeper", cc}, {"Go sleeper", gc}} {
		if s.cpu <= 0 || s.cpu > proc {
			t.Errorf("%s: thread CPU %v, process CPU %v: want more than 0 and no more than the process's", s.name, s.cpu, proc)
		}
	}
}
