package trace

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// importString imports src and returns the rows, the metadata and the report.
func importString(t testing.TB, src string, opts ImportOptions) ([]Request, Meta, ImportReport, error) {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "in.txt"
	}
	var buf bytes.Buffer
	w := NewWriter(&buf, Meta{})
	rep, err := Import(context.Background(), strings.NewReader(src), opts, w)
	if err != nil {
		return nil, Meta{}, rep, err
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(buf.Bytes()), "mem")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []Request
	for r.Next() {
		out = append(out, r.Request())
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out, r.Meta(), rep, nil
}

func TestAzureForms(t *testing.T) {
	cases := []struct {
		name, src, source string
		start             time.Time
		arrivals          []time.Duration
	}{
		{"2023 CRLF no final newline",
			"TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:17:03.9799600,374,44\r\n2023-11-16 18:17:04.0000000,396,109\r\n2023-11-16 18:17:05.5000001,100,1",
			"azure-2023", time.Date(2023, 11, 16, 18, 17, 3, 979960000, time.UTC),
			[]time.Duration{0, 20040 * time.Microsecond, 1520040100 * time.Nanosecond}},
		{"2024 offset, fraction omitted when zero",
			"TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-12 00:00:00+00:00,4808,10\n2024-05-12 00:00:00.001163+00:00,3180,8\n2024-05-12 00:00:01+00:00,1,1\n",
			"azure-2024", time.Date(2024, 5, 12, 0, 0, 0, 0, time.UTC),
			[]time.Duration{0, 1163 * time.Microsecond, time.Second}},
		{"2025 ISO 8601 Z, extra columns, BOM",
			"\xef\xbb\xbfTIMESTAMP,NumImages,ContextTokens,GeneratedTokens\n2025-05-07T12:00:00.5Z,1,10,20\n2025-05-07T12:00:02Z,0,11,21\n",
			"azure-2025", time.Date(2025, 5, 7, 12, 0, 0, 5e8, time.UTC),
			[]time.Duration{0, 1500 * time.Millisecond}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows, meta, rep, err := importString(t, c.src, ImportOptions{Format: FormatAzure})
			if err != nil {
				t.Fatal(err)
			}
			if meta.Source != c.source || meta.StartUnixNS != c.start.UnixNano() {
				t.Errorf("meta %+v, want %s start %v", meta, c.source, c.start)
			}
			if int(rep.RowsWritten) != len(c.arrivals) || len(rows) != len(c.arrivals) {
				t.Fatalf("%d rows, report %+v", len(rows), rep)
			}
			for i, a := range c.arrivals {
				if rows[i].Arrival != a || rows[i].ID != int64(i) {
					t.Errorf("row %d: arrival %v id %d, want %v id %d", i, rows[i].Arrival, rows[i].ID, a, i)
				}
			}
		})
	}
}

