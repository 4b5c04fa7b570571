//go:build !linux

package rxstamp

import (
	"errors"
	"time"
)

// Supported reports whether this platform has receive timestamps.
const Supported = false

// Enable fails: receive timestamps are read on Linux only.
func Enable(fd int) error { return errors.ErrUnsupported }

// Hold fails: receive timestamps are read on Linux only.
func Hold(timeout time.Duration) (release func(), err error) { return nil, errors.ErrUnsupported }
