//go:build !linux

package stampconn

import "syscall"

// enableStamps: the kernel's receive timestamps are read on Linux only.
func enableStamps(syscall.RawConn) bool { return false }

func (c *Conn) readStamped(b []byte) (int, int64, error) {
	n, err := c.Conn.Read(b)
	return n, 0, err
}
