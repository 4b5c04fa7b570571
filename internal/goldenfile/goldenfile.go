// Package goldenfile compares a test's output with its golden file in the package's
// testdata/ folder; go test -update rewrites the golden files instead.
package goldenfile

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// Update is the -update flag: rewrite the golden files from what the tests write.
var Update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// Check fails t unless got is byte for byte testdata/name (after rewriting it, under -update).
func Check(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *Update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n--- got\n%s", name, got)
	}
}
