//go:build race && unix

package raceio

import "syscall"

// Acquire, after a raw read from the socket fd, orders what follows after every write
// made through package syscall (or Release) before it: a zero-length read(2), which a
// socket answers with 0 and syscall.Read follows with its acquire.
func Acquire(fd int) { syscall.Read(fd, nil) }

// Release, before a raw write to the socket fd, orders what came before it before every
// read made through package syscall (or Acquire) after it: syscall.Write releases before
// its zero-length write(2), whose result does not matter.
func Release(fd int) { syscall.Write(fd, nil) }