func TestImportErrors(t *testing.T) {
	const az = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
	cases := []struct {
		name   string
		opts   ImportOptions
		src    string
		want   string
		noRows bool
	}{
		{"unknown format", ImportOptions{Format: "parquet"}, az, `unknown format "parquet"`, true},
		{"missing column", ImportOptions{Format: FormatAzure}, "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03,1\n", `line 1: column "GeneratedTokens": missing`, true},
		{"bad timestamp", ImportOptions{Format: FormatAzure}, az + "2023-11-16 18:17:03,1,1\n2023-11-16 25:17:03,1,1\n", "in.txt line 3: TIMESTAMP:", false},
		{"zero length", ImportOptions{Format: FormatAzure}, az + "2023-11-16 18:17:03,0,1\n", "line 2: ContextTokens: 0, must be >= 1", false},
		{"negative length", ImportOptions{Format: FormatAzure}, az + "2023-11-16 18:17:03,5,-1\n", "line 2: GeneratedTokens:", false},
		{"short row", ImportOptions{Format: FormatAzure}, az + "2023-11-16 18:17:03,5\n", "line 2: 2 fields, the header has 3", false},
		{"out of order", ImportOptions{Format: FormatAzure}, az + "2023-11-16 18:17:03,1,1\r\n2023-11-16 18:17:02,1,1\r\n", "line 3: arrival: 1s earlier than the previous row (line 2)", false},
		{"empty", ImportOptions{Format: FormatAzure}, "", "empty file", true},
		{"mooncake missing key", ImportOptions{Format: FormatMooncake}, `{"timestamp":0,"input_length":5,"output_length":1,"hash_ids":[1]}` + "\n\n" + `{"timestamp":1,"output_length":1}`, "line 3: input_length: missing", false},
		{"mooncake not json", ImportOptions{Format: FormatMooncake}, "{\"timestamp\":0,", "line 1: not a JSON object", true},
		{"bailian zero output", ImportOptions{Format: FormatBailian}, `{"chat_id":1,"parent_chat_id":-1,"timestamp":0.5,"input_length":5,"output_length":0,"hash_ids":[]}`, "line 1: output_length: 0, must be >= 1", true},
		{"csv needs map", ImportOptions{Format: FormatCSV}, "a,b,c\n", "needs a column map", true},
		{"csv bad time unit", ImportOptions{Format: FormatCSV, Map: map[string]string{"arrival": "a", "prompt_tokens": "b", "output_tokens": "c"}, TimeUnit: "h"}, "a,b,c\n", `time unit "h"`, true},
		{"sharegpt not array", ImportOptions{Format: FormatShareGPT, Arrivals: ArrivalSpec{Process: "poisson", Rate: 1}}, `{"id":1}`, "not a JSON array", true},
		{"burstgpt bad count", ImportOptions{Format: FormatBurstGPT}, "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,47x,18,490,Conversation log\n", `line 2: Request tokens: "47x"`, false},
		{"quote not closed", ImportOptions{Format: FormatAzure}, az + "\"2023-11-16 18:17:03,1,1\n", "line 2: quoted field not closed", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, _, err := importString(t, c.src, c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if !strings.Contains(err.Error(), "in.txt") {
				t.Errorf("error %q does not name the input", err)
			}
			var se *SyntaxError
			if !c.noRows && (!errors.As(err, &se) || se.File != "in.txt" || se.Line < 2) {
				t.Errorf("error %q is not a *SyntaxError naming a data line", err)
			}
		})
	}
}

func TestImportFileLeavesNothingOnError(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.csv")
	var b strings.Builder
	b.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n")
	// Enough good rows that a batch is flushed to the file before the bad one.
	for i := 0; i < batchRows+10; i++ {
		b.WriteString("2023-11-16 18:17:03.0000000,10,10\n")
	}
	b.WriteString("2023-11-16 18:17:04.0000000,10,zero\n")
	os.WriteFile(in, []byte(b.String()), 0o644)
	out := filepath.Join(dir, "out.parquet")
	_, err := ImportFile(context.Background(), in, out, ImportOptions{Format: FormatAzure})
	if err == nil || !strings.Contains(err.Error(), "line 65548: GeneratedTokens") {
		t.Fatalf("error %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries after a failed import, want only the input", len(ents))
	}
}

