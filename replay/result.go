package replay

import (
	"github.com/llmreplay/llmreplay/replay/results"
)

// Result is the record of one due request: one row of a results file (the columns are the
// results contract's, package results; the journal writes and ReadFile reads them by name).
// All *NS fields are nanosecond offsets from the run start except ChunkNS, whose entries
// are offsets from SentNS. Integer fields documented as nullable hold results.Null (-1)
// when they have no value; Error "" and ChunkTokens nil are null.
type Result struct {
	RequestID          int64
	Shard              int32
	ScheduledNS        int64   // when it was due
	SentNS             int64   // when the request was written; results.Null if never sent
	FirstTokenNS       int64   // first chunk carrying output; results.Null if none
	EndNS              int64   // last chunk carrying output; results.Null if none
	ChunkNS            []int64 // every output chunk's arrival, from SentNS, stamped at read time
	ChunkTokens        []int32 // tokens per output chunk when the server said so for every chunk; else nil
	PromptTokens       int32   // target prompt length
	PromptTokensServer int32   // usage.prompt_tokens; results.Null if the server did not say
	OutputTokensTarget int32   // from the trace
	OutputTokens       int32   // generated tokens; results.Null if unknown
	OutputTokensSource string  // results.SourceUsage or results.SourceTokenizer; "" when OutputTokens is results.Null
	Status             results.Status
	HTTPStatus         int32  // results.Null when no response
	Error              string // short message, "" when none; never a credential

	// Conversations (issue 14; results revision 1.1): results.Null when the trace row has
	// no session, the replay did not wait, or the server did not say.
	SessionID          int64 // the trace's session_id
	Turn               int32 // 0-based index of the request in its session, in trace order
	SessionWaitNS      int64 // sequential sessions: how long the turn waited for its predecessor's end beyond its trace time
	PromptTokensCached int32 // usage.prompt_tokens_details.cached_tokens
}

// newResult returns a Result with every nullable field null.
func newResult(id int64, shard int32, scheduledNS int64, promptTokens, outputTarget int32) *Result {
	return &Result{
		RequestID: id, Shard: shard, ScheduledNS: scheduledNS,
		SentNS: results.Null, FirstTokenNS: results.Null, EndNS: results.Null,
		PromptTokens: promptTokens, PromptTokensServer: results.Null,
		OutputTokensTarget: outputTarget, OutputTokens: results.Null, HTTPStatus: results.Null,
		SessionID: results.Null, Turn: results.Null, SessionWaitNS: results.Null, PromptTokensCached: results.Null,
	}
}

// newResultOf returns the record of req for shard: newResult's, with the trace row's
// session id (results.Null for a row without a session).
func newResultOf(req *request, shard int32) *Result {
	res := newResult(req.id, shard, req.dueNS, req.promptTokens, req.outputTokens)
	if req.hasSession {
		res.SessionID = req.session
	}
	return res
}

// TTFT returns first_token_ns - sent_ns in milliseconds; ok is false when either is null.
func (r *Result) TTFT() (ms float64, ok bool) {
	if r.SentNS == results.Null || r.FirstTokenNS == results.Null {
		return 0, false
	}
	return float64(r.FirstTokenNS-r.SentNS) / 1e6, true
}

// E2E returns end_ns - sent_ns in milliseconds; ok is false when either is null.
func (r *Result) E2E() (ms float64, ok bool) {
	if r.SentNS == results.Null || r.EndNS == results.Null {
		return 0, false
	}
	return float64(r.EndNS-r.SentNS) / 1e6, true
}

// TPOT returns (E2E - TTFT) / (output_tokens - 1) in milliseconds, defined for
// output_tokens > 1 (vLLM's and SGLang's definition).
func (r *Result) TPOT() (ms float64, ok bool) {
	ttft, ok1 := r.TTFT()
	e2e, ok2 := r.E2E()
	if !ok1 || !ok2 || r.OutputTokens == results.Null || r.OutputTokens < 2 {
		return 0, false
	}
	return (e2e - ttft) / float64(r.OutputTokens-1), true
}
