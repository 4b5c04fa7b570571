package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/internal/toolstest"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// TestE2EToolTokens replays traces whose requests send tools (trace synth --tool-tokens)
// through the command, against a chat server that counts every message's tokens plus,
// per tool, its description's tokens and an overhead: the simulated engine's rule (16)
// without --calibrate, and another (40 per tool) with it, and over completions, which
// takes no tools (they go into the text). Single
// requests, conversations (their history carries no tools) and agent calls (their context
// neither) each have every request ok and counted by the server exactly the trace's
// prompt tokens; the run metadata says which overhead was used.
func TestE2EToolTokens(t *testing.T) {
	dir := t.TempDir()
	traces := map[string][]string{
		"single": {"--rate", "50", "--count", "30", "--prompt-tokens", "uniform:200,900", "--output-tokens", "fixed:8"},
		"conversations": {"--rate", "50", "--count", "30", "--prompt-tokens", "uniform:50,200", "--output-tokens", "fixed:8",
			"--turns", "uniform:2,4", "--sessions", "4"},
		"agents": {"--agent-sessions", "3", "--rate", "20", "--agent-calls", "fixed:4", "--agent-first-prompt", "fixed:300",
			"--agent-append", "fixed:40", "--agent-fork", "0.5", "--agent-branches", "fixed:2",
			"--agent-branch-calls", "fixed:2", "--output-tokens", "fixed:8", "--prompt-max", "20000"},
	}
	for name, synth := range traces {
		tr := filepath.Join(dir, name+".parquet")
		args := append([]string{"trace", "synth", "--tool-tokens", "500", "--seed", "2", "-o", tr}, synth...)
		if msg, err := runArgs(t, args...); err != nil {
			t.Fatalf("%s: synth: %v %s", name, err, msg)
		}
		for _, c := range []struct {
			overhead, template int
			calibrate          bool
			api, want          string
		}{{16, 0, false, "chat", "(default: the simulated engine's rule"}, {40, 0, true, "chat", "measured by --calibrate"},
			{16, 0, false, "completions", "none: the completions API takes no tools"}} {
			s, err := toolstest.New(c.overhead, c.template)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(s)
			res := filepath.Join(dir, fmt.Sprintf("%s-%s-%d-res.parquet", name, c.api, c.overhead))
			rargs := []string{"replay", "--trace", tr, "--endpoint", srv.URL + "/v1", "--api", c.api, "--prompt-format", "text",
				"--speedup", "50", "--scrape", "none", "-q", "-o", res}
			if name == "agents" {
				rargs = append(rargs, "--gaps", "none")
			}
			if c.calibrate {
				rargs = append(rargs, "--calibrate")
			}
			var out, errb bytes.Buffer
			err = run(context.Background(), rargs, &out, &errb)
			srv.Close()
			if err != nil {
				t.Fatalf("%s: replay %v: %v\n%s", name, rargs, err, errb.String())
			}
			rs, meta, err := results.ReadFile(res)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) == 0 {
				t.Fatalf("%s: no records", name)
			}
			for _, r := range rs {
				if r.Status != results.StatusOK || r.PromptTokensServer != r.PromptTokens {
					t.Errorf("%s, %s, overhead %d: request %d: %s, served %d prompt tokens, the trace's %d", name, c.api, c.overhead, r.RequestID, r.Status, r.PromptTokensServer, r.PromptTokens)
				}
			}
			if name == "agents" && c.api == "chat" {
				checkJoins(t, tr, s.Messages())
			}
			if got := meta.Flags["tool-overhead"]; !strings.Contains(got, c.want) {
				t.Errorf("%s: metadata tool-overhead %q, want it to say %q", name, got, c.want)
			}
		}
	}
}

// checkJoins: a join's prompt shares with its first parent (a branch's tail) only the
// forking call's context, whose length its prefix_tokens gives counting the tools first:
// so it sends fewer messages than that tail, and at least one join was sent.
func checkJoins(t *testing.T, path string, msgs map[string]int) {
	t.Helper()
	byID := map[int64]int{}
	for k, v := range msgs {
		if k == wire.PreflightRequestID {
			continue
		}
		id, err := strconv.ParseInt(k[strings.LastIndexByte(k, '-')+1:], 10, 64)
		if err != nil {
			t.Fatalf("X-Request-Id %q", k)
		}
		byID[id] = v
	}
	r, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	joins := 0
	for r.Next() {
		q := r.Request()
		if q.Call == nil || len(q.Call.Parents) < 2 {
			continue
		}
		joins++
		if p := q.Call.Parents[0]; byID[q.ID] >= byID[p] {
			t.Errorf("join %d sends %d messages, its first parent %d sent %d: it took more than the fork's context", q.ID, byID[q.ID], p, byID[p])
		}
	}
	if joins == 0 {
		t.Error("the agent trace has no join")
	}
}
