package analysis

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// promptRun is 40 ok requests of 451 target prompt tokens whose server counts server(i).
func promptRun(server func(i int) int32) []row {
	var rows []row
	for i := range 40 {
		r := okRow(int64(i), int64(i)*10*ms_, 100*ms_, 120*ms_)
		r.prompt, r.promptServer = 451, p32(server(i))
		rows = append(rows, r)
	}
	return rows
}

// TestPromptOffTargetFlag: a run whose server counted its prompts at 4% of their targets
// (a server that truncated them, as Ollama did to 691 of 18,038 tokens) is flagged at the
// top of the text and HTML reports, saying what it means and what to do, and in the JSON
// flags; a run whose server counts are within the bound (a BOS token each, or 4.5% more
// on every request) is not, though the token reconciliation still counts the differences.
func TestPromptOffTargetFlag(t *testing.T) {
	cases := []struct {
		name    string
		server  func(i int) int32
		flagged bool
		off     int64
		top     string // in the text report's first lines; "" for no alert
	}{
		{"truncated to 4% of the targets", func(int) int32 { return 18 }, true, 40,
			"PROMPT TOKENS OFF TARGET: the server counted 720 prompt tokens against a target of 18040 (-96.0%, bound ±5.0%); 40 of 40 requests off by more than 5.0% each. TTFT and the token rates describe the prompts the server processed, not the trace's: check the model's context length (a server that truncates prompts silently counts fewer) and run with --calibrate."},
		{"a template of 40 tokens", func(int) int32 { return 491 }, true, 40,
			"PROMPT TOKENS OFF TARGET: the server counted 19640 prompt tokens against a target of 18040 (+8.9%, bound ±5.0%); 40 of 40 requests off by more than 5.0% each. TTFT and the token rates describe the prompts the server processed, not the trace's: run with --calibrate (a chat template or another tokenizer counts more)."},
		{"a BOS token each", func(int) int32 { return 452 }, false, 0, ""},
		{"4.5% more each", func(int) int32 { return 471 }, false, 0, ""},
		{"a few truncated", func(i int) int32 {
			if i < 1 {
				return 18
			}
			return 451
		}, false, 1, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Analyze(load(t, promptRun(c.server)), DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			if r.Flags.PromptOffTarget != c.flagged || r.Tokens.PromptOff != c.off {
				t.Errorf("flagged %v, %d requests off; want %v, %d", r.Flags.PromptOffTarget, r.Tokens.PromptOff, c.flagged, c.off)
			}
			var text, js, html bytes.Buffer
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if err := r.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			if err := r.WriteHTML(&html); err != nil {
				t.Fatal(err)
			}
			// The alert is the line after the run line, before the first figure.
			head := strings.SplitN(text.String(), "\nRequests:", 2)[0]
			if c.top != "" && !strings.Contains(head, "\n"+c.top+"\n") {
				t.Errorf("text report's head:\n%s\nwant the line\n%s", head, c.top)
			}
			if c.top == "" && strings.Contains(text.String(), "OFF TARGET") {
				t.Errorf("alert in a run within the bound:\n%s", head)
			}
			wantLine := "  prompt tokens off target: " + yesno(c.flagged) + " ("
			if !strings.Contains(text.String(), "\nFlags\n") || !strings.Contains(text.String(), wantLine) {
				t.Errorf("no flag line %q in the text report", wantLine)
			}
			var m struct {
				Flags struct {
					PromptOffTarget bool `json:"prompt_off_target"`
					Evidence        struct {
						Requests    int64 `json:"requests"`
						RequestsOff int64 `json:"requests_off"`
					} `json:"prompt_off_target_evidence"`
				} `json:"flags"`
			}
			if err := json.Unmarshal(js.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			if m.Flags.PromptOffTarget != c.flagged || m.Flags.Evidence.Requests != 40 || m.Flags.Evidence.RequestsOff != c.off {
				t.Errorf("JSON flags %+v", m.Flags)
			}
			h := html.String()
			alertAt, tableAt := strings.Index(h, `<p class="warn flag">PROMPT TOKENS OFF TARGET`), strings.Index(h, "<table>")
			if c.flagged != (alertAt >= 0) || (alertAt >= 0 && alertAt > tableAt) {
				t.Errorf("HTML alert at %d, first table at %d; flagged %v", alertAt, tableAt, c.flagged)
			}
			if !strings.Contains(h, "<th>prompt tokens off target</th>") {
				t.Error("no flag row in the HTML headline table")
			}
		})
	}
}