func TestImportSortKeepsTies(t *testing.T) {
	src := "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
		"2023-11-16 18:17:05,1,1\n" + // id 0
		"2023-11-16 18:17:03,2,1\n" + // id 1
		"2023-11-16 18:17:05,3,1\n" + // id 2: ties with id 0, after it
		"2023-11-16 18:17:04,4,1\n" // id 3
	rows, meta, _, err := importString(t, src, ImportOptions{Format: FormatAzure, Sort: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	if !reflect.DeepEqual(ids, []int64{1, 3, 0, 2}) || rows[2].Arrival != 2*time.Second {
		t.Errorf("sorted ids %v, want [1 3 0 2]", ids)
	}
	if want := time.Date(2023, 11, 16, 18, 17, 3, 0, time.UTC).UnixNano(); meta.StartUnixNS != want {
		t.Errorf("start %d, want the earliest row's %d", meta.StartUnixNS, want)
	}
	// Without sort, ties are fine and keep source order.
	rows, _, _, err = importString(t, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:05,1,1\n2023-11-16 18:17:05,2,1\n", ImportOptions{Format: FormatAzure})
	if err != nil || len(rows) != 2 || rows[0].PromptTokens != 1 || rows[1].Arrival != 0 {
		t.Errorf("ties: %+v %v", rows, err)
	}
}

func TestImportLimit(t *testing.T) {
	src := "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,1,1\n2023-11-16 18:17:04,1,1\n2023-11-16 18:17:05,1,1\n"
	rows, _, rep, err := importString(t, src, ImportOptions{Format: FormatAzure, Limit: 2})
	if err != nil || len(rows) != 2 || rep.RowsWritten != 2 {
		t.Errorf("limit 2: %d rows, %+v, %v", len(rows), rep, err)
	}
}

func TestBurstGPTv2(t *testing.T) {
	src := "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n" +
		"10.5,abc,1.2,GPT-4,100,20,120,Conversation log\n" +
		"11,abc,0.8,GPT-4,150,0,150,Conversation log\n" +
		"12,77,0.8,ChatGPT,150,30,180,API log\n"
	rows, meta, rep, err := importString(t, src, ImportOptions{Format: FormatBurstGPT})
	if err != nil {
		t.Fatal(err)
	}
	if meta.Source != "burstgpt-v2" || len(rows) != 2 || rep.Dropped["failed request (0 response tokens)"] != 1 {
		t.Fatalf("meta %+v rows %d report %+v", meta, len(rows), rep)
	}
	if !rows[0].HasSession || rows[0].SessionID != sessionKey([]byte("abc")) || rows[1].SessionID != 77 || rows[1].ID != 2 || rows[1].Arrival != 1500*time.Millisecond || rows[1].Model != "ChatGPT" {
		t.Errorf("rows %+v", rows)
	}
}

func TestBailianSessions(t *testing.T) {
	src := `{"chat_id": 10, "parent_chat_id": -1, "timestamp": 0.25, "input_length": 40, "output_length": 5, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]}
{"chat_id": 11, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 20, "output_length": 5, "type": "text", "turn": 1, "hash_ids": [4, 5]}
{"chat_id": 12, "parent_chat_id": 10, "timestamp": 1.0, "input_length": 70, "output_length": 5, "type": "text", "turn": 2, "hash_ids": [1, 2, 3, 6, 7]}
{"chat_id": 13, "parent_chat_id": 12, "timestamp": 1.0, "input_length": 90, "output_length": 5, "type": "text", "turn": 3, "hash_ids": [1, 2, 3, 6, 7, 8]}
{"chat_id": 14, "parent_chat_id": 99, "timestamp": 2.125, "input_length": 9, "output_length": 5, "type": "text", "turn": 2, "hash_ids": [9]}
`
	rows, meta, _, err := importString(t, src, ImportOptions{Format: FormatBailian})
	if err != nil {
		t.Fatal(err)
	}
	if meta.BlockTokens != 16 || meta.Source != "bailian" {
		t.Errorf("meta %+v", meta)
	}
	var sess []int64
	for _, r := range rows {
		sess = append(sess, r.SessionID)
	}
	if !reflect.DeepEqual(sess, []int64{10, 11, 10, 10, 99}) {
		t.Errorf("sessions %v, want [10 11 10 10 99]", sess)
	}
	if rows[4].Arrival != 1875*time.Millisecond || !reflect.DeepEqual(rows[3].PrefixBlocks, []int64{1, 2, 3, 6, 7, 8}) {
		t.Errorf("rows %+v", rows)
	}
}

func TestShareGPT(t *testing.T) {
	src := `[
 {"id": "a", "conversations": [{"from": "human", "value": "Hello there, how are you?"}, {"from": "gpt", "value": "I am fine, thank you."}]},
 {"id": "b", "conversations": [{"from": "gpt", "value": "orphan"}]},
 {"id": "c", "conversations": [{"from": "system", "value": "be nice"}, {"from": "human", "value": "Count to three."}, {"from": "gpt", "value": "One, two, three."}, {"from": "human", "value": "again"}]},
 {"id": "d", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": ""}]}
]`
	spec := ArrivalSpec{Process: ArrivalConstant, Rate: 2, Seed: 1}
	rows, meta, rep, err := importString(t, src, ImportOptions{Format: FormatShareGPT, Arrivals: spec})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rep.RowsRead != 4 || rep.Dropped["no human turn followed by a reply"] != 1 || rep.Dropped["empty prompt or reply"] != 1 {
		t.Fatalf("rows %+v report %+v", rows, rep)
	}
	// cl100k_base: "Hello there, how are you?" is 7 tokens, "I am fine, thank you." 7.
	if rows[0].PromptTokens != 7 || rows[0].OutputTokens != 7 || rows[0].Prompt != "Hello there, how are you?" || rows[1].ID != 2 {
		t.Errorf("rows %+v", rows)
	}
	if rows[1].Arrival != 500*time.Millisecond || meta.Source != "sharegpt" || !strings.Contains(meta.Generator, `"cl100k_base"`) {
		t.Errorf("arrival %v meta %+v", rows[1].Arrival, meta)
	}
}

func TestGenericCSVAndJSONL(t *testing.T) {
	m, err := ParseMap("arrival=t, prompt_tokens=in,output_tokens=out,session_id=conv,model=m,prompt=text,request_id=id")
	if err != nil {
		t.Fatal(err)
	}
	csvSrc := "id,t,in,out,conv,m,text\n7,1500,10,2,u1,llama,\"a, \"\"quoted\"\"\nprompt\"\n9,2500,11,3,,llama,plain\n"
	rows, meta, _, err := importString(t, csvSrc, ImportOptions{Format: FormatCSV, Map: m, TimeUnit: "ms"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{ID: 7, Arrival: 0, PromptTokens: 10, OutputTokens: 2, SessionID: sessionKey([]byte("u1")), HasSession: true, Model: "llama", Prompt: "a, \"quoted\"\nprompt"},
		{ID: 9, Arrival: time.Second, PromptTokens: 11, OutputTokens: 3, Model: "llama", Prompt: "plain"},
	}
	if !reflect.DeepEqual(rows, want) || meta.Source != "csv" || meta.StartUnixNS != 0 {
		t.Errorf("csv rows\n %+v\nwant %+v\nmeta %+v", rows, want, meta)
	}
	jsonl := `{"id": 7, "t": "2024-01-02T03:04:05.5Z", "in": 10, "out": 2, "conv": "u1", "m": "llama", "text": "a, \"quoted\"\nprompt"}
{"id": 9, "t": "2024-01-02T03:04:06.5Z", "in": "11", "out": 3.0, "conv": null, "m": "llama", "text": "plain"}
`
	rows, meta, _, err = importString(t, jsonl, ImportOptions{Format: FormatJSONL, Map: m, TimeUnit: "datetime"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rows, want) || meta.StartUnixNS != time.Date(2024, 1, 2, 3, 4, 5, 5e8, time.UTC).UnixNano() {
		t.Errorf("jsonl rows\n %+v\nwant %+v\nmeta %+v", rows, want, meta)
	}
	for _, bad := range []string{"arrival=t,prompt_tokens=in", "arrival=t,prompt_tokens=in,output_tokens=out,colour=c", "arrival", "arrival=t,arrival=u,prompt_tokens=in,output_tokens=out"} {
		if _, err := ParseMap(bad); err == nil {
			t.Errorf("ParseMap(%q) succeeded", bad)
		}
	}
}

func TestParseUnixNSMatchesTime(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	layouts := []string{"2006-01-02 15:04:05.0000000", "2006-01-02 15:04:05.999999-07:00", "2006-01-02T15:04:05.999999999Z07:00", "2006-01-02 15:04:05"}
	for i := 0; i < 20000; i++ {
		tm := time.Unix(r.Int64N(4e9)-1e9, r.Int64N(1e9)).UTC()
		lay := layouts[i%len(layouts)]
		if i%2 == 0 && lay != layouts[0] && lay != layouts[3] {
			tm = tm.In(time.FixedZone("", (r.IntN(27)-12)*3600+r.IntN(2)*1800))
		}
		s := tm.Format(lay)
		want, err := time.Parse(lay, s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseUnixNS([]byte(s))
		if err != nil || got != want.UnixNano() {
			t.Fatalf("parseUnixNS(%q) = %d, %v; time.Parse gives %d", s, got, err, want.UnixNano())
		}
	}
	for _, bad := range []string{"", "2023-11-16", "2023-13-16 18:17:03", "2023-02-29 00:00:00", "2023-11-16 18:17:03.", "2023-11-16 18:17:03 UTC", "2023-11-16 18:17:03+5", "2023/11/16 18:17:03"} {
		if _, err := parseUnixNS([]byte(bad)); err == nil {
			t.Errorf("parseUnixNS(%q) succeeded", bad)
		}
	}
}

func TestParseScaled(t *testing.T) {
	cases := []struct {
		in   string
		unit int64
		want int64
		ok   bool
	}{
		{"1.000000001", 1e9, 1000000001, true},
		{"0.1", 1e9, 1e8, true},
		{"3000", 1e6, 3e9, true},
		{"-2.5", 1e9, -2.5e9, true},
		{"1e3", 1e6, 1e9, true},
		{"12.0", 1, 12, true},
		{".5", 1e9, 5e8, true},
		{"", 1, 0, false},
		{".", 1, 0, false},
		{"1.2.3", 1, 0, false},
		{"abc", 1, 0, false},
		{"99999999999999999999", 1, 0, false},
		{"10000000000", 1e9, 0, false},
	}
	for _, c := range cases {
		got, err := parseScaled([]byte(c.in), c.unit)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("parseScaled(%q, %d) = %d, %v; want %d ok=%v", c.in, c.unit, got, err, c.want, c.ok)
		}
	}
}
