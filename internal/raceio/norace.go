//go:build !race || !unix

package raceio

// Acquire, after a raw read from the socket fd, orders what follows after every write made
// through package syscall before it. Without the race detector it does nothing.
func Acquire(fd int) {}

// Release, before a raw write to the socket fd, orders what came before it before every
// read made through package syscall after it. Without the race detector it does nothing.
func Release(fd int) {}
