package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// pinnedEnv marks a replaybench that pinSelf has already re-executed under taskset.
const pinnedEnv = "REPLAYBENCH_CPUS"

// pinSelf re-executes replaybench under `taskset -c list` (same pid, same arguments),
// unless this process is that re-execution. Re-exec, not sched_setaffinity from main:
// sched_setaffinity pins only the calling thread, and by the time main runs the Go runtime
// has started sysmon and other threads, which would stay unpinned; a process started by
// taskset has every thread it will ever start on list.
func pinSelf(list string) error {
	if os.Getenv(pinnedEnv) == list {
		return nil
	}
	ts, err := exec.LookPath("taskset")
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	env := append(os.Environ(), pinnedEnv+"="+list)
	err = syscall.Exec(ts, append([]string{"taskset", "-c", list, self}, os.Args[1:]...), env)
	return fmt.Errorf("exec taskset: %w", err)
}

// threadCPU samples the CPU time of this process's threads named name (/proc/self/task:
// comm, and schedstat's first field, the ns a thread has run) every 50 ms until end is
// called, which returns their sum: the last sample of each thread, so that a thread that
// ended during the run (a reactor retires a second after its last stream) still counts,
// less at most its last 50 ms. end also returns the sampler's own CPU time until end was
// called (its thread's CLOCK_THREAD_CPUTIME_ID across each sample, about 0.35 µs per
// streamed token at 300 req/s): it runs in the replayer's process, and the caller takes
// it out of the replayer's figure.
func threadCPU(name string) (end func() (threads, self time.Duration)) {
	last := map[string]int64{}
	var self int64
	sample := func() {
		runtime.LockOSThread() // one thread throughout, for its CPU clock
		defer runtime.UnlockOSThread()
		t0 := threadCPUClock()
		defer func() { self += threadCPUClock() - t0 }()
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, t := range tasks {
			comm, err := os.ReadFile("/proc/self/task/" + t.Name() + "/comm")
			if err != nil || strings.TrimSpace(string(comm)) != name {
				continue
			}
			st, err := os.ReadFile("/proc/self/task/" + t.Name() + "/schedstat")
			if err != nil {
				continue
			}
			var ns int64
			fmt.Sscan(string(st), &ns)
			last[t.Name()] = max(last[t.Name()], ns)
		}
	}
	type result struct{ threads, self time.Duration }
	stop, done := make(chan struct{}), make(chan result)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-tick.C:
			case <-stop:
				own := self
				sample()
				var sum int64
				for _, ns := range last {
					sum += ns
				}
				done <- result{time.Duration(sum), time.Duration(own)}
				return
			}
		}
	}()
	return func() (time.Duration, time.Duration) { close(stop); r := <-done; return r.threads, r.self }
}

// threadCPUClock is the calling thread's CPU time, ns (CLOCK_THREAD_CPUTIME_ID).
func threadCPUClock() int64 {
	var ts syscall.Timespec
	const clockThreadCPUTimeID = 3
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}
