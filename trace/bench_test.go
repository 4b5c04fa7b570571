package trace

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/cputime"
)

// azureCSV makes an Azure 2023-form CSV of n rows (CRLF, 7 fractional digits), as the
// real file is, with rows 3.9 ms apart on average.
func azureCSV(n int) []byte {
	var b bytes.Buffer
	b.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\r\n")
	t := time.Date(2023, 11, 16, 18, 17, 3, 979960000, time.UTC)
	for i := 0; i < n; i++ {
		t = t.Add(time.Duration(1000+(i*7919)%7000) * time.Microsecond)
		fmt.Fprintf(&b, "%s%07d,%d,%d\r\n", t.Format("2006-01-02 15:04:05."), t.Nanosecond()/100, 1+(i*31)%7437, 1+(i*17)%1899)
	}
	return b.Bytes()
}

// BenchmarkImportAzure measures the whole import: CSV parsing, timestamp parsing,
// validation and the zstd Parquet write (to io.Discard). rows/s is the figure of merit.
// rows/cpu-s divides by the CPU time the process used (all threads, GC included), which
// stays meaningful when other processes compete for the cores; on an idle machine
// rows/s is at least as high, since GC then runs beside the import on another core.
func BenchmarkImportAzure(b *testing.B) {
	const n = 1_000_000
	data := azureCSV(n)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	for i := 0; i < b.N; i++ {
		w := NewWriter(io.Discard, Meta{})
		rep, err := Import(context.Background(), bytes.NewReader(data), ImportOptions{Format: FormatAzure}, w)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		if rep.RowsWritten != n {
			b.Fatalf("%d rows", rep.RowsWritten)
		}
	}
	cpu := cputime.Process() - cpu0
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(n)*float64(b.N)/cpu.Seconds(), "rows/cpu-s")
}

// azureLMMCSV makes a multimodal trace of n rows in the 2025 release's form: ISO 8601
// milliseconds with Z, and 0..16 images on some rows (about 1.3 a row).
func azureLMMCSV(n int) []byte {
	var b bytes.Buffer
	b.WriteString("TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n")
	t := time.Date(2024, 10, 15, 12, 0, 0, 269e6, time.UTC)
	images := []int{0, 0, 0, 1, 1, 1, 1, 2, 3, 4, 16}
	for i := 0; i < n; i++ {
		t = t.Add(time.Duration(100+(i*7919)%1000) * time.Millisecond)
		fmt.Fprintf(&b, "%s,%d,%d,%d\n", t.Format("2006-01-02T15:04:05.000Z"), images[(i*13)%len(images)], 1+(i*31)%7437, 1+(i*17)%1899)
	}
	return b.Bytes()
}

// BenchmarkImportAzureLMM is BenchmarkImportAzure for --from azure-lmm: the images'
// allocation and the image columns' write on top.
func BenchmarkImportAzureLMM(b *testing.B) {
	const n = 1_000_000
	data := azureLMMCSV(n)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	for i := 0; i < b.N; i++ {
		w := NewWriter(io.Discard, Meta{})
		if _, err := Import(context.Background(), bytes.NewReader(data), ImportOptions{Format: FormatAzureLMM}, w); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
	cpu := cputime.Process() - cpu0
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(n)*float64(b.N)/cpu.Seconds(), "rows/cpu-s")
}

// BenchmarkRead measures streaming a trace back through Reader.
func BenchmarkRead(b *testing.B) {
	const n = 1_000_000
	var buf bytes.Buffer
	w := NewWriter(&buf, Meta{})
	if _, err := Import(context.Background(), bytes.NewReader(azureCSV(n)), ImportOptions{Format: FormatAzure}, w); err != nil {
		b.Fatal(err)
	}
	w.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := NewReader(bytes.NewReader(buf.Bytes()), "bench")
		if err != nil {
			b.Fatal(err)
		}
		k := 0
		for r.Next() {
			k++
		}
		if r.Err() != nil || k != n {
			b.Fatal(k, r.Err())
		}
		r.Close()
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
