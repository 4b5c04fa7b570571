//go:build linux && !llmreplay_nolinkname

package osthread

import (
	"syscall"
	"unsafe"
)

// The runtime's own entry into the syscall state for a call known to block, and its exit.
// Neither is exported; the runtime keeps both linkable for gVisor. A build with the tag
// llmreplay_nolinkname leaves this file out (handoff_nolinkname_linux.go).

//go:linkname entersyscallblock runtime.entersyscallblock
func entersyscallblock()

//go:linkname exitsyscall runtime.exitsyscall
func exitsyscall()

// Block6 is syscall.Syscall6 for a call that blocks: the P is handed off at entry.
//
//go:nosplit
//go:norace
func Block6(trap, a1, a2, a3, a4, a5, a6 uintptr) (r1, r2 uintptr, err syscall.Errno) {
	entersyscallblock()
	r1, r2, err = syscall.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
	exitsyscall()
	return
}

// sleepWritev is SleepWritev's system calls, made in the syscall state unless hold:
// nosplit, nothing but raw system calls on values in this frame and its caller's.
//
//go:nosplit
//go:norace
func sleepWritev(ts, now *syscall.Timespec, fd, iov, iovcnt uintptr, hold bool) (n uintptr, err syscall.Errno) {
	if !hold {
		entersyscallblock()
	}
	for {
		_, _, e := syscall.RawSyscall6(syscall.SYS_CLOCK_NANOSLEEP, clockMonotonic, timerAbstime, uintptr(unsafe.Pointer(ts)), 0, 0, 0)
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
	if !hold {
		exitsyscall()
	}
	return
}
