// Package trace holds llmreplay's trace record (one row per request, sorted by arrival),
// its Parquet schema (trace format v1, docs/trace-format.md), streaming readers and writers,
// importers for public trace formats, synthetic generators and transforms.
package trace

import (
	"fmt"
	"time"
)

// Format is the value of the llmreplay.format schema metadata key of a trace file.
const Format = "trace/v1"

// Schema metadata keys (docs/trace-format.md).
const (
	MetaFormat      = "llmreplay.format"
	MetaSource      = "llmreplay.source"
	MetaStartUnixNS = "llmreplay.start_unix_ns"
	MetaBlockTokens = "llmreplay.block_tokens"
	MetaGenerator   = "llmreplay.generator"
)

// Request is one row of a trace: a request that arrives Arrival after the trace start,
// with a prompt of PromptTokens tokens, asking for OutputTokens tokens.
type Request struct {
	ID           int64         // unique within the trace; kept by every transform
	Arrival      time.Duration // offset from the trace start; non-decreasing along a trace
	PromptTokens int32         // >= 1
	OutputTokens int32         // >= 1
	SessionID    int64         // conversation id; meaningful only when HasSession
	HasSession   bool
	// PrefixBlocks are ids of the prompt's leading blocks of Meta.BlockTokens tokens each;
	// two requests share their prompt prefix exactly as far as their leading ids are equal.
	// nil when the source has none.
	PrefixBlocks []int64
	Model        string // model or tenant column of the source; "" when absent
	Prompt       string // recorded prompt text; "" when absent
	// ToolTokens is how many of PromptTokens are the tool definitions the request sends
	// (an agent's tools, rendered by the server before the messages); meaningful only when
	// HasToolTokens. 0 and no value both send no tools.
	ToolTokens    int32
	HasToolTokens bool
	// Call is what an agent trace records beyond the request: the calls it waits for, the
	// gap after them, production's duration, cache hit and reasoning (call.go); nil when
	// the row has none of it.
	Call *Call
}

// Validate checks one request on its own (ordering is checked by readers and writers).
func (r *Request) Validate() error {
	switch {
	case r.Arrival < 0:
		return fmt.Errorf("arrival_ns: %d is negative", int64(r.Arrival))
	case r.PromptTokens < 1:
		return fmt.Errorf("prompt_tokens: %d, must be >= 1", r.PromptTokens)
	case r.OutputTokens < 1:
		return fmt.Errorf("output_tokens: %d, must be >= 1", r.OutputTokens)
	case r.HasToolTokens && (r.ToolTokens < 0 || r.ToolTokens > r.PromptTokens):
		return fmt.Errorf("%s: %d not in [0, prompt_tokens %d] (the tool definitions are part of the prompt)", ColToolTokens, r.ToolTokens, r.PromptTokens)
	}
	if r.Call != nil {
		return r.Call.validate(r)
	}
	return nil
}

// Tools returns the tokens of the tool definitions r sends: ToolTokens, or 0 when the
// trace has no value.
func (r *Request) Tools() int32 {
	if !r.HasToolTokens {
		return 0
	}
	return r.ToolTokens
}

// Meta is a trace file's schema metadata.
type Meta struct {
	Source      string // e.g. "azure-2023", "mooncake", "synth"
	StartUnixNS int64  // wall-clock time of arrival 0, when the source has one; else 0
	BlockTokens int    // tokens per prefix block when PrefixBlocks are set; else 0
	Generator   string // JSON: synth parameters and seed, enough to regenerate the file
	Transforms  string // JSON array: slice/speedup steps applied after import or synth
}

// Source is anything that yields requests in arrival order, in the shape of bufio.Scanner:
// Next advances, Request returns the current request (valid until the next call to Next),
// and Err reports the first error once Next returns false (nil at a normal end).
// trace.Reader implements it; so do in-memory slices in tests.
type Source interface {
	Next() bool
	Request() Request
	Err() error
}

// SliceSource is a Source over requests held in memory.
type SliceSource struct {
	reqs []Request
	i    int
}

// NewSliceSource returns a Source that yields reqs in order.
func NewSliceSource(reqs []Request) *SliceSource { return &SliceSource{reqs: reqs, i: -1} }

func (s *SliceSource) Next() bool       { s.i++; return s.i < len(s.reqs) }
func (s *SliceSource) Request() Request { return s.reqs[s.i] }
func (s *SliceSource) Err() error       { return nil }
