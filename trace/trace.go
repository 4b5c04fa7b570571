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
	// Images are the images the request sends, in order; nil when it sends none. An
	// Image of 0x0 is one whose size the source does not give (the Azure multimodal trace
	// records counts only); the images of one request are all sized or all 0x0.
	Images []Image
	// ImageTokens is how many of PromptTokens the images count for, when the source says
	// (meaningful only when HasImageTokens); PromptTokens stays the whole prompt as the
	// server counts it, images included.
	ImageTokens    int32
	HasImageTokens bool
	// Call is what an agent trace records beyond the request: the calls it waits for, the
	// gap after them, production's duration, cache hit and reasoning (call.go); nil when
	// the row has none of it.
	Call *Call
	// Params are what a recorded request asked of production (params.go); nil when the
	// row has none of them.
	Params *Params
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
	if err := r.validateImages(); err != nil {
		return err
	}
	if r.Params != nil {
		if err := r.Params.validate(); err != nil {
			return err
		}
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

// Image is one image a request sends: its size in pixels, or 0x0 when the source does not
// give it (a replay then chooses the size: docs/trace-format.md, "Images").
type Image struct {
	Width, Height int32
}

// Known reports whether the image's size is known (not 0x0).
func (im Image) Known() bool { return im.Width != 0 || im.Height != 0 }

// Limits of the image columns: MaxImageSide bounds each side of a sized image (16384 is
// above what any vision processor takes, so a larger value is a unit or column mistake),
// and MaxImages the images of one request (the reader allocates a row's images from the
// count, so a corrupt count must not ask for gigabytes).
const (
	MaxImageSide = 16384
	MaxImages    = 1 << 16
)

// validateImages checks the image fields: at most MaxImages images, all sized within
// 1..MaxImageSide or all 0x0, and image_tokens within the prompt beside the tools.
func (r *Request) validateImages() error {
	if len(r.Images) > MaxImages {
		return fmt.Errorf("%s: %d, at most %d", ColImages, len(r.Images), MaxImages)
	}
	if len(r.Images) > 0 {
		known := r.Images[0].Known()
		for i, im := range r.Images {
			if im.Known() != known {
				return fmt.Errorf("%s: image %d is %dx%d but image 0 is %dx%d (sizes are known for every image of a request or for none)",
					ColImageWidths, i, im.Width, im.Height, r.Images[0].Width, r.Images[0].Height)
			}
			if known && (im.Width < 1 || im.Width > MaxImageSide) {
				return fmt.Errorf("%s: image %d is %d pixels wide, want 1..%d", ColImageWidths, i, im.Width, MaxImageSide)
			}
			if known && (im.Height < 1 || im.Height > MaxImageSide) {
				return fmt.Errorf("%s: image %d is %d pixels high, want 1..%d", ColImageHeights, i, im.Height, MaxImageSide)
			}
		}
	}
	if !r.HasImageTokens {
		return nil
	}
	switch {
	case r.ImageTokens < 0 || r.ImageTokens > r.PromptTokens:
		return fmt.Errorf("%s: %d not in [0, prompt_tokens %d] (the images' tokens are part of the prompt)", ColImageTokens, r.ImageTokens, r.PromptTokens)
	case r.ImageTokens > 0 && len(r.Images) == 0:
		return fmt.Errorf("%s: %d but the request has no images", ColImageTokens, r.ImageTokens)
	case int64(r.ImageTokens)+int64(r.Tools()) > int64(r.PromptTokens):
		return fmt.Errorf("%s: %d and %s %d are more than prompt_tokens %d together", ColImageTokens, r.ImageTokens, ColToolTokens, r.ToolTokens, r.PromptTokens)
	}
	return nil
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
