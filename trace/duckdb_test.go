package trace

import (
	"github.com/llmreplay/llmreplay/internal/duckdbtest"

	"path/filepath"
	"strconv"
	"testing"
)

// num reads a DuckDB JSON value: BIGINT and HUGEINT come back as strings.
func duckNum(t *testing.T, v any) int64 {
	t.Helper()
	switch x := v.(type) {
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			t.Fatalf("duckdb value %q", x)
		}
		return n
	case float64:
		return int64(x)
	}
	t.Fatalf("duckdb value %v (%T)", v, v)
	return 0
}

func TestDuckDBReadsAzure(t *testing.T) {
	path, _ := importTrace(t, "AzureLLMInferenceTrace_code.csv", ImportOptions{Format: FormatAzure})
	// Sums straight from the CSV, with the standard library's reader.
	recs := readTracesCSV(t, "AzureLLMInferenceTrace_code.csv")
	var ctx, gen int64
	for _, r := range recs[1:] {
		a, _ := strconv.ParseInt(r[1], 10, 64)
		b, _ := strconv.ParseInt(r[2], 10, 64)
		ctx += a
		gen += b
	}
	q := "SELECT count(*) AS n, sum(prompt_tokens) AS p, sum(output_tokens) AS o, max(arrival_ns) AS span, " +
		"count(DISTINCT request_id) AS ids, count(session_id) AS sess, count(prefix_blocks) AS blocks " +
		"FROM read_parquet('" + path + "')"
	row := duckdbtest.Query(t, q)[0]
	if n := duckNum(t, row["n"]); n != int64(len(recs)-1) {
		t.Errorf("duckdb count %d, CSV has %d rows", n, len(recs)-1)
	}
	if p, o := duckNum(t, row["p"]), duckNum(t, row["o"]); p != ctx || o != gen {
		t.Errorf("duckdb sums %d, %d; CSV %d, %d", p, o, ctx, gen)
	}
	if span := duckNum(t, row["span"]); span != 3435948056000 {
		t.Errorf("duckdb max(arrival_ns) %d, want 3435948056000 (19:14:19.9280160 - 18:17:03.9799600)", span)
	}
	if duckNum(t, row["ids"]) != 8819 || duckNum(t, row["sess"]) != 0 || duckNum(t, row["blocks"]) != 0 {
		t.Errorf("duckdb ids/sessions/blocks %v", row)
	}
	types := duckdbtest.Query(t, "SELECT column_name AS c, column_type AS t FROM (DESCRIBE SELECT * FROM read_parquet('"+path+"'))")
	want := map[string]string{"request_id": "BIGINT", "arrival_ns": "BIGINT", "prompt_tokens": "INTEGER", "output_tokens": "INTEGER",
		"session_id": "BIGINT", "prefix_blocks": "BIGINT[]", "model": "VARCHAR", "prompt": "VARCHAR",
		"parents": "BIGINT[]", "gap_ns": "BIGINT", "gap_kind": "VARCHAR", "duration_ns": "BIGINT",
		"prefix_tokens": "INTEGER", "cached_tokens": "INTEGER", "reasoning_tokens": "INTEGER", "tool_tokens": "INTEGER",
		"images": "INTEGER", "image_widths": "INTEGER[]", "image_heights": "INTEGER[]", "image_tokens": "INTEGER",
		"api": "VARCHAR", "max_tokens": "INTEGER", "n": "INTEGER", "stream": "BOOLEAN"}
	if len(types) != len(want) {
		t.Errorf("duckdb sees %d columns: %v", len(types), types)
	}
	for _, r := range types {
		if want[r["c"].(string)] != r["t"].(string) {
			t.Errorf("column %v: duckdb type %v, want %v", r["c"], r["t"], want[r["c"].(string)])
		}
	}
	md := duckdbtest.Query(t, "SELECT decode(key) AS k, decode(value) AS v FROM parquet_kv_metadata('"+path+"') WHERE decode(key) LIKE 'llmreplay.%'")
	got := map[string]string{}
	for _, r := range md {
		got[r["k"].(string)] = r["v"].(string)
	}
	if got[MetaFormat] != Format || got[MetaSource] != "azure-2023" || got[MetaStartUnixNS] != "1700158623979960000" {
		t.Errorf("duckdb sees metadata %v", got)
	}
}

func TestDuckDBReadsMooncakeBlocks(t *testing.T) {
	path, _ := importTrace(t, "mooncake_conversation_trace.jsonl", ImportOptions{Format: FormatMooncake})
	row := duckdbtest.Query(t, "SELECT count(*) AS n, sum(len(prefix_blocks)) AS refs, (SELECT count(DISTINCT b) FROM (SELECT unnest(prefix_blocks) AS b FROM read_parquet('"+path+"'))) AS uniq FROM read_parquet('"+path+"')")[0]
	if duckNum(t, row["n"]) != 12031 || duckNum(t, row["refs"]) != 288500 || duckNum(t, row["uniq"]) != 182790 {
		t.Errorf("duckdb: %v, want 12031 rows, 288500 block refs, 182790 unique", row)
	}
}

