package trace

import (
	"bytes"
	"context"
	"encoding/csv"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/"+SampleName+" from the Azure CSV in testdata/traces")

// tracesDir is the repository's copy of the real sample traces (testdata/traces, with
// SOURCES.md). The repository carries them, so a missing file fails the test.
func tracesDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join("..", "testdata", "traces")
	if _, err := os.Stat(filepath.Join(dir, "SOURCES.md")); err != nil {
		t.Fatalf("sample traces missing from the repository: %v", err)
	}
	return dir
}

// readTracesCSV reads a CSV of testdata/traces whole with the standard library's reader,
// independently of the importers, header first.
func readTracesCSV(t testing.TB, file string) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(tracesDir(t), file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func importTrace(t testing.TB, file string, opts ImportOptions) (string, ImportReport) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.parquet")
	rep, err := ImportFile(context.Background(), filepath.Join(tracesDir(t), file), out, opts)
	if err != nil {
		t.Fatal(err)
	}
	return out, rep
}

func infoOf(t testing.TB, path string) Info {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	info, err := ComputeInfo(context.Background(), r, r.Meta())
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// near checks got against a figure SOURCES.md states rounded to the digits it shows.
func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %v, SOURCES.md says %v (±%v)", what, got, want, tol)
	}
}

func TestSharedAzure(t *testing.T) {
	path, rep := importTrace(t, "AzureLLMInferenceTrace_code.csv", ImportOptions{Format: FormatAzure})
	if rep.RowsRead != 8819 || rep.RowsWritten != 8819 || len(rep.Dropped) != 0 {
		t.Errorf("report %+v, want 8819 rows read and written", rep)
	}
	info := infoOf(t, path)
	m := info.Meta
	// 2023-11-16 18:17:03.9799600 UTC
	if want := time.Date(2023, 11, 16, 18, 17, 3, 979960000, time.UTC).UnixNano(); m.StartUnixNS != want || m.Source != "azure-2023" {
		t.Errorf("meta %+v, want start %d source azure-2023", m, want)
	}
	if info.Count != 8819 {
		t.Errorf("count %d", info.Count)
	}
	near(t, "span s", info.Span.Seconds(), 3435.9, 0.05)
	near(t, "mean rate", info.MeanRatePerSecond, 2.5664, 0.0005) // 8818 gaps / 3435.9 s
	near(t, "inter-arrival CV", info.InterArrivalCV, 13.15, 0.005)
	near(t, "dispersion 1s", info.Dispersion1s, 13.2, 0.05)
	p, o := info.Prompt, info.Output
	near(t, "prompt mean", p.Mean, 2048, 0.5)
	near(t, "prompt median", p.P50, 1469, 0.5)
	near(t, "prompt p90", p.P90, 5188, 0.5)
	near(t, "prompt p99", p.P99, 7436, 0.5)
	near(t, "prompt min", float64(p.Min), 3, 0)
	near(t, "prompt max", float64(p.Max), 7437, 0)
	near(t, "prompt sd", p.SD, 1974, 0.5)
	near(t, "output mean", o.Mean, 27.9, 0.05)
	near(t, "output median", o.P50, 13, 0)
	near(t, "output p90", o.P90, 55, 0)
	// SOURCES.md's 251 is 251.5 under linear interpolation: order statistics 251 and 252.
	near(t, "output p99", o.P99, 251, 0.5)
	near(t, "output min", float64(o.Min), 6, 0)
	near(t, "output max", float64(o.Max), 1899, 0)
	near(t, "output sd", o.SD, 60, 0.5)

	// Requests per minute range 0..632 with mean 152: the 60 s bins.
	r, _ := Open(path)
	defer r.Close()
	counts := map[int64]int{}
	for r.Next() {
		counts[int64(r.Request().Arrival/time.Minute)]++
	}
	mx := 0
	for _, c := range counts {
		mx = max(mx, c)
	}
	if mx != 632 {
		t.Errorf("max requests per minute %d, SOURCES.md says 632", mx)
	}
	nb := int64(info.Span/time.Minute) + 1
	near(t, "requests per minute, mean", float64(info.Count)/float64(nb), 152, 0.5)
}

