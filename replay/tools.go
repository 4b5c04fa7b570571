package replay

import (
	"fmt"
	"math"
	"sync"

	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// Tool definitions (docs/replay.md, "Tool definitions"): a row's tool_tokens are sent as a
// real tools array of one tool, whose description is built to make the server count the
// tools as that many prompt tokens; the prompt's text is what is left of prompt_tokens.

// DefaultToolOverheadTokens is the tokens a server is taken to add for one tool beyond
// its description's own when no calibration measured it: the simulated engine's rule
// (its description's cl100k tokens plus 16, for the name, the schema and the template's
// markers; docs/sim.md). A real engine renders tools through its chat template and adds
// another amount: --calibrate measures it (CalibrateTools).
const DefaultToolOverheadTokens = 16

// ToolOverhead is how a server counts one tool: Tokens + Ratio × the description's
// builder tokens.
type ToolOverhead struct {
	Tokens float64 // what the tool costs beyond its description
	Ratio  float64 // server tokens per builder token of the description; 0 means 1
	// Measured says the figures come from probes of the server (CalibrateTools), not the
	// default.
	Measured bool
}

// DefaultToolOverhead is the overhead used without calibration.
var DefaultToolOverhead = ToolOverhead{Tokens: DefaultToolOverheadTokens, Ratio: 1}

// String is the overhead as the run metadata records it (flag tool-overhead).
func (o ToolOverhead) String() string {
	how := "default: the simulated engine's rule, description + 16 tokens per tool; --calibrate measures a server's"
	if o.Measured {
		how = "measured by --calibrate"
	}
	return fmt.Sprintf("%.2f tokens per tool + %.4f x description tokens (%s)", o.Tokens, o.ratio(), how)
}

func (o ToolOverhead) ratio() float64 {
	if o.Ratio <= 0 {
		return 1
	}
	return o.Ratio
}

// toolRequestID is the builder's request id of tool descriptions: one text per length,
// whatever the request, so that requests with the same tool_tokens send byte-identical
// tools, as an agent sends the same tools on every call (and a prefix cache can serve
// them). Trace ids are non-negative and calibration's probes count down from -1<<40.
const toolRequestID = -1 << 50

// maxToolDescs bounds the descriptions kept: a trace has few distinct tool_tokens values
// (an agent's tools are the same on every call); past the bound one is built per request.
const maxToolDescs = 4096

// Tools builds the tools of requests: which part of a row's prompt_tokens goes as tools
// and which as the prompt's text. Safe for concurrent use.
type Tools struct {
	builder  *tokenize.Builder
	overhead ToolOverhead
	takes    bool // the API takes tools (wire.Encoder.TakesTools)

	mu    sync.Mutex
	descs map[int]*[]byte // builder tokens → the description, JSON-escaped
}

// NewTools returns the Tools of an API that takes tools or not (an API without tools,
// completions, gets every prompt token as text).
func NewTools(b *tokenize.Builder, overhead ToolOverhead, takesTools bool) *Tools {
	return &Tools{builder: b, overhead: overhead, takes: takesTools, descs: map[int]*[]byte{}}
}

// toolSplit is what split decides for one request.
type toolSplit struct {
	desc []byte // the description, escaped; nil: no tools
	sent int32  // the tokens the server is expected to count for the tools
}

// split returns r with PromptTokens cut to the prompt text's share, and the tools to
// send. A request without tools, or an API without them, or a nil t, keeps all its prompt
// tokens as text. Else the description has the builder tokens that make the server count
// the tools as tool_tokens (at least one: a tool cannot cost less than its overhead plus
// one token, and the text then gives up the difference), and the text is prompt_tokens
// less what the tools are counted, at least one token.
func (t *Tools) split(r *trace.Request) (trace.Request, toolSplit, error) {
	out := *r
	if t == nil || !t.takes || r.Tools() == 0 {
		return out, toolSplit{}, nil
	}
	k := max(1, int(math.Round((float64(r.Tools())-t.overhead.Tokens)/t.overhead.ratio())))
	k = min(k, tokenize.MaxPromptTokens)
	desc, err := t.desc(k)
	if err != nil {
		return out, toolSplit{}, fmt.Errorf("tools of request %d: %w", r.ID, err)
	}
	sent := int32(max(1, math.Round(t.overhead.Tokens+t.overhead.ratio()*float64(k))))
	out.PromptTokens = max(1, r.PromptTokens-sent)
	return out, toolSplit{desc: desc, sent: sent}, nil
}

// desc returns the description of k builder tokens, built once.
func (t *Tools) desc(k int) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d, ok := t.descs[k]; ok {
		return *d, nil
	}
	text, err := t.builder.AppendPrompt(nil, tokenize.PromptSpec{RequestID: toolRequestID, Tokens: k})
	if err != nil {
		return nil, err
	}
	d := wire.AppendJSONContent(make([]byte, 0, len(text)+16), text)
	if len(t.descs) < maxToolDescs {
		t.descs[k] = &d
	}
	return d, nil
}