// TestReadDuckDBWritten reads a trace DuckDB wrote (columns in another order, its own
// list element naming, the metadata key set by KV_METADATA), the other way round.
func TestReadDuckDBWritten(t *testing.T) {
	src, _ := importTrace(t, "mooncake_conversation_trace.jsonl", ImportOptions{Format: FormatMooncake, Limit: 500})
	out := filepath.Join(t.TempDir(), "duck.parquet")
	duckdbtest.Query(t, "COPY (SELECT prefix_blocks, output_tokens, prompt_tokens, arrival_ns, request_id FROM read_parquet('"+src+"') ORDER BY arrival_ns, request_id) TO '"+out+
		"' (FORMAT parquet, KV_METADATA {'llmreplay.format': 'trace/v1', 'llmreplay.block_tokens': '512'})")
	want, _ := readAll(t, src)
	got, meta := readAll(t, out)
	if meta.BlockTokens != 512 || len(got) != len(want) || len(got) != 500 {
		t.Fatalf("read %d rows (want %d), meta %+v", len(got), len(want), meta)
	}
	for i := range want {
		w, g := want[i], got[i]
		if g.ID != w.ID || g.Arrival != w.Arrival || g.PromptTokens != w.PromptTokens || g.OutputTokens != w.OutputTokens || len(g.PrefixBlocks) != len(w.PrefixBlocks) || g.HasSession {
			t.Fatalf("row %d: %+v, want %+v", i, g, w)
		}
		for j := range w.PrefixBlocks {
			if g.PrefixBlocks[j] != w.PrefixBlocks[j] {
				t.Fatalf("row %d block %d differs", i, j)
			}
		}
	}
}

// TestDuckDBReadsImages: DuckDB reads every image column as written: the count, the size
// lists (null when the sizes are unknown) and image_tokens, row by row.
func TestDuckDBReadsImages(t *testing.T) {
	reqs := imageRequests()
	path := filepath.Join(t.TempDir(), "images.parquet")
	writeFile(t, path, Meta{}, reqs)
	rows := duckdbtest.Query(t, "SELECT request_id AS id, images AS n, image_widths AS w, image_heights AS h, image_tokens AS k, "+
		"len(image_widths) AS lw FROM read_parquet('"+path+"') ORDER BY request_id")
	if len(rows) != len(reqs) {
		t.Fatalf("duckdb reads %d rows", len(rows))
	}
	for i, row := range rows {
		r := reqs[i]
		if duckNum(t, row["id"]) != r.ID {
			t.Fatalf("row %d: %v", i, row)
		}
		if len(r.Images) == 0 {
			if row["n"] != nil || row["w"] != nil || row["h"] != nil {
				t.Errorf("row %d without images: %v", i, row)
			}
		} else if duckNum(t, row["n"]) != int64(len(r.Images)) {
			t.Errorf("row %d: images %v, want %d", i, row["n"], len(r.Images))
		}
		if len(r.Images) > 0 && !r.Images[0].Known() {
			if row["w"] != nil || row["h"] != nil {
				t.Errorf("row %d of unknown sizes: lists %v %v, want null", i, row["w"], row["h"])
			}
		} else if len(r.Images) > 0 {
			ws, hs := row["w"].([]any), row["h"].([]any)
			if len(ws) != len(r.Images) || len(hs) != len(r.Images) || duckNum(t, row["lw"]) != int64(len(r.Images)) {
				t.Fatalf("row %d: lists %v %v", i, ws, hs)
			}
			for k, im := range r.Images {
				if duckNum(t, ws[k]) != int64(im.Width) || duckNum(t, hs[k]) != int64(im.Height) {
					t.Errorf("row %d image %d: %v x %v, want %dx%d", i, k, ws[k], hs[k], im.Width, im.Height)
				}
			}
		}
		if r.HasImageTokens != (row["k"] != nil) || (r.HasImageTokens && duckNum(t, row["k"]) != int64(r.ImageTokens)) {
			t.Errorf("row %d: image_tokens %v, want %d (recorded %v)", i, row["k"], r.ImageTokens, r.HasImageTokens)
		}
	}
}

// TestDuckDBReadsParams: DuckDB reads the recording columns as written, null where a row
// has no value.
func TestDuckDBReadsParams(t *testing.T) {
	reqs := paramsRequests()
	path := filepath.Join(t.TempDir(), "params.parquet")
	writeFile(t, path, Meta{}, reqs)
	rows := duckdbtest.Query(t, "SELECT request_id AS id, api, max_tokens AS m, n, stream AS s FROM read_parquet('"+path+"') ORDER BY request_id")
	if len(rows) != len(reqs) {
		t.Fatalf("duckdb reads %d rows", len(rows))
	}
	for i, row := range rows {
		p := reqs[i].Params
		if p == nil {
			p = &Params{}
		}
		api, _ := row["api"].(string)
		opt := func(v any) int32 {
			if v == nil {
				return 0
			}
			return int32(duckNum(t, v))
		}
		s, hasS := row["s"].(bool)
		if got := (Params{API: api, MaxTokens: opt(row["m"]), N: opt(row["n"]), Stream: s, HasStream: hasS}); duckNum(t, row["id"]) != reqs[i].ID || got != *p ||
			(p.API == "") != (row["api"] == nil) || (p.HasStream != (row["s"] != nil)) {
			t.Errorf("row %d: duckdb reads %v, want %+v", i, row, *p)
		}
	}
}
