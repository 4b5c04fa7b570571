package replay

import (
	"context"
	"fmt"
	"math"

	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/wire"
)

// HistoryOverhead is what a conversation's earlier turns cost the server beyond their
// text, for the arithmetic of actual history (conversations and agents' contexts;
// docs/prompts.md, "Conversations"). A chat template counts a request of messages as
//
//	c + d_user x user messages + d_assistant x assistant messages + the messages' text
//
// where c is the request's own (a BOS, the reply's "<|im_start|>assistant\n") and d a
// message's markers. --calibrate fits a one-user-message prompt: its Overhead is c +
// d_user, Request here. Exchange is what each earlier answer and user message pair adds
// besides their text, d_assistant + d_user, measured with a prompt of three messages
// (CalibrateHistory); 0 for completions, whose turns are concatenated text and whose
// per-request tokens (a BOS) are counted once.
//
// A turn's new text of n tokens (its part of the trace's prompt_tokens, which the
// calibration built as n - Request server tokens of text) then counts in every later
// request of the conversation as n - Request + Exchange: its text, and the markers it
// and the answer after it keep as earlier messages. The zero HistoryOverhead (no
// --calibrate) counts the builder's text alone, as the builder built it: the server adds
// its template to every request on top.
type HistoryOverhead struct {
	Request  float64 // what a prompt of one user message adds to its text (the calibration's Overhead)
	Exchange float64 // what each earlier answer and user message pair adds besides its text
	Ratio    float64 // server tokens per builder token (the calibration's Ratio)
	Measured bool    // the figures come from --calibrate
}

// shift is what a turn's new text counts in later requests beyond its part of its own
// request's prompt_tokens: Exchange - Request, rounded to a whole token.
func (o HistoryOverhead) shift() int32 {
	if !o.Measured {
		return 0
	}
	return int32(math.Round(o.Exchange - o.Request))
}

// least is the least part of the trace's prompt_tokens a turn's new text can have: one
// builder token, which a calibrated server counts with the prompt's own template.
func (o HistoryOverhead) least() int32 {
	if !o.Measured {
		return 1
	}
	return max(1, int32(math.Round(o.Request+o.Ratio)))
}

// String is the overhead as the run metadata records it (flag history-overhead).
func (o HistoryOverhead) String() string {
	if !o.Measured {
		return "none: without --calibrate a turn's history counts the builder's text alone; the server adds its template to every request"
	}
	return fmt.Sprintf("%.2f tokens per request (the template of a prompt of one user message) + %.2f per earlier answer and user message (measured by --calibrate)", o.Request, o.Exchange)
}

// The conversation probes: a user message, an answer, a user message, each of
// historyProbe builder tokens, of request ids historyRequestID and below (clear of the
// calibration's and the tools' probe texts).
var historyProbe = [3]int{256, 128, 256}

const historyRequestID = -1<<50 - 1<<20

// CalibrateHistory measures the server's template for conversations (HistoryOverhead):
// a prompt of one user message against the same message after a user message and an
// answer, counted by cal's method; the difference beyond the two earlier texts' builder
// tokens (at cal's Ratio) is Exchange. An API without messages (completions) has none.
func CalibrateHistory(ctx context.Context, e Endpoint, b *tokenize.Builder, cal tokenize.Calibration) (HistoryOverhead, error) {
	o := HistoryOverhead{Request: cal.Overhead, Ratio: cal.Ratio, Measured: true}
	if e.API == wire.APICompletions {
		return o, nil
	}
	var texts [3]string
	for i, k := range historyProbe {
		t, err := b.AppendPrompt(nil, tokenize.PromptSpec{RequestID: historyRequestID - int64(i), Tokens: k})
		if err != nil {
			return o, err
		}
		texts[i] = string(t)
	}
	p := newProber(e)
	one, _, err := p.Count(ctx, cal.Method, texts[2])
	if err != nil {
		return o, fmt.Errorf("%s: conversation overhead: the probe of one message: %v", wire.SafeEndpoint(e.Base), err)
	}
	p.Before = texts[:2]
	three, _, err := p.Count(ctx, cal.Method, texts[2])
	if err != nil {
		return o, fmt.Errorf("%s: conversation overhead: the probe of three messages: %v", wire.SafeEndpoint(e.Base), err)
	}
	earlier := cal.Ratio * float64(historyProbe[0]+historyProbe[1])
	if float64(three-one) < earlier/2 {
		return o, fmt.Errorf("%s: conversation overhead: prompt tokens %d for one message and %d with two earlier ones of %d and %d builder tokens before it: the server does not count a conversation's earlier messages, so actual history cannot have the trace's lengths; replay with --history synthetic",
			wire.SafeEndpoint(e.Base), one, three, historyProbe[0], historyProbe[1])
	}
	o.Exchange = float64(three-one) - earlier
	return o, nil
}
