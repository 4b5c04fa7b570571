package trace

import (
	"path/filepath"
	"testing"
)

// TestHasValues: a column the writer stored all null has no values by the footer's
// statistics; one non-null value, in any row group, makes it have some.
func TestHasValues(t *testing.T) {
	for _, tc := range []struct {
		modelAt int // row with a model; -1: none
		want    bool
	}{{-1, false}, {0, true}, {batchRows + 5, true}} {
		path := filepath.Join(t.TempDir(), "t.parquet")
		w, err := Create(path, Meta{Source: "synth"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range batchRows + 10 {
			r := Request{ID: int64(i), PromptTokens: 1, OutputTokens: 1}
			if i == tc.modelAt {
				r.Model = "m"
			}
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		r, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.HasValues(ColModel); got != tc.want {
			t.Errorf("model at row %d: HasValues(model) = %v, want %v", tc.modelAt, got, tc.want)
		}
		if r.HasValues("no-such-column") || !r.HasValues(ColRequestID) {
			t.Error("HasValues of an unknown column, or of request_id, is wrong")
		}
		r.Close()
	}
}

// TestHasValuesList: the parents list column has values only when some row has parents;
// all null (no agent columns) reads as none, so a replay does not take a conversation
// trace for an agent trace.
func TestHasValuesList(t *testing.T) {
	for _, withParents := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "t.parquet")
		reqs := agentRequests()
		if !withParents {
			for i := range reqs {
				reqs[i].Call = nil
			}
		}
		writeFile(t, path, Meta{}, reqs)
		r, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.HasValues(ColParents); got != withParents {
			t.Errorf("with parents %v: HasValues(parents) = %v", withParents, got)
		}
		r.Close()
	}
}
