//go:build unix

package replay

import "golang.org/x/sys/unix"

// freeBytes is the space an unprivileged user may still write in dir's filesystem.
func freeBytes(dir string) (uint64, bool) {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return 0, false
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true
}