func TestSharedMooncake(t *testing.T) {
	path, rep := importTrace(t, "mooncake_conversation_trace.jsonl", ImportOptions{Format: FormatMooncake})
	if rep.RowsRead != 12031 || rep.RowsWritten != 12031 {
		t.Errorf("report %+v", rep)
	}
	info := infoOf(t, path)
	if info.Meta.BlockTokens != 512 || info.Meta.Source != "mooncake" || info.Meta.StartUnixNS != 0 {
		t.Errorf("meta %+v", info.Meta)
	}
	if info.Count != 12031 || info.Span != 3536999*time.Millisecond {
		t.Errorf("count %d span %v, want 12031 and 3536.999s", info.Count, info.Span)
	}
	near(t, "mean rate", info.MeanRatePerSecond, 3.40, 0.005)
	p, o := info.Prompt, info.Output
	near(t, "input mean", p.Mean, 12035, 0.5)
	near(t, "input median", p.P50, 6909, 0.5)
	near(t, "input p90", p.P90, 27367, 0.5)
	near(t, "input p99", p.P99, 85400, 0.5)
	near(t, "input min", float64(p.Min), 891, 0)
	near(t, "input max", float64(p.Max), 126195, 0)
	near(t, "output mean", o.Mean, 343, 0.5)
	near(t, "output median", o.P50, 350, 0)
	near(t, "output p90", o.P90, 597, 0)
	near(t, "output p99", o.P99, 1119, 0.5)
	near(t, "output min", float64(o.Min), 1, 0)
	near(t, "output max", float64(o.Max), 2000, 0)
	if info.PrefixBlockRefs != 288500 || info.UniqueBlocks != 182790 {
		t.Errorf("blocks %d refs %d unique, SOURCES.md says 288,500 and 182,790", info.PrefixBlockRefs, info.UniqueBlocks)
	}
	near(t, "reusable share", info.ReusableBlockShare, 0.366, 0.0005)

	// Timestamps quantised: 1,180 distinct for 12,031 rows, at most 28 per timestamp;
	// requests per 60 s from 144 to 247; dispersion 5.8 at 3 s bins; and
	// len(hash_ids) == ceil(input_length/512) on every row.
	r, _ := Open(path)
	defer r.Close()
	per := map[time.Duration]int{}
	perMin := map[int64]int{}
	b3 := binCounter{width: int64(3 * time.Second)}
	var prevID int64 = -1
	for r.Next() {
		q := r.Request()
		per[q.Arrival]++
		perMin[int64(q.Arrival/time.Minute)]++
		b3.add(int64(q.Arrival))
		if want := (int(q.PromptTokens) + 511) / 512; len(q.PrefixBlocks) != want {
			t.Fatalf("request %d: %d blocks for %d tokens", q.ID, len(q.PrefixBlocks), q.PromptTokens)
		}
		if q.ID != prevID+1 {
			t.Fatalf("request ids not the source row order: %d after %d", q.ID, prevID)
		}
		prevID = q.ID
	}
	mx := 0
	for _, c := range per {
		mx = max(mx, c)
	}
	if len(per) != 1180 || mx != 28 {
		t.Errorf("%d distinct timestamps, at most %d per timestamp; SOURCES.md says 1,180 and 28", len(per), mx)
	}
	lo, hi := math.MaxInt, 0
	for _, c := range perMin {
		lo, hi = min(lo, c), max(hi, c)
	}
	if lo != 144 || hi != 247 {
		t.Errorf("requests per minute %d..%d, SOURCES.md says 144..247", lo, hi)
	}
	near(t, "dispersion 3s", b3.dispersion(int64(info.Span)), 5.8, 0.05)
}

func TestSharedBurstGPT(t *testing.T) {
	const file = "BurstGPT_1.head42.transcribed-from-hf-viewer.csv"
	path, rep := importTrace(t, file, ImportOptions{Format: FormatBurstGPT})
	if rep.RowsRead != 42 || rep.RowsWritten != 38 || rep.Dropped["failed request (0 response tokens)"] != 4 {
		t.Errorf("report %+v, want 42 read, 38 written, 4 failed dropped", rep)
	}
	info := infoOf(t, path)
	if info.Meta.Source != "burstgpt" {
		t.Errorf("source %q", info.Meta.Source)
	}
	r, _ := Open(path)
	defer r.Close()
	r.Next()
	if q := r.Request(); q.ID != 0 || q.PromptTokens != 472 || q.OutputTokens != 18 || q.Model != "ChatGPT" {
		t.Errorf("first row %+v, want 5,ChatGPT,472,18", q)
	}

	path, rep = importTrace(t, file, ImportOptions{Format: FormatBurstGPT, KeepFailed: true})
	if rep.RowsWritten != 42 || len(rep.Dropped) != 0 || rep.Adjusted["failed request kept, zero lengths raised to 1"] != 4 {
		t.Errorf("--keep-failed report %+v", rep)
	}
	// Span 5 to 4,725 s: 4,720 s once rebased to the first request.
	if info := infoOf(t, path); info.Count != 42 || info.Span != 4720*time.Second {
		t.Errorf("--keep-failed: %d rows over %v, want 42 over 4720s", info.Count, info.Span)
	}
}

// TestSampleReproducible rebuilds the embedded sample from the Azure CSV in testdata/traces with the
// importer and the slice, and checks it byte for byte. go test -run TestSample -update
// rewrites it.
func TestSampleReproducible(t *testing.T) {
	full, _ := importTrace(t, "AzureLLMInferenceTrace_code.csv", ImportOptions{Format: FormatAzure})
	out := filepath.Join(t.TempDir(), SampleName)
	n, err := SliceFile(context.Background(), full, out, SampleSlice)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(filepath.Join("testdata", SampleName), got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote testdata/%s: %d requests, %d bytes", SampleName, n, len(got))
		return
	}
	if !bytes.Equal(got, sample) {
		t.Fatalf("embedded sample (%d bytes) differs from the importer + slice output (%d bytes); rerun with -update and commit", len(sample), len(got))
	}
	r, err := OpenSample()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	info, err := ComputeInfo(context.Background(), r, r.Meta())
	if err != nil {
		t.Fatal(err)
	}
	if info.Count < 400 || info.Count > 2000 {
		t.Errorf("sample has %d requests, want 400..2,000", info.Count)
	}
	replay := info.Span.Seconds() / SampleSpeedup
	if replay < 25 || replay > 35 {
		t.Errorf("sample replays in %.1f s at speedup %d, want about 30 s", replay, SampleSpeedup)
	}
	if info.Meta.Source != "azure-2023" || info.Meta.Transforms == "" {
		t.Errorf("sample meta %+v", info.Meta)
	}
	t.Logf("sample: %d requests over %.1f s, %.2f req/s, CV %.2f; %.1f s at speedup %d",
		info.Count, info.Span.Seconds(), info.MeanRatePerSecond, info.InterArrivalCV, replay, SampleSpeedup)
}
