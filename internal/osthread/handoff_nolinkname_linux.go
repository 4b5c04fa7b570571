//go:build linux && llmreplay_nolinkname

package osthread

import (
	"syscall"
	"unsafe"
)

// This file stands in for handoff_linux.go in a build with the tag llmreplay_nolinkname,
// for a Go release that refuses the linkname into the runtime. It uses only exported
// system-call entries: a blocking call keeps the goroutine's P until sysmon retakes it
// (20 µs to 10 ms), so other goroutines may wait that long for it, and SleepWritev's
// write may wait for a P after the sleep. The results stay correct; the timing is what a
// plain Go program gets.

// Block6 is syscall.Syscall6 for a call that blocks. In this build the P is not handed
// off at entry: sysmon retakes it once the call has blocked for a while.
func Block6(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err syscall.Errno) {
	return syscall.Syscall6(trap, a1, a2, a3, a4, a5, a6)
}

// sleepWritev is SleepWritev's system calls. Unless hold, the sleep goes through the
// runtime's ordinary syscall state (Block6), and the goroutine may wait for a P after it;
// the clock reading and the write then follow as raw calls, so woke is still read just
// before the write.
func sleepWritev(ts, now *syscall.Timespec, fd, iov, iovcnt uintptr, hold bool) (n uintptr, err syscall.Errno) {
	for {
		var e syscall.Errno
		if hold {
			_, _, e = syscall.RawSyscall6(syscall.SYS_CLOCK_NANOSLEEP, clockMonotonic, timerAbstime, uintptr(unsafe.Pointer(ts)), 0, 0, 0)
		} else {
			_, _, e = Block6(syscall.SYS_CLOCK_NANOSLEEP, clockMonotonic, timerAbstime, uintptr(unsafe.Pointer(ts)), 0, 0, 0)
		}
		if e != syscall.EINTR {
			break
		}
	}
	syscall.RawSyscall6(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(now)), 0, 0, 0, 0)
	for {
		n, _, err = syscall.RawSyscall6(syscall.SYS_WRITEV, fd, iov, iovcnt, 0, 0, 0)
		if err != syscall.EINTR {
			break
		}
	}
	return
}
