package trace

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

const lmmSample = "AzureLMMInferenceTrace_multimodal.sample.csv"

// lmmExpected reads the sample with the standard library (encoding/csv, time.Parse of
// RFC 3339), independently of the importer, and returns the rows the import must give.
func lmmExpected(t *testing.T) ([]Request, int64) {
	t.Helper()
	recs := readTracesCSV(t, lmmSample)
	if strings.Join(recs[0], ",") != "TIMESTAMP,NumImages,ContextTokens,GeneratedTokens" {
		t.Fatalf("header %v", recs[0])
	}
	var want []Request
	var t0 int64
	for i, r := range recs[1:] {
		ts, err := time.Parse(time.RFC3339Nano, r[0])
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			t0 = ts.UnixNano()
		}
		n, _ := strconv.Atoi(r[1])
		ctx, _ := strconv.Atoi(r[2])
		gen, _ := strconv.Atoi(r[3])
		q := Request{ID: int64(i), Arrival: time.Duration(ts.UnixNano() - t0), PromptTokens: int32(ctx), OutputTokens: int32(gen)}
		if n > 0 {
			q.Images = make([]Image, n)
		}
		want = append(want, q)
	}
	return want, t0
}

// TestAzureLMMSample: the schema-faithful sample imports exactly, row by row (NumImages
// images of unknown size, ContextTokens as prompt_tokens, no image_tokens), gzipped or
// not; --from azure on the same file imports it without images and says so in the report.
func TestAzureLMMSample(t *testing.T) {
	want, t0 := lmmExpected(t)
	if len(want) != 48 {
		t.Fatalf("sample has %d rows, SOURCES.md says 48", len(want))
	}
	raw, err := os.ReadFile(filepath.Join(tracesDir(t), lmmSample))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != "4d91e72ca9f9bcfd1a3a5f97bd8c759aecc494755e39986f266fc3ee004a475c" {
		t.Errorf("%s changed: its sha256 is not the one SOURCES.md gives; update the entry with the file", lmmSample)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	for name, src := range map[string]string{"plain": string(raw), "gzip": gz.String()} {
		rows, meta, rep, err := importString(t, src, ImportOptions{Format: FormatAzureLMM})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(rows, want) {
			t.Fatalf("%s: import\n%+v\nwant\n%+v", name, rows, want)
		}
		if meta.Source != "azure-lmm-2025" || meta.StartUnixNS != t0 || rep.RowsRead != 48 || rep.RowsWritten != 48 || rep.Adjusted != nil {
			t.Errorf("%s: meta %+v, report %+v", name, meta, rep)
		}
	}
	var images, with int
	for _, q := range want {
		images += len(q.Images)
		if len(q.Images) > 0 {
			with++
		}
	}
	if images != 107 || with != 31 {
		t.Errorf("%d images in %d rows, SOURCES.md says 107 in 31", images, with)
	}

	rows, _, rep, err := importString(t, string(raw), ImportOptions{Format: FormatAzure})
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range rows {
		w := want[i]
		w.Images = nil
		if !reflect.DeepEqual(q, w) {
			t.Fatalf("--from azure row %d: %+v, want %+v", i, q, w)
		}
	}
	if k := "images not imported (NumImages > 0; --from azure-lmm keeps them)"; rep.Adjusted[k] != 31 {
		t.Errorf("--from azure report %+v, want 31 rows adjusted: %s", rep, k)
	}
}

// TestAzureLMMErrors: a bad row stops the import with the file, the line and the column.
func TestAzureLMMErrors(t *testing.T) {
	const head = "TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n"
	const good = "2024-10-15T12:00:00.269Z,1,949,126\n"
	cases := []struct {
		name, src, want string
		line            int64
	}{
		{"missing column", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-10-15T12:00:00.269Z,1,1\n", `in.txt line 1: column "NumImages": missing`, 0},
		{"negative images", head + good + "2024-10-15T12:00:01Z,-1,949,126\n", `in.txt line 3: NumImages: "-1" is not a non-negative integer`, 3},
		{"bad images", head + good + "2024-10-15T12:00:01Z,two,949,126\n", `in.txt line 3: NumImages: "two" is not a non-negative integer`, 3},
		{"empty images", head + good + "2024-10-15T12:00:01Z,,949,126\n", `in.txt line 3: NumImages: empty`, 3},
		{"too many images", head + "2024-10-15T12:00:01Z,65537,949,126\n", `in.txt line 2: NumImages: 65537, at most 65536`, 2},
		{"bad context", head + good + "2024-10-15T12:00:01Z,1,9.5,126\n", `in.txt line 3: ContextTokens: "9.5" is not a non-negative integer`, 3},
		{"zero output", head + good + good + "2024-10-15T12:00:01Z,1,9,0\n", `in.txt line 4: GeneratedTokens: 0, must be >= 1`, 4},
		{"bad time", head + "2024-10-15T12:00:0x.1Z,1,9,9\n", `in.txt line 2: TIMESTAMP:`, 2},
		{"short row", head + "2024-10-15T12:00:01Z,1,9\n", `in.txt line 2: 3 fields, the header has 4`, 2},
	}
	for _, c := range cases {
		_, _, _, err := importString(t, c.src, ImportOptions{Format: FormatAzureLMM})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
			continue
		}
		var se *SyntaxError
		if c.line > 0 && (!errors.As(err, &se) || se.Line != c.line) {
			t.Errorf("%s: %v is not a SyntaxError at line %d", c.name, err, c.line)
		}
	}
}
