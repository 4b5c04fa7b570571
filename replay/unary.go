package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// Embeddings and rerank (wire.Kind.Unary; docs/replay.md, "Embeddings and rerank"): a
// trace row is one request of Options.Inputs inputs whose lengths add up to the row's
// prompt tokens, each built by the Prompter to its exact length as a text prompt is. A
// rerank request's first input is its query, of Options.QueryTokens; its documents share
// the rest. Nothing is asked of the output: the record has none.

// DefaultQueryTokens is --query-tokens' default: a rerank query is a search query, short
// next to its documents (a question of a sentence or two), and a fixed length keeps the
// documents' share of a row what the trace and --inputs make it.
const DefaultQueryTokens = 32

// SplitTokens returns the lengths of n inputs that together are total tokens, as even as
// can be: each total/n, the first total%n of them one more. Every input needs a token.
func SplitTokens(dst []int, total, n int) ([]int, error) {
	if n < 1 || total < n {
		return dst, fmt.Errorf("%d tokens cannot make %d inputs of a token or more", total, n)
	}
	q, r := total/n, total%n
	for i := range n {
		l := q
		if i < r {
			l++
		}
		dst = append(dst, l)
	}
	return dst, nil
}

// inputLengths returns the lengths of a row's inputs: --inputs N shares of its prompt
// tokens; for rerank (query > 0) the query first, then N documents sharing the rest.
func inputLengths(dst []int, promptTokens int32, inputs, query int) ([]int, error) {
	total := int(promptTokens)
	if query > 0 {
		if total < query+inputs {
			return dst, fmt.Errorf("prompt_tokens %d is fewer than the --query-tokens %d query and --inputs %d documents of a token or more", total, query, inputs)
		}
		dst = append(dst, query)
		total -= query
	}
	dst, err := SplitTokens(dst, total, inputs)
	if err != nil {
		return dst, fmt.Errorf("prompt_tokens %d is fewer than --inputs %d inputs of a token or more", promptTokens, inputs)
	}
	return dst, nil
}

// unaryScratch is the feed's reused space for a row's inputs (one preparer goroutine).
type unaryScratch struct {
	lens []int
	text []byte
	ends []int
	ins  [][]byte
}

// unaryRow prepares and hands over a row of a unary API; false when the run ends.
func (pr *feed) unaryRow(tr *trace.Request, due int64, warm bool) bool {
	prefix := pr.o.Client.DefaultBodyPrefix()
	if p, ok := pr.bodyPrefixes[tr.Model]; ok {
		prefix = p
	}
	body, err := pr.un.body(pr.o, prefix, tr)
	if err != nil {
		pr.fail(fmt.Errorf("replay: request %d: %w", tr.ID, err))
		return false
	}
	req := &request{Request: transport.Request{ID: tr.ID, DueNS: due, PromptTokens: tr.PromptTokens, Warmup: warm,
		Inputs: int32(pr.o.Inputs), Body: body}, sessionWaitNS: results.Null}
	runID := pr.preparedRunID.Load()
	if runID != nil {
		req.RunID = *runID
	}
	pr.tr.Prepare(&req.Request, runID == nil)
	if !pr.handOver(req) {
		return false
	}
	pr.prog.Planned.Add(1)
	return true
}

// body builds the body of row tr: its inputs' lengths, each input's text, the request.
func (s *unaryScratch) body(o *Options, prefix []byte, tr *trace.Request) ([]byte, error) {
	var err error
	if s.lens, err = inputLengths(s.lens[:0], tr.PromptTokens, o.Inputs, o.QueryTokens); err != nil {
		return nil, err
	}
	// Each input is a text prompt of its own request id, so that no two inputs of the run
	// are alike (nor prefixes of each other): the id maps (row, input) one to one.
	s.text, s.ends = s.text[:0], s.ends[:0]
	for i, l := range s.lens {
		in := trace.Request{ID: tr.ID*int64(len(s.lens)) + int64(i), PromptTokens: int32(l)}
		if s.text, err = o.Prompter.AppendPrompt(s.text, &in); err != nil {
			return nil, fmt.Errorf("input %d: %w", i, err)
		}
		s.ends = append(s.ends, len(s.text))
	}
	s.ins = s.ins[:0]
	for i, e := range s.ends {
		from := 0
		if i > 0 {
			from = s.ends[i-1]
		}
		s.ins = append(s.ins, s.text[from:e])
	}
	return o.Client.AppendInputsBody(make([]byte, 0, len(s.text)+len(prefix)+16*len(s.ins)+64), prefix, s.ins), nil
}

