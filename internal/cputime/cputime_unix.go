//go:build unix

// Package cputime reads this process's CPU time, for benchmarks that report work per
// CPU-second (trace import, the simulated engine's streams).
package cputime

import (
	"syscall"
	"time"
)

// Process is this process's user+system CPU time (getrusage).
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
