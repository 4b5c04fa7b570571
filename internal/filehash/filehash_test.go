package filehash

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSHA256: the digest of a known input (FIPS 180-2's "abc" example), and a missing
// file's error.
func TestSHA256(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := SHA256(p)
	if want := "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; err != nil || got != want {
		t.Errorf("SHA256 = %q, %v; want %q", got, err, want)
	}
	if _, err := SHA256(p + ".missing"); !os.IsNotExist(err) {
		t.Errorf("a missing file gave %v, want a not-exist error", err)
	}
}
