//go:build unix

package atomicfile

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// TestModeUnderUmask runs this test binary again with a given umask (set inside that child
// process only: the umask is process-wide, so setting it here would race with other
// tests) and checks the mode of the files it writes, new and replaced.
func TestModeUnderUmask(t *testing.T) {
	for _, c := range []struct {
		umask int
		want  os.FileMode
	}{{0o022, 0o644}, {0o027, 0o640}, {0o077, 0o600}, {0, 0o644}} {
		t.Run(fmt.Sprintf("%03o", c.umask), func(t *testing.T) {
			dir := t.TempDir()
			// An existing target with another mode: the replacement gets the new mode.
			if err := os.WriteFile(filepath.Join(dir, "old"), []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestModeChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "ATOMICFILE_CHILD_DIR="+dir, "ATOMICFILE_CHILD_UMASK="+strconv.Itoa(c.umask))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			for _, name := range []string{"new", "old"} {
				st, err := os.Stat(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if st.Mode().Perm() != c.want {
					t.Errorf("%s under umask %03o: mode %v, want %v", name, c.umask, st.Mode().Perm(), c.want)
				}
			}
		})
	}
}

// TestModeChild is TestModeUnderUmask's child process; it does nothing in a normal run.
func TestModeChild(t *testing.T) {
	dir := os.Getenv("ATOMICFILE_CHILD_DIR")
	if dir == "" {
		t.Skip("child process of TestModeUnderUmask only")
	}
	mask, err := strconv.Atoi(os.Getenv("ATOMICFILE_CHILD_UMASK"))
	if err != nil {
		t.Fatal(err)
	}
	syscall.Umask(mask)
	for _, name := range []string{"new", "old"} {
		if err := Write(filepath.Join(dir, name), func(w io.Writer) error {
			_, err := io.WriteString(w, "content")
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
}
