package trace

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fuzzImport checks that an importer never panics, and that whatever it accepts is a
// valid trace that reads back row for row.
func fuzzImport(t *testing.T, opts ImportOptions, data string) {
	var buf bytes.Buffer
	w := NewWriter(&buf, Meta{})
	opts.Name = "fuzz"
	rep, err := Import(context.Background(), strings.NewReader(data), opts, w)
	if err != nil {
		if !strings.Contains(err.Error(), "fuzz") {
			t.Fatalf("error does not name the input: %v", err)
		}
		w.Abort()
		return
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(buf.Bytes()), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var n int64
	for r.Next() {
		n++
	}
	if r.Err() != nil || n != rep.RowsWritten || rep.RowsWritten > rep.RowsRead {
		t.Fatalf("read back %d rows (err %v), report %+v", n, r.Err(), rep)
	}
}

func FuzzImportAzure(f *testing.F) {
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:17:03.9799600,374,44\r\n2023-11-16 18:17:04.0000000,396,109")
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-12 00:00:00+00:00,4808,10\n2024-05-12 00:00:00.001163+00:00,3180,8\n")
	f.Add("TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n2025-05-07T12:00:00.5Z,1,10,20\n\"2025-05-07T12:00:02Z\",0,11,21\n")
	f.Fuzz(func(t *testing.T, data string) { fuzzImport(t, ImportOptions{Format: FormatAzure}, data) })
}

func FuzzImportAzureLMM(f *testing.F) {
	f.Add("TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n2024-10-15T12:00:00.269Z,0,770,491\n2024-10-15T12:00:05.819Z,16,4564,137\n")
	f.Add("TIMESTAMP,NumImages,ContextTokens,GeneratedTokens\r\n2024-10-15T12:00:00Z,65536,1,1\r\n2024-10-15T12:00:00Z,-1,1,1")
	f.Fuzz(func(t *testing.T, data string) { fuzzImport(t, ImportOptions{Format: FormatAzureLMM}, data) })
}

func FuzzImportAzureSorted(f *testing.F) {
	f.Add("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:05,1,1\n2023-11-16 18:17:03,2,1\n")
	f.Fuzz(func(t *testing.T, data string) { fuzzImport(t, ImportOptions{Format: FormatAzure, Sort: true}, data) })
}

func FuzzImportBurstGPT(f *testing.F) {
	f.Add("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,0,0,0,Conversation log\n")
	f.Add("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n10.5,abc,1.2,GPT-4,100,20,120,Conversation log\n")
	f.Fuzz(func(t *testing.T, data string) {
		fuzzImport(t, ImportOptions{Format: FormatBurstGPT}, data)
		fuzzImport(t, ImportOptions{Format: FormatBurstGPT, KeepFailed: true}, data)
	})
}

func FuzzImportMooncake(f *testing.F) {
	f.Add(`{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}` + "\n" + `{"timestamp": 3000, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}` + "\n")
	f.Fuzz(func(t *testing.T, data string) { fuzzImport(t, ImportOptions{Format: FormatMooncake}, data) })
}

func FuzzImportBailian(f *testing.F) {
	f.Add(`{"chat_id": 10, "parent_chat_id": -1, "timestamp": 0.25, "input_length": 40, "output_length": 5, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]}` + "\n" +
		`{"chat_id": 12, "parent_chat_id": 10, "timestamp": 1.0, "input_length": 70, "output_length": 5, "type": "text", "turn": 2, "hash_ids": [1, 2, 3, 6, 7]}`)
	f.Fuzz(func(t *testing.T, data string) { fuzzImport(t, ImportOptions{Format: FormatBailian}, data) })
}

func FuzzImportShareGPT(f *testing.F) {
	f.Add(`[{"id": "a", "conversations": [{"from": "human", "value": "Hello there"}, {"from": "gpt", "value": "Hi."}]}]`)
	f.Add(`[{"id": 1, "conversations": []}, {"conversations": [{"from": "user", "value": "x"}, {"from": "assistant", "value": "y"}]}]`)
	f.Fuzz(func(t *testing.T, data string) {
		fuzzImport(t, ImportOptions{Format: FormatShareGPT, Arrivals: ArrivalSpec{Process: ArrivalPoisson, Rate: 3, Seed: 1}}, data)
	})
}

func FuzzImportCSV(f *testing.F) {
	f.Add("id,t,in,out,conv,m,text\n7,1500,10,2,u1,llama,\"a, \"\"quoted\"\"\nprompt\"\n9,2500,11,3,,llama,plain\n", "ms")
	f.Add("id,t,in,out,conv,m,text\n1,2024-01-02 03:04:05,1,1,,,\n", "datetime")
	m := map[string]string{"arrival": "t", "prompt_tokens": "in", "output_tokens": "out", "session_id": "conv", "model": "m", "prompt": "text", "request_id": "id"}
	f.Fuzz(func(t *testing.T, data, unit string) {
		fuzzImport(t, ImportOptions{Format: FormatCSV, Map: m, TimeUnit: unit}, data)
	})
}

// FuzzImportImageColumns: the generic importers' images and image_tokens columns, beside
// tool_tokens.
func FuzzImportImageColumns(f *testing.F) {
	f.Add("t,in,out,tl,n,k\n0,100,5,40,2,60\n1,100,5,,1,\n2,100,5,,0,0\n", `{"t":0,"in":100,"out":5,"tl":40,"n":2,"k":60}`+"\n"+`{"t":1,"in":9,"out":1,"n":"1","k":null}`)
	m := map[string]string{"arrival": "t", "prompt_tokens": "in", "output_tokens": "out", "tool_tokens": "tl", "images": "n", "image_tokens": "k"}
	f.Fuzz(func(t *testing.T, csv, jsonl string) {
		fuzzImport(t, ImportOptions{Format: FormatCSV, Map: m}, csv)
		fuzzImport(t, ImportOptions{Format: FormatJSONL, Map: m}, jsonl)
	})
}

func FuzzImportJSONL(f *testing.F) {
	f.Add(`{"id": 7, "t": "2024-01-02T03:04:05.5Z", "in": 10, "out": 2, "conv": "u1", "m": "llama", "text": "hi"}`, "datetime")
	f.Add(`{"id": 7, "t": 1.5, "in": "10", "out": 2.0, "conv": null}`+"\n", "s")
	m := map[string]string{"arrival": "t", "prompt_tokens": "in", "output_tokens": "out", "session_id": "conv", "model": "m", "prompt": "text", "request_id": "id"}
	f.Fuzz(func(t *testing.T, data, unit string) {
		fuzzImport(t, ImportOptions{Format: FormatJSONL, Map: m, TimeUnit: unit}, data)
	})
}

func FuzzParseUnixNS(f *testing.F) {
	for _, s := range []string{"2023-11-16 18:17:03.9799600", "2024-05-12 00:00:00.001163+00:00", "2025-05-07T12:00:00.5Z", "1970-01-01 00:00:00-05:30", "2262-04-11 23:47:16"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseUnixNS([]byte(s))
		if err != nil {
			return
		}
		// Whatever it accepts, RFC 3339 parsing of the same instant agrees, when the
		// text is RFC 3339 with at most nanosecond digits.
		if want, terr := time.Parse(time.RFC3339Nano, strings.Replace(s, " ", "T", 1)); terr == nil && want.Year() >= 1678 && want.Year() <= 2261 {
			if want.UnixNano() != got {
				t.Fatalf("parseUnixNS(%q) = %d, time.Parse gives %d", s, got, want.UnixNano())
			}
		}
	})
}

