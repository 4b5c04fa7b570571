package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// leftovers lists the folder's entries other than the wanted ones: a temporary file left
// behind shows up here.
func leftovers(t *testing.T, dir string, want ...string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var extra []string
next:
	for _, e := range ents {
		for _, w := range want {
			if e.Name() == w {
				continue next
			}
		}
		extra = append(extra, e.Name())
	}
	return extra
}

func TestWriteCreatesAndReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	for _, content := range []string{"first\n", "second, longer\n", ""} {
		if err := Write(path, func(w io.Writer) error {
			if _, ok := w.(io.Closer); ok {
				t.Error("the writer given to write has a Close method")
			}
			_, err := io.WriteString(w, content)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read back %q, %v; want %q", got, err, content)
		}
		if extra := leftovers(t, dir, "out.txt"); len(extra) != 0 {
			t.Fatalf("left behind: %v", extra)
		}
	}
}

func TestWriteFailsMidwayKeepsTarget(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	if err := os.WriteFile(path, []byte("old content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error {
		if _, err := io.WriteString(w, strings.Repeat("new ", 1<<16)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want the write function's error", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "old content\n" {
		t.Fatalf("target after a failed write: %q", got)
	}
	if extra := leftovers(t, dir, "out.txt"); len(extra) != 0 {
		t.Fatalf("left behind: %v", extra)
	}

	// Absent target, failed write: nothing appears.
	absent := filepath.Join(dir, "absent.txt")
	if err := Write(absent, func(w io.Writer) error { io.WriteString(w, "x"); return boom }); !errors.Is(err, boom) {
		t.Fatalf("Write = %v", err)
	}
	if extra := leftovers(t, dir, "out.txt"); len(extra) != 0 {
		t.Fatalf("left behind: %v", extra)
	}
}

// TestCommitRenameFails: when the rename itself fails (the target is a non-empty folder),
// Commit reports it and removes the temporary file.
func TestCommitRenameFails(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "busy")
	if err := os.MkdirAll(filepath.Join(target, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := Create(target)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "data")
	if err := f.Commit(); err == nil {
		t.Fatal("Commit over a non-empty folder succeeded")
	}
	if extra := leftovers(t, dir, "busy"); len(extra) != 0 {
		t.Fatalf("left behind: %v", extra)
	}
	f.Abort() // no-op after Commit
	if err := f.Commit(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("second Commit = %v, want os.ErrClosed", err)
	}
	if _, err := f.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Write after Commit = %v, want os.ErrClosed", err)
	}
}

func TestAbortRemoves(t *testing.T) {
	dir := t.TempDir()
	f, err := Create(filepath.Join(dir, "t.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(f.Name()), ".t.parquet.tmp-") || filepath.Dir(f.Name()) != dir {
		t.Fatalf("temporary file %s: want .t.parquet.tmp-* in the target's folder", f.Name())
	}
	io.WriteString(f, "partial")
	f.Abort()
	f.Abort()
	if extra := leftovers(t, dir); len(extra) != 0 {
		t.Fatalf("left behind: %v", extra)
	}
}

func TestCreateMissingFolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "x")
	if err := Write(path, func(io.Writer) error { return nil }); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Write into a missing folder = %v, want ErrNotExist", err)
	}
}
