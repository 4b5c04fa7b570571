package results

import (
	"github.com/llmreplay/llmreplay/internal/duckdbtest"

	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/prom"
)

// TestResultsReadByDuckDB: an independent engine reads the results file's columns, types,
// nulls, lists and metadata as the contract says.
func TestResultsReadByDuckDB(t *testing.T) {
	dir := t.TempDir()
	jp := filepath.Join(dir, "r.parquet.journal")
	j, err := CreateJournal(jp, &RunMeta{RunID: "feed", Mode: ModeOpen, Flags: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range testRecords(30) {
		// Revision 1.1: sessions of 3 turns for the first 15 rows, the later turns
		// waiting i·1000 ns; cached tokens on every other sent row; the rest null.
		if i < 15 {
			r.SessionID, r.Turn = int64(i/3), int32(i%3)
			if i%3 > 0 {
				r.SessionWaitNS = int64(i) * 1000
			}
		}
		if r.Status == StatusOK && i%2 == 0 {
			r.PromptTokensCached = 4
		}
		// Revision 1.2: the first 6 rows are agent calls; gaps on the 4 that are not first.
		if i < 6 {
			r.RecordedArrivalNS, r.RecordedDurationNS, r.RecordedCachedTokens = int64(i)*1e9, 5e8, int32(i)
			if i%3 > 0 {
				r.GapNS = 2e9
			}
		}
		// Revision 1.3: the ok rows with i%4 == 1 reasoned for their first 2 tokens
		// (1, 5, 13, 17, 25, 29); the answer began with the second chunk.
		if r.Status == StatusOK && i%4 == 1 {
			r.FirstAnswerNS, r.ReasoningTokens, r.ReasoningTokensSource = r.SentNS+200, 2, SourceUsage
		}
		// Revision 1.4: rows 20..23 sent i-19 images of 5 tokens each; rows 24..29 were
		// embeddings requests of i-22 inputs (2..7).
		if i >= 20 && i < 24 {
			r.Images, r.ImageTokens = int32(i-19), int32(i-19)*5
		}
		if i >= 24 {
			r.Inputs = int32(i - 22)
		}
		j.Add(r)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "r.parquet")
	if _, err := ConvertJournal(jp, out); err != nil {
		t.Fatal(err)
	}
	rows := duckdbtest.Query(t, fmt.Sprintf(`SELECT count(*)::INT AS n,
		count(sent_ns)::INT AS sent, sum(len(chunk_ns))::INT AS chunks, count(chunk_tokens)::INT AS with_tokens,
		sum(list_sum(chunk_tokens))::INT AS tokens, count(*) FILTER (status = 'dropped')::INT AS dropped,
		count(http_status)::INT AS http, round(avg(ttft_ms), 6) AS ttft, round(avg(tpot_ms), 6) AS tpot,
		count(session_id)::INT AS sessions, count(DISTINCT session_id)::INT AS distinct_sessions, sum(turn)::INT AS turns,
		count(session_wait_ns)::INT AS waited, sum(session_wait_ns)::INT AS wait_ns,
		count(prompt_tokens_cached)::INT AS cached_rows, sum(prompt_tokens_cached)::INT AS cached,
		count(gap_ns)::INT AS gaps, sum(gap_ns)::BIGINT AS gap_ns, max(recorded_arrival_ns + recorded_duration_ns)::BIGINT AS rec_end,
		count(recorded_duration_ns)::INT AS rec_rows, sum(recorded_cached_tokens)::INT AS rec_cached,
		count(first_answer_ns)::INT AS answered, avg(first_answer_ns - sent_ns) AS ttfa_ns, sum(reasoning_tokens)::INT AS reasoning,
		count(*) FILTER (reasoning_tokens_source = 'usage')::INT AS reasoning_usage, count(reasoning_tokens_source)::INT AS reasoning_sources,
		count(images)::INT AS with_images, sum(images)::INT AS images, sum(image_tokens)::INT AS image_tokens,
		count(inputs)::INT AS with_inputs, sum(inputs)::INT AS inputs
		FROM '%s'`, out))
	// Rows 0..29: ok unless i%3 == 0 (20 ok); sessions i/3 for i < 15, turn i%3, waits on
	// turns 1 and 2: i in {1,2,4,5,7,8,10,11,13,14}, summing to 75 µs; cached on the ok rows
	// with even i (2,4,8,10,14,16,20,22,26,28: 10 rows of 4).
	want := map[string]any{"n": 30.0, "sent": 20.0, "chunks": 60.0, "with_tokens": 20.0, "tokens": 100.0,
		"dropped": 10.0, "http": 20.0, "ttft": 0.0001, "tpot": 0.00005,
		"sessions": 15.0, "distinct_sessions": 5.0, "turns": 15.0, "waited": 10.0, "wait_ns": 75000.0,
		"cached_rows": 10.0, "cached": 40.0,
		"gaps": 4.0, "gap_ns": "8000000000", "rec_end": "5500000000", "rec_rows": 6.0, "rec_cached": 15.0,
		"answered": 6.0, "ttfa_ns": 200.0, "reasoning": 12.0, "reasoning_usage": 6.0, "reasoning_sources": 6.0,
		"with_images": 4.0, "images": 10.0, "image_tokens": 50.0, "with_inputs": 6.0, "inputs": 27.0}
	for k, w := range want {
		if rows[0][k] != w {
			t.Errorf("%s = %v, want %v", k, rows[0][k], w)
		}
	}
	types := duckdbtest.Query(t, fmt.Sprintf(`SELECT column_name AS c, column_type AS t FROM (DESCRIBE SELECT * FROM '%s')`, out))
	wantTypes := []string{"BIGINT", "INTEGER", "BIGINT", "BIGINT", "BIGINT", "BIGINT", "BIGINT[]", "INTEGER[]",
		"INTEGER", "INTEGER", "INTEGER", "INTEGER", "VARCHAR", "VARCHAR", "INTEGER", "VARCHAR", "DOUBLE", "DOUBLE", "DOUBLE",
		"BIGINT", "INTEGER", "BIGINT", "INTEGER",
		"BIGINT", "BIGINT", "BIGINT", "INTEGER",
		"BIGINT", "INTEGER", "VARCHAR",
		"INTEGER", "INTEGER", "INTEGER"}
	for i, f := range Schema.Fields() {
		if i >= len(types) || types[i]["c"] != f.Name || types[i]["t"] != wantTypes[i] {
			t.Errorf("column %d: got %v, want %s %s", i, types[min(i, len(types)-1)], f.Name, wantTypes[i])
		}
	}
	md := duckdbtest.Query(t, fmt.Sprintf(`SELECT decode(key) AS k, decode(value) AS v FROM parquet_kv_metadata('%s') WHERE decode(key) LIKE 'llmreplay.%%'`, out))
	got := map[string]string{}
	for _, r := range md {
		got[r["k"].(string)] = r["v"].(string)
	}
	if got[MetaFormat] != Format || got[MetaRun] == "" {
		t.Errorf("metadata seen by DuckDB: %v", got)
	}
}

// TestMetricsReadByDuckDB: DuckDB reads a metrics file (types, the labels map, the run
// metadata) and joins it to the results file by time: each request takes the last sample
// scraped at or before its sent_ns (an ASOF join on the shared run clock).
func TestMetricsReadByDuckDB(t *testing.T) {
	dir := t.TempDir()
	run := &RunMeta{RunID: "feed", Mode: ModeOpen, Flags: map[string]string{}}
	jp := filepath.Join(dir, "r.parquet.journal")
	j, err := CreateJournal(jp, run)
	if err != nil {
		t.Fatal(err)
	}
	want := 0.0
	for i, r := range testRecords(30) {
		j.Add(r)
		if r.Status == StatusOK {
			want += float64(i / 5) // sent at i·1000+50 ns: the scrape of 5000·(i/5) ns is the last before it
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "r.parquet")
	if _, err := ConvertJournal(jp, out); err != nil {
		t.Fatal(err)
	}
	mp := MetricsPath(out)
	mj, err := CreateMetricsJournal(mp+JournalSuffix, run)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 7 { // scrapes at 0, 5 µs ... 30 µs; the gauge holds k
		text := fmt.Sprintf("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} %d\n", k)
		samples, err := prom.Parse(strings.NewReader(text), nil)
		if err != nil {
			t.Fatal(err)
		}
		own := ScrapeRows("", time.Millisecond, len(samples))
		mj.AddSamples(int64(k)*5000, "http://h:8000/metrics", samples, own[:])
	}
	if err := mj.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ConvertMetricsJournal(mp+JournalSuffix, mp); err != nil {
		t.Fatal(err)
	}
	rows := duckdbtest.Query(t, fmt.Sprintf(`SELECT count(*)::INT AS n, sum(m.value) AS running, count(DISTINCT m.t_ns)::INT AS scrapes,
		min(m.labels['model_name']) AS model
		FROM '%s' r ASOF JOIN (SELECT * FROM '%s' WHERE metric = 'vllm:num_requests_running') m ON r.sent_ns >= m.t_ns
		WHERE r.status = 'ok'`, out, mp))
	if rows[0]["n"] != 20.0 || rows[0]["running"] != want || rows[0]["scrapes"] != 6.0 || rows[0]["model"] != "m" {
		t.Errorf("ASOF join: %v, want 20 rows, running %v over 6 scrapes, model m", rows[0], want)
	}
	own := duckdbtest.Query(t, fmt.Sprintf(`SELECT type, count(*)::INT AS n, sum(value) AS v FROM '%s' WHERE metric = '%s' GROUP BY type`, mp, MetricScrapeUp))
	if len(own) != 1 || own[0]["type"] != MetricTypeScrape || own[0]["n"] != 7.0 || own[0]["v"] != 7.0 {
		t.Errorf("scrape_up rows: %v", own)
	}
	types := duckdbtest.Query(t, fmt.Sprintf(`SELECT column_name AS c, column_type AS t FROM (DESCRIBE SELECT * FROM '%s')`, mp))
	wantTypes := []string{"BIGINT", "VARCHAR", "VARCHAR", "VARCHAR", "MAP(VARCHAR, VARCHAR)", "DOUBLE"}
	for i, f := range MetricsSchema.Fields() {
		if i >= len(types) || types[i]["c"] != f.Name || types[i]["t"] != wantTypes[i] {
			t.Errorf("column %d: got %v, want %s %s", i, types[min(i, len(types)-1)], f.Name, wantTypes[i])
		}
	}
	md := duckdbtest.Query(t, fmt.Sprintf(`SELECT decode(value) AS v FROM parquet_kv_metadata('%s') WHERE decode(key) = '%s'`, mp, MetaFormat))
	if len(md) != 1 || md[0]["v"] != MetricsFormat {
		t.Errorf("format seen by DuckDB: %v", md)
	}
}
