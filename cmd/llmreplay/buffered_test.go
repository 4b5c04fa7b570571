package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/transport"
)

// sseServer streams max_tokens completion chunks like vLLM, flushing every burst chunks
// (1: each chunk as it is made, as an engine does; 8: as a proxy that buffers SSE does)
// and pausing pause after each flush.
func sseServer(burst int, pause time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			MaxTokens int `json:"max_tokens"`
		}
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &b); err != nil || b.MaxTokens < 1 {
			http.Error(w, "bad request", 400)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := 1; i <= b.MaxTokens; i++ {
			fmt.Fprint(w, "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" tok\",\"finish_reason\":null}]}\n\n")
			if i%burst == 0 || i == b.MaxTokens {
				f.Flush()
				time.Sleep(pause)
			}
		}
		fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[],\"usage\":{\"prompt_tokens\":16,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", b.MaxTokens)
		f.Flush()
	})
}

// TestReplayFlagsBufferedStream: a server that flushes its stream in bursts of 8 chunks
// (as nginx's proxy buffering does) is flagged "stream buffered between server and
// client" in the report replay prints and in analyze --json, with either HTTP client;
// a server that flushes each chunk is not. The servers' pauses only space the reads: the
// test asserts the rule's verdict on what the client stamped, never a duration.
func TestReplayFlagsBufferedStream(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.parquet")
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"trace", "synth", "--arrival", "constant", "--rate", "50", "--count", "10",
		"--prompt-tokens", "fixed:16", "--output-tokens", "fixed:32", "-o", tr}, &out, &errb); err != nil {
		t.Fatalf("synth: %v\n%s", err, errb.String())
	}
	for _, tc := range []struct {
		name     string
		burst    int
		pause    time.Duration
		buffered bool
	}{
		// Bursts 250 ms apart: above the rule's gap bound (10 ms, or the run's lateness p99
		// if load alongside makes the replayer later than that). 60 ms was not: under the
		// race detector with the other packages' tests and two CPU burners alongside, a
		// run's first requests went out 84 ms late (lateness p99 83.7 ms), and the bursts
		// fell under the bound.
		{"burst", 8, 250 * time.Millisecond, true},
		{"per-chunk", 1, 3 * time.Millisecond, false},
	} {
		hs := httptest.NewServer(sseServer(tc.burst, tc.pause))
		clients := []string{transport.HTTPClientNetHTTP}
		if autoClient() == transport.HTTPClientRaw { // the raw client is built on linux only
			clients = append(clients, transport.HTTPClientRaw)
		}
		for _, client := range clients {
			t.Run(tc.name+"/"+client, func(t *testing.T) {
				res := filepath.Join(t.TempDir(), "r.parquet")
				out.Reset()
				errb.Reset()
				args := []string{"replay", "--trace", tr, "--endpoint", hs.URL + "/v1", "--model", "m", "--http-client", client, "-q", "-o", res}
				if err := run(context.Background(), args, &out, &errb); err != nil {
					t.Fatalf("replay: %v\n%s", err, errb.String())
				}
				report := out.String()
				if i := strings.Index(report, "stream buffered:"); i >= 0 {
					t.Log(strings.SplitN(report[i:], "\n", 2)[0])
				}
				if want := "stream buffered: " + map[bool]string{true: "YES", false: "no"}[tc.buffered]; !strings.Contains(report, want) {
					t.Errorf("replay's report lacks %q:\n%s", want, report)
				}
				if got := strings.Contains(report, "stream buffered between server and client"); got != tc.buffered {
					t.Errorf("warning printed: %v, want %v:\n%s", got, tc.buffered, report)
				}
				out.Reset()
				if err := run(context.Background(), []string{"analyze", "--json", res}, &out, &errb); err != nil {
					t.Fatalf("analyze: %v\n%s", err, errb.String())
				}
				var j struct {
					Flags struct {
						StreamBuffered bool `json:"stream_buffered"`
						Evidence       struct {
							Streams       int64   `json:"streams"`
							BurstyStreams int64   `json:"bursty_streams"`
							ChunksPerRead float64 `json:"chunks_per_read"`
						} `json:"stream_buffered_evidence"`
					} `json:"flags"`
				}
				if err := json.Unmarshal(out.Bytes(), &j); err != nil {
					t.Fatal(err)
				}
				e := j.Flags.Evidence
				t.Logf("%s: %d of %d streams bursty, %.2f chunks per read", client, e.BurstyStreams, e.Streams, e.ChunksPerRead)
				if j.Flags.StreamBuffered != tc.buffered || e.Streams != 10 {
					t.Errorf("analyze --json: stream_buffered %v over %d streams, want %v over 10", j.Flags.StreamBuffered, e.Streams, tc.buffered)
				}
			})
		}
		hs.Close()
	}
}
