package replay

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/internal/toolstest"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// TestToolsSplit: a row's tool_tokens become a description of tool_tokens − overhead
// builder tokens (counted so by cl100k, the simulated engine's tokenizer) and its text
// keeps the rest of prompt_tokens; the same length gives the same bytes; tools below the
// overhead get a one-token description and the text pays the difference; an API without
// tools, or a row without them, keeps every token as text.
func TestToolsSplit(t *testing.T) {
	enc, b := testBuilder(t)
	tools := NewTools(b, DefaultToolOverhead, true)
	r := trace.Request{ID: 3, PromptTokens: 1000, OutputTokens: 1, ToolTokens: 300, HasToolTokens: true}
	text, s, err := tools.split(&r)
	if err != nil {
		t.Fatal(err)
	}
	desc := string(s.desc)
	if got := enc.Count(desc); got != 300-DefaultToolOverheadTokens || s.sent != 300 || text.PromptTokens != 700 {
		t.Errorf("tools 300: description of %d tokens, counted %d, text %d tokens; want 284, 300, 700", got, s.sent, text.PromptTokens)
	}
	r2 := r
	r2.ID = 99
	if _, s2, _ := tools.split(&r2); string(s2.desc) != desc {
		t.Error("two requests with the same tool_tokens send different tools")
	}
	small := r
	small.ToolTokens = 5
	text, s, _ = tools.split(&small)
	if enc.Count(string(s.desc)) != 1 || s.sent != DefaultToolOverheadTokens+1 || text.PromptTokens != 1000-DefaultToolOverheadTokens-1 {
		t.Errorf("tools 5: description %q, counted %d, text %d", s.desc, s.sent, text.PromptTokens)
	}
	// A measured overhead and ratio: the description is (T − Tokens)/Ratio builder tokens.
	m := NewTools(b, ToolOverhead{Tokens: 40, Ratio: 1.25, Measured: true}, true)
	text, s, _ = m.split(&r)
	if got := enc.Count(string(s.desc)); got != 208 || s.sent != 300 || text.PromptTokens != 700 {
		t.Errorf("measured: description of %d tokens, counted %d, text %d; want 208, 300, 700", got, s.sent, text.PromptTokens)
	}
	for name, c := range map[string]struct {
		tools *Tools
		r     trace.Request
	}{
		"completions": {NewTools(b, DefaultToolOverhead, false), r},
		"no value":    {tools, trace.Request{ID: 1, PromptTokens: 1000, OutputTokens: 1}},
		"zero":        {tools, trace.Request{ID: 1, PromptTokens: 1000, OutputTokens: 1, HasToolTokens: true}},
		"nil":         {nil, r},
	} {
		text, s, err := c.tools.split(&c.r)
		if err != nil || s.desc != nil || s.sent != 0 || text.PromptTokens != 1000 {
			t.Errorf("%s: %v, %+v, text %d", name, err, s, text.PromptTokens)
		}
	}
}

// TestCalibrateTools: against servers that count a tool as its description's tokens plus
// 16 (the simulated engine's rule) or plus 40 (another template), under a chat template of
// 0 or 7 tokens, the measured overhead is the server's, and the description's tokens
// count one each; a server that ignores tools fails with a message saying so.
func TestCalibrateTools(t *testing.T) {
	_, b := testBuilder(t)
	for _, c := range []struct{ overhead, template int }{{16, 0}, {40, 7}} {
		s, err := toolstest.New(c.overhead, c.template)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s)
		base, _ := wire.BaseURL(srv.URL)
		o, err := CalibrateTools(context.Background(), Endpoint{Base: base, API: wire.APIChat, Model: "tools-model"}, b)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if o.Tokens != float64(c.overhead) || o.Ratio != 1 || !o.Measured {
			t.Errorf("server overhead %d, template %d: measured %+v", c.overhead, c.template, o)
		}
		if !strings.Contains(o.String(), "measured by --calibrate") {
			t.Errorf("metadata %q does not say it was measured", o)
		}
	}
	s, _ := toolstest.New(0, 0)
	s.IgnoreTools = true
	srv := httptest.NewServer(s)
	defer srv.Close()
	base, _ := wire.BaseURL(srv.URL)
	if _, err := CalibrateTools(context.Background(), Endpoint{Base: base, API: wire.APIChat, Model: "m"}, b); err == nil || !strings.Contains(err.Error(), "does not count the tools") {
		t.Errorf("a server that ignores tools: %v", err)
	}
}
