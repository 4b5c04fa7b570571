package filekind

import (
	"strings"
	"testing"
)

func TestSniff(t *testing.T) {
	for _, c := range []struct {
		head string
		want Kind
	}{
		{"", Empty},
		{"PAR1\x15\x04\x15", Parquet},
		{"ARROW1\x00\x00", ArrowFile},
		{"\xff\xff\xff\xff\x10\x01", ArrowStream},
		{"\x1f\x8b\x08\x08", Gzip},
		{"\x28\xb5\x2f\xfd", Zstd},
		{"BZh91AY", Bzip2},
		{"\xfd7zXZ\x00\x00", XZ},
		{"PK\x03\x04", Zip},
		{"  {\"a\":1}\n", JSON},
		{"\xef\xbb\xbf[1,2]", JSON},
		{"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n", Text},
		{"caf\xc3\xa9,\xe2\x82", Text}, // a rune cut by the head's end
		{"\x7fELF\x02\x01\x01\x00", Binary},
		{"abc\x00def", Binary},
		{"abc\xff\xfedef", Binary},
	} {
		if got := Sniff([]byte(c.head)); got != c.want {
			t.Errorf("Sniff(%q) = %v, want %v", c.head, got, c.want)
		}
	}
}

func TestPrintable(t *testing.T) {
	if got := Printable("PAR1\x15\x04\xc0v", 100); got != `PAR1\x15\x04\xc0v` {
		t.Errorf("binary: %s", got)
	}
	if got := Printable("héllo wörld", 2); got != "h..." {
		t.Errorf("cut inside a rune: %q", got)
	}
	if got := Printable(`column "a" \ tab`+"\t\u2028", 100); got != `column "a" \ tab\t\u2028` {
		t.Errorf("quotes and controls: %s", got)
	}
	if got := Printable(strings.Repeat("a", 10), 10); got != strings.Repeat("a", 10) {
		t.Errorf("not cut: %q", got)
	}
}
