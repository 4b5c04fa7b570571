package pooling

import (
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkAppendEmbeddings is the handler's cost of an embeddings response: 32 inputs
// of 1,024 dimensions (drawing each vector and writing it), as floats and as base64.
func BenchmarkAppendEmbeddings(b *testing.B) {
	inputs := make([]Input, 32)
	for i := range inputs {
		inputs[i] = Input{Tokens: 512, Key: HashText(fmt.Sprint("input ", i))}
	}
	for _, b64 := range []bool{false, true} {
		b.Run(fmt.Sprintf("base64=%v", b64), func(b *testing.B) {
			var out []byte
			b.ReportAllocs()
			for b.Loop() {
				out = AppendEmbeddings(out[:0], 1, 1, []byte(`"m"`), inputs, 1024, 1024, b64)
			}
			b.ReportMetric(float64(len(out)), "bytes/op")
		})
	}
}

// TestEmbeddingsSize: EmbeddingsSize holds a float response of the largest ids and
// counts, so building it does not grow the buffer.
func TestEmbeddingsSize(t *testing.T) {
	inputs := make([]Input, 64)
	for i := range inputs {
		inputs[i] = Input{Tokens: 1 << 30, Key: uint64(i)}
	}
	for _, dims := range []int{1, 8, 1024} {
		out := AppendEmbeddings(nil, ^uint64(0), 1<<40, []byte(`"model"`), inputs, 1024, dims, false)
		if size := EmbeddingsSize(len(inputs), dims); len(out) > size {
			t.Errorf("dims %d: %d bytes, over EmbeddingsSize's %d", dims, len(out), size)
		}
	}
}

// FuzzParseInput: any body's input either is refused naming input, or gives at least one
// input, all of one kind, every token id in range; and it never panics.
func FuzzParseInput(f *testing.F) {
	for _, s := range []string{`"a"`, `["a","b"]`, `[1,2]`, `[[1],[2,3]]`, `[]`, `[null]`, `[[]]`, `5`, `{"a":1}`, `["a",1]`, `[-1]`, `[1e3]`, ` [ 1 ] `} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		texts, ids, err := ParseInput(json.RawMessage(raw), 1000)
		if err != nil {
			if err.Param != "input" || err.Msg == "" {
				t.Fatalf("%q: error %+v", raw, err)
			}
			return
		}
		if len(texts)+len(ids) == 0 || (texts != nil && ids != nil) {
			t.Fatalf("%q: %d texts and %d id lists", raw, len(texts), len(ids))
		}
		for _, l := range ids {
			for _, id := range l {
				if id < 0 || id >= 1000 {
					t.Fatalf("%q: id %d out of range", raw, id)
				}
			}
		}
	})
}
