// Package raceio tells the race detector about the order a socket gives, for reads and
// writes made with raw system calls.
//
// The race detector sees an order through I/O only because package syscall's Read and
// Write acquire and release one shared sync object (internal/poll goes through them).
// A recvmsg or writev made with RawSyscall does neither, so under -race a goroutine that
// sets state, then writes a request, and the server's handler that reads the request and
// then the state, race, though the socket orders them. Acquire and Release restore that
// order; without the race detector they are empty and compile to nothing.
package raceio
