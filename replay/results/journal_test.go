package results

import (
	"os"
	"path/filepath"
	"testing"
)

func testRecords(n int) []*Result {
	out := make([]*Result, n)
	for i := range out {
		r := NewResult(int64(i), 0, int64(i)*1000, 10, 5)
		if i%3 == 0 {
			r.Status = StatusDropped
		} else {
			r.Status = StatusOK
			r.SentNS = r.ScheduledNS + 50
			r.ChunkNS = []int64{100, 200, 300}
			r.ChunkTokens = []int32{1, 2, 2}
			r.FirstTokenNS, r.EndNS = r.SentNS+100, r.SentNS+300
			r.OutputTokens, r.OutputTokensSource = 5, SourceUsage
			r.HTTPStatus = 200
		}
		out[i] = r
	}
	return out
}

// TestJournalRoundTripAndCut: a closed journal converts to every record; a journal cut
// anywhere (a killed writer) converts to every whole batch before the cut.
func TestJournalRoundTripAndCut(t *testing.T) {
	dir := t.TempDir()
	jpath := filepath.Join(dir, "r.parquet.journal")
	meta := &RunMeta{RunID: "abc", Mode: ModeOpen, Flags: map[string]string{"speedup": "2"}}
	j, err := CreateJournal(jpath, meta)
	if err != nil {
		t.Fatal(err)
	}
	recs := testRecords(100)
	var sizes []int64 // file size after each flushed batch of 10
	for i, r := range recs {
		if err := j.Add(r); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			if err := j.Flush(); err != nil {
				t.Fatal(err)
			}
			st, _ := os.Stat(jpath)
			sizes = append(sizes, st.Size())
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "r.parquet")
	info, err := ConvertJournal(jpath, out)
	if err != nil || info.Tail != nil || info.Rows != 100 || info.Run.RunID != "abc" {
		t.Fatalf("convert: %+v, %v", info, err)
	}
	got, m, err := ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 || m.Flags["speedup"] != "2" {
		t.Fatalf("read back %d rows, meta %+v", len(got), m)
	}
	for i, g := range got {
		w := recs[i]
		if g.RequestID != w.RequestID || g.Status != w.Status || g.SentNS != w.SentNS || len(g.ChunkNS) != len(w.ChunkNS) ||
			(w.ChunkTokens == nil) != (g.ChunkTokens == nil) || g.OutputTokens != w.OutputTokens || g.HTTPStatus != w.HTTPStatus {
			t.Fatalf("row %d: got %+v, want %+v", i, g, *w)
		}
	}

	full, _ := os.ReadFile(jpath)
	for _, cut := range []int64{sizes[0] - 1, sizes[0], sizes[3] + 7, sizes[9] - 3} {
		cp := filepath.Join(dir, "cut.journal")
		os.WriteFile(cp, full[:cut], 0o644)
		info, err := ConvertJournal(cp, filepath.Join(dir, "cut.parquet"))
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		whole := int64(0)
		for k, s := range sizes {
			if s <= cut {
				whole = int64(k+1) * 10
			}
		}
		if info.Rows != whole {
			t.Errorf("cut at %d bytes: recovered %d rows, want %d", cut, info.Rows, whole)
		}
		if cut != sizes[0] && info.Tail == nil {
			t.Errorf("cut at %d bytes: no tail error reported", cut)
		}
	}
	// No temporary file is left beside the outputs.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if filepath.Ext(e.Name()) != ".parquet" && filepath.Ext(e.Name()) != ".journal" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}
