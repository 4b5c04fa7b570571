//go:build !linux

package replay

import "time"

// sleepThread sleeps for d (the runtime's timers; only Linux gets nanosleep precision).
func sleepThread(d time.Duration) { time.Sleep(d) }
