// Package uring is the least of Linux's io_uring that the stream reactor needs: one ring,
// recvmsg(2) operations prepared in a batch, submitted in one system call, and their
// completions read back. A read of a socket that has data completes while it is
// submitted, so a reactor that found n streams ready reads them all in one io_uring_enter
// instead of n recvmsg calls. On this project's machines a system call's entry and exit
// cost about 1 µs (a trivial getppid, measured), as much as the read's own work, so the
// batch takes most of that off every chunk.
//
// Every operation is non-blocking (MSG_DONTWAIT): the kernel completes it at once, with
// -EAGAIN when the socket is empty, instead of arming a poll and completing it later into
// a buffer its caller has moved on from. New checks this on the running kernel and fails
// if it does not hold. No Go io_uring package is served to this project (the module proxy
// refused the two known ones), and this subset is about 200 lines of code.
package uring