func FuzzParseScaled(f *testing.F) {
	for _, s := range []string{"1.5", "3000", "-0.001", "1e3", "99999999999", ".5"} {
		f.Add(s, int64(1e9))
	}
	f.Fuzz(func(t *testing.T, s string, unit int64) {
		if unit <= 0 || unit > 1e9 {
			return
		}
		got, err := parseScaled([]byte(s), unit)
		if err != nil {
			return
		}
		if n, perr := strconv.ParseInt(s, 10, 64); perr == nil && n <= 1<<62/unit && n >= -(1<<62)/unit && got != n*unit {
			t.Fatalf("parseScaled(%q, %d) = %d, want %d", s, unit, got, n*unit)
		}
	})
}

func FuzzParseDist(f *testing.F) {
	for _, s := range []string{"fixed:512", "uniform:1,4096", "normal:1000,200", "lognormal:1000,600", "zipf:1.2,8192", "empirical:x.parquet"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDist(s)
		if err != nil || d.Kind == "empirical" {
			return
		}
		// Every accepted DIST samples without panicking.
		sm := newSampler(&d, newTestRand())
		for i := 0; i < 10; i++ {
			sm.draw()
		}
	})
}

func FuzzParseMap(f *testing.F) {
	f.Add("arrival=t,prompt_tokens=in,output_tokens=out,session_id=conv")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMap(s)
		if err == nil && (m[FieldArrival] == "" || m[FieldPrompt] == "" || m[FieldOutput] == "") {
			t.Fatalf("ParseMap(%q) = %v without a required field", s, m)
		}
	})
}

func newTestRand() *rand.Rand { return rand.New(rand.NewPCG(1, 1)) }

// fuzzAgentImport is fuzzImport for an agent trace format, and then the written file read
// back: every row it accepted passes DAGCheck (parents earlier, same session, ids unique).
func fuzzAgentImport(t *testing.T, format, data string) {
	fuzzImport(t, ImportOptions{Format: format}, data)
	var buf bytes.Buffer
	w := NewWriter(&buf, Meta{})
	if _, err := Import(t.Context(), strings.NewReader(data), ImportOptions{Format: format, Name: "fuzz"}, w); err != nil {
		w.Abort()
		return
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(buf.Bytes()), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dag := NewDAGCheck("out")
	for r.Next() {
		req := r.Request()
		if err := dag.Add(&req); err != nil {
			t.Fatal(err)
		}
	}
}

// importAgentRows imports src in an agent trace format and checks the rows' DAG.
func importAgentRows(t *testing.T, src, format string) ([]Request, Meta, ImportReport, error) {
	t.Helper()
	rows, meta, rep, err := importString(t, src, ImportOptions{Format: format})
	if err != nil {
		return nil, meta, rep, err
	}
	dag := NewDAGCheck(format)
	for i := range rows {
		if err := dag.Add(&rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	return rows, meta, rep, nil
}
