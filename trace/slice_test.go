package trace

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func TestSlice(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.parquet")
	// Arrivals 0,1,2,...,9 s, then a 100 s idle gap, then 110..114 s.
	var reqs []Request
	for i := 0; i < 15; i++ {
		a := time.Duration(i) * time.Second
		if i >= 10 {
			a += 100 * time.Second
		}
		reqs = append(reqs, Request{ID: int64(100 + i), Arrival: a, PromptTokens: int32(i + 1), OutputTokens: 1, Model: "m"})
	}
	writeFile(t, in, Meta{Source: "azure-2023", StartUnixNS: 1_000_000_000_000}, reqs)
	arrivals := func(rs []Request) (ids []int64, as []time.Duration) {
		for _, r := range rs {
			ids = append(ids, r.ID)
			as = append(as, r.Arrival)
		}
		return
	}
	cases := []struct {
		name  string
		spec  SliceSpec
		ids   []int64
		arr   []time.Duration
		start int64
	}{
		{"window", SliceSpec{Start: 3 * time.Second, Duration: 3 * time.Second}, []int64{103, 104, 105}, []time.Duration{0, time.Second, 2 * time.Second}, 3e9},
		{"limit", SliceSpec{Start: 8 * time.Second, Limit: 3}, []int64{108, 109, 110}, []time.Duration{0, time.Second, 102 * time.Second}, 8e9},
		{"max idle", SliceSpec{Start: 8 * time.Second, Limit: 3, MaxIdle: 5 * time.Second}, []int64{108, 109, 110}, []time.Duration{0, time.Second, 6 * time.Second}, 8e9},
		{"speedup", SliceSpec{Start: 8 * time.Second, Limit: 3, MaxIdle: 5 * time.Second, Speedup: 4}, []int64{108, 109, 110}, []time.Duration{0, 250 * time.Millisecond, 1500 * time.Millisecond}, 8e9},
		// 3 requests over 6 s (after the cap): 2 gaps, MeanRate 1/3 req/s; rate 2 needs
		// speedup 6, and the mean gap becomes 0.5 s = 1/rate.
		{"rate", SliceSpec{Start: 8 * time.Second, Limit: 3, MaxIdle: 5 * time.Second, Rate: 2}, []int64{108, 109, 110}, []time.Duration{0, 166666667, time.Second}, 8e9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(dir, c.name+".parquet")
			n, err := SliceFile(context.Background(), in, out, c.spec)
			if err != nil {
				t.Fatal(err)
			}
			got, meta := readAll(t, out)
			ids, as := arrivals(got)
			if n != int64(len(c.ids)) || !reflect.DeepEqual(ids, c.ids) || !reflect.DeepEqual(as, c.arr) {
				t.Errorf("n %d ids %v arrivals %v, want %v %v", n, ids, as, c.ids, c.arr)
			}
			if meta.StartUnixNS != 1_000_000_000_000+c.start || meta.Source != "azure-2023" {
				t.Errorf("meta %+v", meta)
			}
			var steps []map[string]any
			if err := json.Unmarshal([]byte(meta.Transforms), &steps); err != nil || len(steps) != 1 || steps[0]["op"] != "slice" {
				t.Errorf("transforms %q", meta.Transforms)
			}
			if got[0].Model != "m" || got[0].PromptTokens != int32(c.ids[0]-99) {
				t.Errorf("row fields not kept: %+v", got[0])
			}
		})
	}
	// A slice of a slice appends to the transforms.
	out2 := filepath.Join(dir, "twice.parquet")
	if _, err := SliceFile(context.Background(), filepath.Join(dir, "window.parquet"), out2, SliceSpec{Limit: 1}); err != nil {
		t.Fatal(err)
	}
	_, meta := readAll(t, out2)
	var steps []json.RawMessage
	if json.Unmarshal([]byte(meta.Transforms), &steps); len(steps) != 2 {
		t.Errorf("transforms after two slices: %s", meta.Transforms)
	}
	for _, bad := range []SliceSpec{{Speedup: 2, Rate: 3}, {Speedup: -1}, {Start: -1}} {
		if _, err := SliceFile(context.Background(), in, filepath.Join(dir, "bad.parquet"), bad); err == nil {
			t.Errorf("spec %+v accepted", bad)
		}
	}
	if _, err := SliceFile(context.Background(), in, filepath.Join(dir, "bad.parquet"), SliceSpec{Start: time.Hour, Rate: 1}); err == nil {
		t.Error("rate over an empty window accepted")
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.parquet")); !os.IsNotExist(err) {
		t.Error("a failed slice left its output")
	}
}
