package analysis

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/llmreplay/llmreplay/analysis/decode"
)

func FuzzParseSLO(f *testing.F) {
	for _, s := range []string{"ttft=2s,tpot=100ms,e2e=30s", "ttft:2000", "", "tpot=1e3", "e2e=1h,ttft=-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		slo, err := ParseSLO(s)
		if err != nil {
			return
		}
		if err := slo.Validate(); err != nil {
			t.Fatalf("ParseSLO(%q) = %+v, which fails Validate: %v", s, slo, err)
		}
		back, err := ParseSLO(slo.String())
		if err != nil || back != slo {
			t.Fatalf("round trip of %q: %+v -> %q -> %+v, %v", s, slo, slo.String(), back, err)
		}
	})
}

func FuzzParseBuckets(f *testing.F) {
	for _, s := range []string{"256,1024", "prompt=1k,4k", "output=1", "x=1", "3,2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, o, err := ParseBuckets(s, nil, nil)
		if err != nil {
			return
		}
		opts := Options{PromptBuckets: p, OutputBuckets: o}
		if err := opts.Validate(); err != nil {
			t.Fatalf("ParseBuckets(%q) = %v %v, invalid: %v", s, p, o, err)
		}
	})
}

// FuzzLoadRows builds results files from fuzzed rows (times, statuses, chunk lists, token
// counts in any combination, valid or not) and loads and analyses them: Load must turn every
// bad row into an error naming it, and whatever it accepts must analyse and render without
// panicking. (Fuzzing the Parquet bytes themselves exercises arrow's decoder, not ours, and
// hangs in it: a corrupt ARROW:schema makes it allocate what the garbage says.)
func FuzzLoadRows(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Add([]byte{5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 200, 1, 3, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		var rows []row
		for len(data) >= 16 && len(rows) < 64 {
			b := data[:16]
			data = data[16:]
			scale := []int64{1, 1e3, 1e6, 1e9, 1e12, 1 << 62}[int(b[1])%6]
			v := func(k int) int64 { return int64(int8(b[k])) * scale }
			r := row{id: int64(len(rows)), scheduled: v(2), prompt: int32(int8(b[3])), outTarget: int32(int8(b[4])),
				status: string(append(decode.Statuses, "bogus")[int(b[0])%8]), source: []string{"usage", "tokenizer", "", "x"}[b[5]%4]}
			if b[6]&1 != 0 {
				r.sent = p64(v(7))
			}
			if b[6]&2 != 0 {
				r.first = p64(v(8))
			}
			if b[6]&4 != 0 {
				r.end = p64(v(9))
			}
			if b[6]&8 != 0 {
				r.out = p32(int32(int8(b[10])))
			}
			if b[6]&16 != 0 {
				r.promptServer = p32(int32(b[11]))
			}
			for k := 0; k < int(b[12]%6); k++ {
				r.chunks = append(r.chunks, int64(k)*int64(b[13])*scale)
			}
			if b[6]&32 != 0 {
				for k := 0; k < int(b[14]%6); k++ {
					r.chunkTokens = append(r.chunkTokens, int32(int8(b[15]))+int32(k))
				}
				if r.chunkTokens == nil {
					r.chunkTokens = []int32{}
				}
			}
			r.ttft, r.tpot, r.e2e = pf(0), pf(0), pf(0)
			rows = append(rows, r)
		}
		p := filepath.Join(t.TempDir(), "r.parquet")
		writeResults(t, p, testRun(), rows)
		d, err := Load(context.Background(), decode.LoadOptions{BatchSize: 7}, p)
		if err != nil {
			var fe *decode.FieldError
			if len(rows) > 0 && !errors.As(err, &fe) {
				t.Fatalf("error without row and field: %v", err)
			}
			return
		}
		r, err := Analyze(d, DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		if err := r.WriteText(io.Discard); err != nil {
			t.Fatal(err)
		}
		if err := r.WriteJSON(io.Discard); err != nil {
			t.Fatal(err)
		}
		if err := r.WriteHTML(io.Discard); err != nil {
			t.Fatal(err)
		}
	})
}
