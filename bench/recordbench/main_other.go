//go:build !linux

// Command recordbench is built for linux only: it reads the proxy's and the upstream's CPU
// time from /proc.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "recordbench: built for linux only (it reads /proc)")
	os.Exit(2)
}
