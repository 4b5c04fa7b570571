// Package atomicfile writes a file so that readers see either its old content or its whole
// new content, never a part, and so that the new content survives a crash once Commit
// returns: the data goes to a temporary file in the target's folder, which is synced,
// closed, renamed over the target, and the folder is synced so the rename itself is on
// disk.
//
// Files are created with permission 0644 through the kernel, so the user's umask applies
// (0644 under umask 022, 0640 under 027), the way os.Create's files do; os.CreateTemp's
// 0600 would keep a results file from a notebook server or an analysis job running as
// another user.
package atomicfile

import (
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
)

// Perm is the permission a new file is created with, before the umask.
const Perm os.FileMode = 0o644

// File is a pending replacement of a target path. It is an io.Writer and deliberately not
// an io.Closer: a streaming writer that closes its sink when it finishes (pqarrow's
// FileWriter) cannot close the file before Commit syncs it. A File is not safe for
// concurrent use.
type File struct {
	f      *os.File
	target string
	done   bool
}

// Create starts a replacement of path: a new temporary file beside it, named
// ".BASE.tmp-RANDOM" (hidden, and never mistaken for the target by a glob of *.parquet).
// The target is not touched until Commit.
func Create(path string) (*File, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	for attempt := 0; ; attempt++ {
		name := filepath.Join(dir, "."+base+".tmp-"+strconv.FormatUint(rand.Uint64(), 36))
		// O_EXCL, not os.CreateTemp: CreateTemp forces 0600, and a chmod afterwards would
		// have to know the umask, which only the racy, process-wide syscall.Umask tells.
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, Perm)
		if err == nil {
			return &File{f: f, target: path}, nil
		}
		if !errors.Is(err, os.ErrExist) || attempt == 100 {
			return nil, err
		}
	}
}

// Write writes to the temporary file.
func (f *File) Write(p []byte) (int, error) {
	if f.done {
		return 0, os.ErrClosed
	}
	return f.f.Write(p)
}

// Name returns the temporary file's name.
func (f *File) Name() string { return f.f.Name() }

// Commit syncs and closes the temporary file, renames it over the target and syncs the
// target's folder. On error the temporary file is removed and the target is as it was
// (unless the folder sync failed, after the rename: the new content is in place then, but
// may not survive a crash). Commit after Commit or Abort returns os.ErrClosed.
func (f *File) Commit() error {
	if f.done {
		return os.ErrClosed
	}
	f.done = true
	err := f.f.Sync()
	if cerr := f.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.f.Name(), f.target)
	}
	if err != nil {
		os.Remove(f.f.Name())
		return err
	}
	return SyncDir(filepath.Dir(f.target))
}

// Abort closes and removes the temporary file; the target is untouched. Abort after Commit
// or Abort does nothing, so `defer f.Abort()` is the usual cleanup.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.f.Close()
	os.Remove(f.f.Name())
}

// Write replaces path with what write writes, atomically: on any error (from write or
// from the file system) the target is untouched and no temporary file is left. The
// io.Writer given to write has no Close method. Errors are the file system's (*PathError,
// naming the file) or write's, unwrapped: callers add their own operation.
func Write(path string, write func(w io.Writer) error) error {
	f, err := Create(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := write(f); err != nil {
		return err
	}
	return f.Commit()
}

// SyncDir makes a rename into dir, or a file created in it, durable. Windows cannot sync a
// directory (its renames are journalled by NTFS), and some file systems refuse a
// directory fsync with EINVAL or ENOTSUP: for those the rename is as durable as they
// make it.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, errors.ErrUnsupported) && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}
