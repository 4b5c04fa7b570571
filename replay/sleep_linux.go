package replay

import (
	"syscall"
	"time"
)

// sleepThread blocks the calling OS thread for d with nanosleep(2): the kernel's
// high-resolution timers wake it within tens of microseconds, where the Go runtime's
// timers can overshoot by a millisecond (netpoll waits in whole milliseconds). Callers
// lock their goroutine to its thread first.
func sleepThread(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil) // EINTR just means an early wake: the caller re-checks
}
