package main

import (
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/wire"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// TestReplayCalibrate: the in-process engine adds a chat template to every prompt; with
// --calibrate the replayer learns it and the server counts exactly the trace's lengths,
// without it every request is off by the template.
func TestReplayCalibrate(t *testing.T) {
	for _, calibrate := range []bool{false, true} {
		out := filepath.Join(t.TempDir(), "r.parquet")
		args := []string{"--api", "chat", "--prompt-format", "text", "--limit", "20", "--prewarm", "2", "-q", "-o", out}
		if calibrate {
			args = append(args, "--calibrate")
		}
		var stdout, stderr bytes.Buffer
		if err := runReplay(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("replay %v: %v\n%s", args, err, stderr.String())
		}
		res, meta, err := results.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		off := 0
		for _, r := range res {
			if r.PromptTokensServer != r.PromptTokens {
				off++
			}
		}
		if calibrate && (off != 0 || !strings.Contains(meta.Flags["calibration"], "chat via")) {
			t.Errorf("--calibrate: %d of %d requests counted differently by the server; calibration %q", off, len(res), meta.Flags["calibration"])
		}
		if !calibrate && off != len(res) {
			t.Errorf("without --calibrate only %d of %d requests were off: the test no longer shows a template", off, len(res))
		}
	}
}

// truncatingServer counts a prompt as Ollama's tiny model does (a token a builder word,
// plus BOS) and, as Ollama does with a prompt longer than its context, cuts it to context
// tokens and reports usage.prompt_tokens of what it kept. It has no /tokenize, so
// calibration counts through usage probes (stream false, max_tokens 1). Streamed requests
// carrying an X-Request-Id but the preflight's are the trace's: they are counted in sent.
// Every stream has max_tokens chunks.
func truncatingServer(context int, sent *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"object":"list","data":[{"id":"tiny"}]}`)
			return
		case "/v1/completions":
		default:
			http.NotFound(w, r)
			return
		}
		var b struct {
			Prompt    string `json:"prompt"`
			MaxTokens int    `json:"max_tokens"`
			Stream    bool   `json:"stream"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.MaxTokens < 1 {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		prompt := min(len(strings.Fields(b.Prompt))+1, context)
		if !b.Stream {
			fmt.Fprintf(w, `{"choices":[{"text":" w","finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":1}}`, prompt)
			return
		}
		if id := r.Header.Get("X-Request-Id"); id != "" && id != wire.PreflightRequestID {
			sent.Add(1)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range b.MaxTokens {
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" w\",\"finish_reason\":null}]}\n\n")
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", prompt, b.MaxTokens)
	})
}

// TestReplayCalibrateMaxError: a server that cuts the calibration's probes to a context of
// 2,048 tokens makes a fit whose held-out error is far above --calibrate-max-error: the
// run stops before any request of the trace reaches the server, and the error says the
// error found, the bound, that the count stopped growing, and what to do. The same server
// with a context that holds the probes calibrates within the bound and the run goes on;
// so does the truncating one when the bound is raised knowingly.
func TestReplayCalibrateMaxError(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.parquet")
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"trace", "synth", "--arrival", "constant", "--rate", "50", "--count", "5",
		"--prompt-tokens", "fixed:64", "--output-tokens", "fixed:4", "-o", tr}, &out, &errb); err != nil {
		t.Fatalf("synth: %v\n%s", err, errb.String())
	}
	for _, tc := range []struct {
		name    string
		context int
		extra   []string
		stops   bool
	}{
		{"truncated", 2048, nil, true},
		{"fits", 16384, nil, false},
		{"truncated, bound raised", 2048, []string{"--calibrate-max-error", "0.9"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent atomic.Int64
			hs := httptest.NewServer(truncatingServer(tc.context, &sent))
			defer hs.Close()
			args := append([]string{"--trace", tr, "--endpoint", hs.URL + "/v1", "--calibrate", "--scrape", "none", "--prewarm", "1", "-q",
				"-o", filepath.Join(t.TempDir(), "r.parquet")}, tc.extra...)
			var stdout, stderr bytes.Buffer
			err := runReplay(context.Background(), args, &stdout, &stderr)
			if !tc.stops {
				if err != nil || sent.Load() != 5 {
					t.Fatalf("replay: %v; %d requests of the trace reached the server, want 5\n%s", err, sent.Load(), stderr.String())
				}
				return
			}
			if err == nil {
				t.Fatalf("replay passed a calibration cut to the context; %d requests of the trace sent\n%s", sent.Load(), stderr.String())
			}
			if n := sent.Load(); n != 0 {
				t.Errorf("%d requests of the trace reached the server before the calibration stopped the run", n)
			}
			msg := err.Error()
			for _, want := range []string{"held-out error is", "above --calibrate-max-error 0.05 (5%)", "the server cuts prompts short",
				"count stopped growing at about 2048 tokens", "context of at least", "raise --calibrate-max-error", "without --calibrate"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the error does not say %q:\n%s", want, msg)
				}
			}
		})
	}
}

// TestReplayCalibrateMaxErrorFlag: a bound that is no relative error is refused, naming
// the flag, before anything is started.
func TestReplayCalibrateMaxErrorFlag(t *testing.T) {
	for _, v := range []string{"-0.01", "NaN", "+Inf"} {
		var stdout, stderr bytes.Buffer
		err := runReplay(context.Background(), []string{"--calibrate", "--calibrate-max-error", v, "-q"}, &stdout, &stderr)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--calibrate-max-error") {
			t.Errorf("--calibrate-max-error %s: %v", v, err)
		}
	}
}
