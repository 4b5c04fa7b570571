// Package atomicfiletest checks, in other packages' tests, that a file was written through
// internal/atomicfile: its mode is atomicfile.Perm under the process's umask, and no
// temporary file is left beside it.
package atomicfiletest

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/internal/atomicfile"
)

// Umask returns the process's umask, read from /proc/self/status (Linux 4.7 and later)
// because syscall.Umask can only read it by setting it, process-wide. ok is false where
// the kernel does not say.
func Umask() (mask os.FileMode, ok bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, found := strings.CutPrefix(sc.Text(), "Umask:"); found {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			return os.FileMode(m), err == nil
		}
	}
	return 0, false
}

// Check fails t unless path is a regular file with mode atomicfile.Perm &^ umask (0644
// under umask 022) and no temporary file of path is left in its folder.
func Check(t testing.TB, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Mode().IsRegular() {
		t.Fatalf("%s: mode %v, want a regular file", path, st.Mode())
	}
	if mask, ok := Umask(); ok {
		if want := atomicfile.Perm &^ mask; st.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v (0644 under umask %03o)", path, st.Mode().Perm(), want, mask)
		}
	} else {
		t.Logf("%s: mode %v; the umask is unknown here, so not checked", path, st.Mode().Perm())
	}
	NoTemp(t, filepath.Dir(path))
}

// NoTemp fails t if dir holds a temporary file of internal/atomicfile (".NAME.tmp-*").
func NoTemp(t testing.TB, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), ".tmp") {
			t.Errorf("%s: temporary file %s left behind", dir, e.Name())
		}
	}
}
