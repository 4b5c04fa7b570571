package results

import ()

// Result is the record of one due request: one row of a results file (the columns are the
// results contract's, package results; the journal writes and ReadFile reads them by name).
// All *NS fields are nanosecond offsets from the run start except ChunkNS, whose entries
// are offsets from SentNS. Integer fields documented as nullable hold Null (-1)
// when they have no value; Error "" and ChunkTokens nil are null.
type Result struct {
	RequestID          int64
	Shard              int32
	ScheduledNS        int64   // when it was due
	SentNS             int64   // when the request was written; Null if never sent
	FirstTokenNS       int64   // first chunk carrying output; Null if none
	EndNS              int64   // last chunk carrying output; Null if none
	ChunkNS            []int64 // every output chunk's arrival, from SentNS, stamped at read time
	ChunkTokens        []int32 // tokens per output chunk when the server said so for every chunk; else nil
	PromptTokens       int32   // target prompt length
	PromptTokensServer int32   // usage.prompt_tokens; Null if the server did not say
	OutputTokensTarget int32   // from the trace
	OutputTokens       int32   // generated tokens; Null if unknown
	OutputTokensSource string  // SourceUsage or SourceTokenizer; "" when OutputTokens is Null
	Status             Status
	HTTPStatus         int32  // Null when no response
	Error              string // short message, "" when none; never a credential

	// Conversations (results revision 1.1): Null when the trace row has
	// no session, the replay did not wait, or the server did not say.
	SessionID          int64 // the trace's session_id
	Turn               int32 // 0-based index of the request in its session, in trace order
	SessionWaitNS      int64 // sequential sessions: how long the turn waited for its predecessor's end beyond its trace time
	PromptTokensCached int32 // usage.prompt_tokens_details.cached_tokens

	// Agents (results revision 1.2): Null unless the row is an agent call with the value.
	GapNS                int64 // the gap the replay put between the last parent's end and this call
	RecordedArrivalNS    int64 // the trace's arrival_ns (trace time, not scaled)
	RecordedDurationNS   int64 // the trace's duration_ns: production's end-to-end time
	RecordedCachedTokens int32 // the trace's cached_tokens: production's cache hit

	// Reasoning (results revision 1.3).
	FirstAnswerNS         int64  // first chunk carrying answer output (not only reasoning); Null if none
	ReasoningTokens       int32  // output tokens that were reasoning; Null when nobody counted any
	ReasoningTokensSource string // SourceUsage, SourceChunkUsage or SourceTokenizer; "" when ReasoningTokens is Null

	// Images and requests that are not generation (results revision 1.4).
	Images      int32 // images the request sent; Null when none
	ImageTokens int32 // the prompt tokens those images count for under the run's image rule; Null when none
	Inputs      int32 // inputs of an embeddings request, documents of a rerank; Null for a generation
}

// NewResult returns a Result with every nullable field null.
func NewResult(id int64, shard int32, scheduledNS int64, promptTokens, outputTarget int32) *Result {
	return &Result{
		RequestID: id, Shard: shard, ScheduledNS: scheduledNS,
		SentNS: Null, FirstTokenNS: Null, EndNS: Null,
		PromptTokens: promptTokens, PromptTokensServer: Null,
		OutputTokensTarget: outputTarget, OutputTokens: Null, HTTPStatus: Null,
		SessionID: Null, Turn: Null, SessionWaitNS: Null, PromptTokensCached: Null,
		GapNS: Null, RecordedArrivalNS: Null, RecordedDurationNS: Null, RecordedCachedTokens: Null,
		FirstAnswerNS: Null, ReasoningTokens: Null,
		Images: Null, ImageTokens: Null, Inputs: Null,
	}
}

// TTFT returns first_token_ns - sent_ns in milliseconds; ok is false when either is null.
func (r *Result) TTFT() (ms float64, ok bool) {
	if r.SentNS == Null || r.FirstTokenNS == Null {
		return 0, false
	}
	return float64(r.FirstTokenNS-r.SentNS) / 1e6, true
}

// E2E returns end_ns - sent_ns in milliseconds; ok is false when either is null.
func (r *Result) E2E() (ms float64, ok bool) {
	if r.SentNS == Null || r.EndNS == Null {
		return 0, false
	}
	return float64(r.EndNS-r.SentNS) / 1e6, true
}

// TPOT returns (E2E - TTFT) / (output_tokens - 1) in milliseconds, defined for
// output_tokens > 1 (vLLM's and SGLang's definition).
func (r *Result) TPOT() (ms float64, ok bool) {
	ttft, ok1 := r.TTFT()
	e2e, ok2 := r.E2E()
	if !ok1 || !ok2 || r.OutputTokens == Null || r.OutputTokens < 2 {
		return 0, false
	}
	return (e2e - ttft) / float64(r.OutputTokens-1), true
}