// validateUnary checks Options for a unary API.
func (o *Options) validateUnary() error {
	unary := o.Client.Unary()
	switch {
	case !unary && (o.Inputs != 0 || o.QueryTokens != 0):
		return fmt.Errorf("replay: inputs and query tokens are for the embeddings and rerank APIs, not %s", o.Client.Options().API)
	case !unary:
		return nil
	case o.Inputs < 1:
		return fmt.Errorf("replay: the %s API needs inputs (at least 1)", o.Client.Options().API)
	case (o.Client.Options().API == wire.APIRerank) != (o.QueryTokens > 0):
		return errors.New("replay: a rerank request has a query (query tokens > 0), and only a rerank request has one")
	case o.Sessions != "" && o.Sessions != SessionsIndependent:
		return fmt.Errorf("replay: the %s API sends batches of inputs, not conversations or agents", o.Client.Options().API)
	}
	return nil
}

// validateUnary checks the flags of a unary --api (and that a generation's has none of its
// own): a request of embeddings or rerank is one batch of inputs, with no output, no
// conversation, no tools.
func (c *Config) validateUnary(api wire.API) error {
	k, _ := wire.Lookup(api)
	if !k.Unary {
		if c.Inputs != 1 {
			return configErrorf("--inputs %d: only with --api embeddings or rerank (a generation request sends one prompt)", c.Inputs)
		}
		if c.QueryTokens != DefaultQueryTokens {
			return configErrorf("--query-tokens %d: only with --api rerank", c.QueryTokens)
		}
		return nil
	}
	switch {
	case c.Inputs < 1:
		return configErrorf("--inputs %d: must be at least 1", c.Inputs)
	case api == wire.APIRerank && c.QueryTokens < 1:
		return configErrorf("--query-tokens %d: must be at least 1", c.QueryTokens)
	case api != wire.APIRerank && c.QueryTokens != DefaultQueryTokens:
		return configErrorf("--query-tokens %d: only with --api rerank", c.QueryTokens)
	case c.Sessions == SessionsSequential || c.Sessions == SessionsDAG || c.AgentSessions > 0 || c.History != "" ||
		c.ThinkTime != "" && c.ThinkTime != "0" || c.Gaps != "":
		return configErrorf("--api %s: a request is one batch of inputs, not a conversation's turn or an agent's call; drop --sessions, --agent-sessions, --history, --think-time and --gaps (the trace's rows are replayed independently)", api)
	case c.Calibrate:
		return configErrorf("--calibrate: measures a generation API's prompt template; --api %s sends each input as built (the engine adds its own special tokens to each, which prompt_tokens_server shows)", api)
	}
	return nil
}

// unary checks, for a unary --api, the rows this run reads before anything is sent: each
// row's prompt tokens make its inputs (and query), and the trace has no tools (a
// generation's). A generation API has nothing to check.
func (p *preparer) unary(context.Context) error {
	if !p.unaryAPI() {
		return nil
	}
	cfg := p.cfg
	if p.src.HasValues(trace.ColToolTokens) {
		return configErrorf("--api %s: trace %s has tool_tokens: tool definitions are a generation request's; an embeddings or rerank request sends inputs only", p.api, p.meta.TraceFile)
	}
	scan, err := p.open()
	if err != nil {
		return err
	}
	defer scan.Close()
	query := p.queryTokens()
	var lens []int
	for row, limit := int64(1), cfg.scanRows(); scan.Next() && (limit == 0 || row <= limit); row++ {
		r := scan.Request()
		if _, err := inputLengths(lens[:0], r.PromptTokens, cfg.Inputs, query); err != nil {
			return configErrorf("trace %s row %d (request_id %d): %v; give fewer --inputs, or a trace of longer prompts", scan.Name(), row, r.ID, err)
		}
	}
	return scan.Err()
}

// unaryAPI reports whether the run's --api is a unary one.
func (p *preparer) unaryAPI() bool {
	k, ok := wire.Lookup(p.api)
	return ok && k.Unary
}

// queryTokens is Options.QueryTokens: --query-tokens for rerank, else 0.
func (p *preparer) queryTokens() int {
	if p.api == wire.APIRerank {
		return p.cfg.QueryTokens
	}
	return 0
}
