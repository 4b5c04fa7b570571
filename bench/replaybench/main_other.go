//go:build !linux

// Command replaybench is built for linux only: it reads /proc for the simulator's CPU time
// and the load, measures per-thread CPU with getrusage(RUSAGE_THREAD) and uses epoll for its
// floor client.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "replaybench: built for linux only (it reads /proc and uses epoll and RUSAGE_THREAD)")
	os.Exit(2)
}
