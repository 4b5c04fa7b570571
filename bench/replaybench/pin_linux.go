package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
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
// less at most its last 50 ms.
func threadCPU(name string) (end func() time.Duration) {
	last := map[string]int64{}
	sample := func() {
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
	stop, done := make(chan struct{}), make(chan time.Duration)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-tick.C:
			case <-stop:
				sample()
				var sum int64
				for _, ns := range last {
					sum += ns
				}
				done <- time.Duration(sum)
				return
			}
		}
	}()
	return func() time.Duration { close(stop); return <-done }
}
