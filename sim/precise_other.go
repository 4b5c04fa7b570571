//go:build !linux

package sim

// scheduler is the precise writer, Linux only (precise_linux.go): elsewhere every
// stream takes the goroutine path.
type scheduler struct{}

func newScheduler() *scheduler { return nil }

func (sc *scheduler) submit(*pstream) bool { return false }

func (sc *scheduler) close() {}
