package trace

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
)

// TestToolTokensRoundTrip: tool_tokens is written and read back as it was, a recorded 0
// apart from no value, and a row without it reads as none.
func TestToolTokensRoundTrip(t *testing.T) {
	reqs := []Request{
		{ID: 0, PromptTokens: 100, OutputTokens: 5},
		{ID: 1, PromptTokens: 100, OutputTokens: 5, ToolTokens: 0, HasToolTokens: true},
		{ID: 2, PromptTokens: 100, OutputTokens: 5, ToolTokens: 40, HasToolTokens: true},
		{ID: 3, PromptTokens: 100, OutputTokens: 5, ToolTokens: 100, HasToolTokens: true},
	}
	path := filepath.Join(t.TempDir(), "t.parquet")
	writeFile(t, path, Meta{Source: "test"}, reqs)
	got, _ := readAll(t, path)
	if !reflect.DeepEqual(got, reqs) {
		t.Fatalf("read back\n%+v\nwant\n%+v", got, reqs)
	}
	if got[0].Tools() != 0 || got[2].Tools() != 40 {
		t.Errorf("Tools() = %d, %d", got[0].Tools(), got[2].Tools())
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.HasValues(ColToolTokens) {
		t.Error("HasValues(tool_tokens) false for a file with tools")
	}
	// A trace written without tools says so from its footer.
	none := filepath.Join(t.TempDir(), "n.parquet")
	writeFile(t, none, Meta{}, reqs[:1])
	rn, err := Open(none)
	if err != nil {
		t.Fatal(err)
	}
	defer rn.Close()
	if rn.HasValues(ColToolTokens) {
		t.Error("HasValues(tool_tokens) true for a file without tools")
	}
}

// TestToolTokensRejects: the writer and the reader refuse tool_tokens outside
// [0, prompt_tokens], naming the file, the row, the request_id and the column.
func TestToolTokensRejects(t *testing.T) {
	for _, v := range []int32{-1, 101} {
		path, err := writeOne(t, Request{ID: 7, PromptTokens: 100, OutputTokens: 1, ToolTokens: v, HasToolTokens: true})
		want := "tool_tokens: " + itoa(v) + " not in [0, prompt_tokens 100]"
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "row 0 (request_id 7)") || !strings.Contains(err.Error(), path) {
			t.Errorf("Write of tool_tokens %d: %v, want an error naming the file, row and %q", v, err, want)
		}

		// Another tool's file with the bad value: the reader says the same.
		sc := foreignSchema([]arrow.Field{{Name: ColToolTokens, Type: arrow.PrimitiveTypes.Int32, Nullable: true}})
		foreign := filepath.Join(t.TempDir(), "f.parquet")
		writeForeign(t, foreign, sc, func(b *array.RecordBuilder) {
			appendCore(b)
			b.Field(4).(*array.Int32Builder).AppendNull()
			b.Field(4).(*array.Int32Builder).Append(v)
		})
		rows, err := readRows(t, foreign)
		if n := len(rows); n != 1 || err == nil || !strings.Contains(err.Error(), foreign+" row 1: request_id 7: "+want) {
			t.Errorf("read of tool_tokens %d: %d rows, %v", v, len(rows), err)
		}
	}
}

func itoa(v int32) string { return strconv.Itoa(int(v)) }

// regenerate reads the spec back from a synthetic trace's llmreplay.generator and
// checks that it makes the same bytes.
func regenerate(t *testing.T, b []byte) {
	t.Helper()
	_, meta := readBytes(t, b)
	var gen struct {
		Spec SynthSpec `json:"spec"`
	}
	if err := json.Unmarshal([]byte(meta.Generator), &gen); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, synthBytes(t, gen.Spec)) {
		t.Fatalf("the spec in llmreplay.generator does not regenerate the file:\n%s", meta.Generator)
	}
}

