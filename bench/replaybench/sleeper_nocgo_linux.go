//go:build linux && !cgo

package main

import "time"

// Without cgo the sleeper is the pure-Go one (sleeper_go_linux.go): a locked thread in
// clock_nanosleep, which must take a P back at each wake, unlike the C thread.
type sleeper = goSleeper

func startSleeper(period time.Duration) *sleeper { return startGoSleeper(period) }
