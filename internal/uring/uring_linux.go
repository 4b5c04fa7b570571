//go:build linux

package uring

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/llmreplay/llmreplay/internal/rxstamp"
)

// The system-call numbers come from golang.org/x/sys/unix, which has them for every Linux
// architecture. It has none of io_uring's own constants or structures, so those below are
// written out from the kernel's ABI (include/uapi/linux/io_uring.h), which the kernel keeps
// stable: opcodes, flags and offsets are only ever added, and the structures only grow into
// their reserved fields. TestLayout checks the structures' sizes against the header's.
const (
	opRecvmsg = 10 // IORING_OP_RECVMSG

	enterGetEvents = 1 << 0 // IORING_ENTER_GETEVENTS

	featSingleMmap   = 1 << 0 // IORING_FEAT_SINGLE_MMAP
	featNoDrop       = 1 << 1 // IORING_FEAT_NODROP
	featSubmitStable = 1 << 2 // IORING_FEAT_SUBMIT_STABLE

	offSQRing = 0          // IORING_OFF_SQ_RING
	offSQEs   = 0x10000000 // IORING_OFF_SQES
)

// sqringOffsets is struct io_sqring_offsets (40 bytes).
type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// cqringOffsets is struct io_cqring_offsets (40 bytes).
type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// params is struct io_uring_params (120 bytes).
type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

// sqe is struct io_uring_sqe (64 bytes).
type sqe struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	msgFlags    uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFdIn  int32
	addr3       uint64
	_           uint64
}

// cqe is struct io_uring_cqe (16 bytes, no big CQEs).
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// Ring is one io_uring. It is not safe for concurrent use: one thread prepares, submits
// and reaps.
type Ring struct {
	fd      int
	ring    []byte // the SQ and CQ rings: one mapping (IORING_FEAT_SINGLE_MMAP)
	sqeMem  []byte
	sqTail  *uint32
	sqMask  uint32
	sqArray []uint32
	sqes    []sqe
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    []cqe
	tail    uint32 // the next SQ tail (published by Submit)
	queued  uint32 // prepared since the last Submit
	entries uint32
}

// New sets up a ring of entries submission slots (a power of two; the completion queue
// is twice that) and checks that a non-blocking recvmsg on an empty socket completes at
// once. It fails when the kernel has no io_uring, has it disabled or filtered, or lacks a
// feature the reactor relies on; callers then read with recvmsg(2) as before.
func New(entries uint32) (*Ring, error) {
	var p params
	fd, _, e := unix.RawSyscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, os.NewSyscallError("io_uring_setup", e)
	}
	r := &Ring{fd: int(fd), entries: p.sqEntries}
	if p.features&featSingleMmap == 0 || p.features&featNoDrop == 0 || p.features&featSubmitStable == 0 {
		r.Close()
		return nil, fmt.Errorf("io_uring: kernel features %#x lack single mmap, nodrop or submit-stable", p.features)
	}
	ringSize := max(int(p.sqOff.array)+int(p.sqEntries)*4, int(p.cqOff.cqes)+int(p.cqEntries)*int(unsafe.Sizeof(cqe{})))
	mem, err := unix.Mmap(r.fd, offSQRing, ringSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		r.Close()
		return nil, os.NewSyscallError("mmap", err)
	}
	r.ring = mem
	sqeMem, err := unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(sqe{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		r.Close()
		return nil, os.NewSyscallError("mmap", err)
	}
	r.sqeMem = sqeMem
	u32 := func(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	r.sqTail = u32(p.sqOff.tail)
	r.sqMask = *u32(p.sqOff.ringMask)
	r.sqArray = unsafe.Slice(u32(p.sqOff.array), p.sqEntries)
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&sqeMem[0])), p.sqEntries)
	r.cqHead = u32(p.cqOff.head)
	r.cqTail = u32(p.cqOff.tail)
	r.cqMask = *u32(p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&mem[p.cqOff.cqes])), p.cqEntries)
	r.tail = atomic.LoadUint32(r.sqTail)
	if err := r.probe(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// probe checks that a non-blocking recvmsg on an empty socket completes with EAGAIN in
// the submitting call: a kernel that armed a poll instead would write into a buffer
// later, after the reactor had reused it.
func (r *Ring) probe() error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return os.NewSyscallError("socketpair", err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	var buf [8]byte
	var msg rxstamp.Msg
	if !r.PrepRecvmsg(fds[0], msg.Header(buf[:]), 7) {
		return errors.New("io_uring: no submission slot")
	}
	if _, err := r.Submit(); err != nil {
		return err
	}
	got := false
	var res int32
	r.Reap(func(ud uint64, rs int32) {
		got = got || ud == 7
		res = rs
	})
	runtime.KeepAlive(&msg)
	runtime.KeepAlive(&buf)
	if !got {
		return errors.New("io_uring: a non-blocking recvmsg on an empty socket did not complete at once")
	}
	if unix.Errno(-res) != unix.EAGAIN {
		return fmt.Errorf("io_uring: a recvmsg on an empty socket gave %d, not EAGAIN", res)
	}
	return nil
}

// Entries is the ring's number of submission slots.
func (r *Ring) Entries() int { return int(r.entries) }

// PrepRecvmsg queues recvmsg(fd, msg, MSG_DONTWAIT) with userData for its completion; it
// reports false when every slot is taken (Submit first). msg, its iovecs and control
// buffer must stay live and unmoved until Submit returns (every operation completes in
// it).
func (r *Ring) PrepRecvmsg(fd int, msg *unix.Msghdr, userData uint64) bool {
	if r.queued == r.entries {
		return false
	}
	i := r.tail & r.sqMask
	r.sqes[i] = sqe{opcode: opRecvmsg, fd: int32(fd), addr: uint64(uintptr(unsafe.Pointer(msg))), len: 1,
		msgFlags: unix.MSG_DONTWAIT, userData: userData}
	r.sqArray[i] = i
	r.tail++
	r.queued++
	return true
}

// Submit hands the queued operations to the kernel in one io_uring_enter, which returns
// once each has completed (non-blocking reads complete as they are submitted). It returns
// how many the kernel took.
func (r *Ring) Submit() (int, error) {
	n := r.queued
	if n == 0 {
		return 0, nil
	}
	atomic.StoreUint32(r.sqTail, r.tail)
	r.queued = 0
	for {
		got, _, e := unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), 0, enterGetEvents, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return 0, os.NewSyscallError("io_uring_enter", e)
		}
		return int(got), nil
	}
}

// Reap calls f with each completion's user data and result (the system call's return,
// or -errno), in the order the kernel posted them, and frees their slots.
func (r *Ring) Reap(f func(userData uint64, res int32)) int {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail)
	n := 0
	for ; head != tail; head++ {
		c := &r.cqes[head&r.cqMask]
		f(c.userData, c.res)
		n++
	}
	atomic.StoreUint32(r.cqHead, head)
	return n
}

// Close releases the ring. Operations still queued are dropped.
func (r *Ring) Close() error {
	if r.sqeMem != nil {
		unix.Munmap(r.sqeMem)
		r.sqeMem = nil
	}
	if r.ring != nil {
		unix.Munmap(r.ring)
		r.ring = nil
	}
	if r.fd >= 0 {
		err := unix.Close(r.fd)
		r.fd = -1
		return err
	}
	return nil
}