// TestSynthToolTokens: with --tool-tokens N every row records N tool tokens inside its
// prompt_tokens, the prompt clamp bounds the whole prompt, and the messages' draws are
// those of the trace without tools (plain), so only the tools are added; a conversation's
// later turn carries the tools once, before its history; the generator regenerates it.
func TestSynthToolTokens(t *testing.T) {
	const n = 300
	plain := baseSpec()
	plain.Count = 500
	without, _ := readBytes(t, synthBytes(t, plain))
	plain.ToolTokens = n
	b := synthBytes(t, plain)
	rows, _ := readBytes(t, b)
	for i, r := range rows {
		if !r.HasToolTokens || r.ToolTokens != n || r.PromptTokens > plain.PromptMax {
			t.Fatalf("row %d: %+v", i, r)
		}
		// Draws below the lowered cap are the trace without tools' plus n.
		if w := without[i].PromptTokens; w <= plain.PromptMax-n && r.PromptTokens != w+n {
			t.Fatalf("row %d: prompt %d, the trace without tools had %d", i, r.PromptTokens, w)
		}
	}
	regenerate(t, b)

	turns, _ := ParseDist("uniform:2,6")
	chat := baseSpec()
	chat.Count, chat.Turns, chat.Sessions, chat.BlockTokens, chat.ToolTokens = 400, &turns, 8, 16, n
	chat.Prompt, _ = ParseDist("fixed:50")
	b = synthBytes(t, chat)
	rows, _ = readBytes(t, b)
	last := map[int64]Request{}
	later := 0
	for _, r := range rows {
		if r.ToolTokens != n || r.PromptTokens > chat.PromptMax {
			t.Fatalf("row %+v", r)
		}
		if p, ok := last[r.SessionID]; ok {
			later++
			// The history is the previous messages and answer, without its tools again,
			// then the new user text.
			if r.PromptTokens != p.PromptTokens+p.OutputTokens+50 {
				t.Fatalf("turn after %+v: %+v carries the tools twice or no new text", p, r)
			}
		}
		last[r.SessionID] = r
	}
	if later == 0 {
		t.Fatal("no later turns")
	}
	regenerate(t, b)

	agents := randomAgentSpec(t)
	agents.ToolTokens = n
	b = synthBytes(t, agents)
	rows, _ = readBytes(t, b)
	for _, r := range rows {
		if r.ToolTokens != n || r.PromptTokens < n+1 {
			t.Fatalf("call %+v", r)
		}
		if r.HasParents() && r.Call.PrefixTokens == Unknown {
			p := rows[r.Call.Parents[0]]
			if r.PromptTokens <= p.PromptTokens+p.OutputTokens {
				t.Fatalf("call %+v does not continue its parent's context %+v once", r, p)
			}
		}
	}
	regenerate(t, b)

	bad := baseSpec()
	bad.ToolTokens = bad.PromptMax
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "tool tokens 4096") {
		t.Errorf("tools filling the prompt clamp: %v", err)
	}
}

// TestImportToolTokens: the generic importers take tool_tokens through --map (an empty or
// null value is none) and refuse a value above prompt_tokens, naming the line and the
// source column.
func TestImportToolTokens(t *testing.T) {
	m := map[string]string{"arrival": "t", "prompt_tokens": "p", "output_tokens": "o", "tool_tokens": "tools"}
	for _, c := range []struct {
		format, good, bad, line string
	}{
		{FormatCSV, "t,p,o,tools\n0,100,5,40\n1,100,5,\n2,100,5,0\n", "t,p,o,tools\n0,100,5,40\n1,100,5,101\n", "in.txt line 3"},
		{FormatJSONL, `{"t":0,"p":100,"o":5,"tools":40}` + "\n" + `{"t":1,"p":100,"o":5,"tools":null}` + "\n" + `{"t":2,"p":100,"o":5,"tools":"0"}` + "\n",
			`{"t":0,"p":100,"o":5,"tools":40}` + "\n" + `{"t":1,"p":100,"o":5,"tools":101}` + "\n", "in.txt line 2"},
	} {
		rows, _, _, err := importString(t, c.good, ImportOptions{Format: c.format, Map: m})
		if err != nil {
			t.Fatalf("%s: %v", c.format, err)
		}
		if len(rows) != 3 || rows[0].ToolTokens != 40 || !rows[0].HasToolTokens || rows[1].HasToolTokens || !rows[2].HasToolTokens || rows[2].ToolTokens != 0 {
			t.Errorf("%s: %+v", c.format, rows)
		}
		_, _, _, err = importString(t, c.bad, ImportOptions{Format: c.format, Map: m})
		if err == nil || !strings.Contains(err.Error(), c.line) || !strings.Contains(err.Error(), "tools: 101 is more than prompt_tokens 100") {
			t.Errorf("%s: %v, want an error naming the line and the column", c.format, err)
		}
	}
}
