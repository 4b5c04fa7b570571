// Package filekind tells what a file is from its first bytes, so that an error about a file
// of the wrong kind says what the file looks like in one line ("this is a Parquet file")
// instead of echoing its binary content; and it makes text taken from an input safe to put
// in a message. It imports nothing of ours.
package filekind

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Kind is what a file looks like.
type Kind int

// The kinds Sniff tells apart.
const (
	Empty       Kind = iota
	Parquet          // starts with PAR1
	ArrowFile        // starts with ARROW1 (Arrow IPC file format)
	ArrowStream      // starts with the IPC continuation marker (a replay's journal)
	Gzip
	Zstd
	Bzip2
	XZ
	Zip
	JSON   // text whose first non-space byte is { or [
	Text   // other text (CSV, lines)
	Binary // anything else
)

var names = [...]string{
	Empty: "an empty file", Parquet: "a Parquet file", ArrowFile: "an Arrow IPC file",
	ArrowStream: "an Arrow IPC stream (a replay's journal?)", Gzip: "a gzip-compressed file",
	Zstd: "a zstd-compressed file", Bzip2: "a bzip2-compressed file", XZ: "an xz-compressed file",
	Zip: "a zip archive", JSON: "JSON text", Text: "text", Binary: "a binary file",
}

// String says the kind as a noun phrase: "a Parquet file", "JSON text".
func (k Kind) String() string { return names[k] }

// Compressed reports whether k is a compressed single file or archive.
func (k Kind) Compressed() bool { return k >= Gzip && k <= Zip }

// HeadSize is how many leading bytes Sniff needs at most.
const HeadSize = 512

// Sniff tells the kind of a file from its first bytes (up to HeadSize).
func Sniff(head []byte) Kind {
	switch {
	case len(head) == 0:
		return Empty
	case bytes.HasPrefix(head, []byte("PAR1")):
		return Parquet
	case bytes.HasPrefix(head, []byte("ARROW1")):
		return ArrowFile
	case bytes.HasPrefix(head, []byte{0xff, 0xff, 0xff, 0xff}):
		return ArrowStream
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		return Gzip
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return Zstd
	case bytes.HasPrefix(head, []byte("BZh")):
		return Bzip2
	case bytes.HasPrefix(head, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return XZ
	case bytes.HasPrefix(head, []byte("PK\x03\x04")):
		return Zip
	}
	if !isText(head) {
		return Binary
	}
	t := bytes.TrimLeft(bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")), " \t\r\n")
	if len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		return JSON
	}
	return Text
}

// isText: valid UTF-8 (a rune cut at the end of head is allowed) without NUL or other
// control bytes than tab, CR, LF and form feed.
func isText(b []byte) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			return len(b) < utf8.UTFMax && !utf8.FullRune(b)
		}
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' && r != '\f' {
			return false
		}
		b = b[n:]
	}
	return true
}

// OfFile sniffs the file at path; ok is false when it cannot be read.
func OfFile(path string) (k Kind, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	head := make([]byte, HeadSize)
	n, err := io.ReadFull(f, head)
	if err != nil && n == 0 && err != io.EOF {
		return 0, false
	}
	return Sniff(head[:n]), true
}

// Printable returns s fit for a one-line message: at most max bytes of it (cut on a rune
// boundary, with "..." when cut), with control characters escaped (\n, \t, \x00, \u2028)
// and each byte of invalid UTF-8 written \xNN. Quotes and backslashes are left as they are.
func Printable(s string, max int) string {
	cut := false
	if len(s) > max {
		i := max
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s, cut = s[:i], true
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == ' ' || unicode.IsPrint(r):
			b.WriteString(s[i : i+n])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	if cut {
		b.WriteString("...")
	}
	return b.String()
}

// Mismatch is the one-line message for a file of kind k given where want was expected
// ("a Parquet trace", "azure CSV text"): what it is, and what the user probably meant.
func Mismatch(k Kind, want, path string) string {
	msg := "this is " + k.String() + ", not " + want
	switch k {
	case Parquet:
		msg += "; did you mean `llmreplay trace info " + path + "` (a trace) or `llmreplay analyze " + path + "` (a results file)?"
	case ArrowStream:
		msg += "; a replay's journal becomes a results file with `llmreplay recover " + path + "`"
	case Gzip, Zstd, Bzip2, XZ, Zip:
		msg += "; decompress it first"
	case Text, JSON:
		msg += "; a recorded trace in CSV or JSON is imported first: `llmreplay trace import --from FORMAT " + path + " -o trace.parquet`"
	}
	return msg
}
