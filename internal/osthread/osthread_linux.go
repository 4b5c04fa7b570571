//go:build linux

// Package osthread gives the replayer's precise threads (the dispatcher's deadline
// sleeper, the stream reactor, the simulated engine's write scheduler) a blocking system
// call that lets go of the goroutine's P at once, as the runtime's own blocking calls do.
//
// syscall.Syscall enters the runtime's syscall state but keeps its P until sysmon
// retakes it, which sysmon does after 20 µs to 10 ms depending on how long it has slept;
// a thread that sleeps in clock_nanosleep or epoll_wait with it holds one of GOMAXPROCS Ps
// idle for that long, and the goroutines queued on that P wait (the dispatcher measured
// senders starved for milliseconds). Block hands the P off as it enters the call
// (runtime.entersyscallblock, which gVisor uses the same way and the runtime keeps
// linkable for it, go.dev/issue/67401), so the other goroutines run on it while the
// thread sleeps; on return the thread takes an idle P, or waits for one.
//
// Those two runtime functions are reached by //go:linkname (handoff_linux.go), which a Go
// release may refuse. Built with the tag llmreplay_nolinkname, the package uses no
// linkname (handoff_nolinkname_linux.go): the blocking calls go through syscall.Syscall6
// and keep their P until sysmon retakes it, as any Go program's system calls do. Only the
// hand-off is lost; every function keeps its meaning.
package osthread

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Monotonic is CLOCK_MONOTONIC in nanoseconds: the clock Go's monotonic readings
// (time.Since, time.Until) are on, and the one SleepUntil takes.
func Monotonic() int64 {
	var ts syscall.Timespec
	clockGettime(clockMonotonic, &ts)
	return ts.Nano()
}

const (
	clockMonotonic = unix.CLOCK_MONOTONIC
	timerAbstime   = unix.TIMER_ABSTIME
)

func clockGettime(id int, ts *syscall.Timespec) {
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, uintptr(id), uintptr(unsafe.Pointer(ts)), 0)
}

// SleepUntil sleeps the calling thread until CLOCK_MONOTONIC reaches deadline (ns), on
// the absolute deadline (clock_nanosleep with TIMER_ABSTIME: no drift from computing a
// relative sleep, and an interrupted sleep resumes to the same instant). The goroutine's P
// is handed off while it sleeps. Call it from a goroutine locked to its thread
// (runtime.LockOSThread) so that the wake-up is the thread's, not a scheduler hand-off.
func SleepUntil(deadline int64) {
	ts := syscall.NsecToTimespec(deadline)
	for {
		_, _, e := Block6(syscall.SYS_CLOCK_NANOSLEEP, clockMonotonic, timerAbstime, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		if e != syscall.EINTR {
			return
		}
	}
}

// SetTimerSlack sets the calling thread's timer slack (prctl PR_SET_TIMERSLACK) to ns and
// returns the one it had. Linux lets a normal thread's timed sleeps end up to its slack
// (50 µs by default) after their deadline, to group wake-ups; a thread whose job is to
// wake on time sets it to 1 ns. Call it on a goroutine locked to its thread, and set the
// old value back before unlocking it (the thread returns to the runtime's pool).
func SetTimerSlack(ns int) (prev int) {
	r, _, _ := syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_GET_TIMERSLACK, 0, 0)
	syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_SET_TIMERSLACK, uintptr(ns), 0)
	return int(r)
}

// EpollWait is syscall.EpollWait with the P handed off while it waits.
func EpollWait(epfd int, events []syscall.EpollEvent, msec int) (int, error) {
	var p unsafe.Pointer
	if len(events) > 0 {
		p = unsafe.Pointer(&events[0])
	}
	r, _, e := Block6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(p), uintptr(len(events)), uintptr(msec), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// Read is read(2) with the P handed off while it blocks (a timerfd's, an eventfd's).
func Read(fd int, b []byte) (int, error) {
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	r, _, e := Block6(syscall.SYS_READ, uintptr(fd), uintptr(p), uintptr(len(b)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

// SetName names the calling thread (prctl PR_SET_NAME; at most 15 bytes are kept), as
// `top -H`, `ps -L` and /proc/self/task/TID/comm show it, and returns the name it had.
// Call it on a goroutine locked to its thread, and set the old name back before unlocking
// it (the thread returns to the runtime's pool).
func SetName(name string) (prev string) {
	var old, b [16]byte
	syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_GET_NAME, uintptr(unsafe.Pointer(&old[0])), 0)
	copy(b[:15], name)
	syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0)
	for i, c := range old {
		if c == 0 {
			return string(old[:i])
		}
	}
	return string(old[:])
}

// SleepWritev sleeps the calling thread until CLOCK_MONOTONIC reaches deadline (ns,
// TIMER_ABSTIME, as SleepUntil), then reads CLOCK_MONOTONIC and calls writev(fd, iov,
// iovcnt), all before the goroutine takes a P back: the write leaves when the thread
// wakes, not when the runtime next has a P for it (the wait SleepUntil's caller pays
// before it can write: p99 0.2-0.5 ms on a busy 2-vCPU machine). woke is the reading
// taken just before the write. fd must be non-blocking; the memory iov points to must be
// kept alive by the caller (it is, through the values it passed). The sleep is not cut
// short by anything but a signal, after which it resumes to the same deadline.
//
// With hold, the goroutine keeps its P throughout (raw system calls, as SleepHold): for a
// thread with a P of its own. A preemption request (sysmon's, a stop of the world's) then
// waits until the write is made: a caller sleeps so at most a few milliseconds.
func SleepWritev(deadline int64, fd int, iov *syscall.Iovec, iovcnt int, hold bool) (woke int64, n int, err syscall.Errno) {
	ts := syscall.NsecToTimespec(deadline)
	var now syscall.Timespec
	r, e := sleepWritev(&ts, &now, uintptr(fd), uintptr(unsafe.Pointer(iov)), uintptr(iovcnt), hold)
	return now.Nano(), int(r), e
}

// SleepHold sleeps the calling thread until CLOCK_MONOTONIC reaches deadline (ns,
// TIMER_ABSTIME), keeping the goroutine's P while it sleeps, without even the runtime's
// syscall bookkeeping (a raw system call, as EpollWaitHold): for a locked thread with a P
// of its own (GOMAXPROCS raised for it), which then wakes with its P and runs at once,
// where SleepUntil's thread must get a P back and may wait for one. The runtime sees the
// goroutine running: sysmon's preemption signal after 10 ms, or a stop of the world's,
// ends the sleep early with false, and the caller's next function call honours the
// request. True when the deadline was reached.
func SleepHold(deadline int64) bool {
	ts := syscall.NsecToTimespec(deadline)
	_, _, e := syscall.RawSyscall6(syscall.SYS_CLOCK_NANOSLEEP, clockMonotonic, timerAbstime, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return e == 0
}

// EpollWaitHold is epoll_wait that keeps the goroutine's P while it waits, without even
// the runtime's syscall bookkeeping (a raw system call): for a thread that has a P of its
// own (GOMAXPROCS raised for it), so that a wake costs no hand-off of the P and no
// wake-up of the runtime's other threads. The runtime sees the P running the same
// goroutine: sysmon preempts it after 10 ms with a signal, which ends the wait with EINTR
// (returned as 0 events), so a stop of the world waits for no longer than that.
func EpollWaitHold(epfd int, events []syscall.EpollEvent, msec int) (int, error) {
	var p unsafe.Pointer
	if len(events) > 0 {
		p = unsafe.Pointer(&events[0])
	}
	r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(p), uintptr(len(events)), uintptr(msec), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
