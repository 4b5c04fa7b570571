package trace

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/stats"
	mstats "github.com/montanaflynn/stats"
)

// Lengths summarises a length column: mean and population standard deviation by
// montanaflynn/stats; percentiles by stats.Type7, which interpolates linearly between
// order statistics (numpy's and pandas' default): the q-quantile of n sorted values
// x₀..xₙ₋₁ is x_⌊h⌋ + (h−⌊h⌋)(x_⌊h⌋₊₁ − x_⌊h⌋) with h = (n−1)q.
type Lengths struct {
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"` // population standard deviation
	Min  int32   `json:"min"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  int32   `json:"max"`
	Sum  int64   `json:"sum"`
}

// Info is what `trace info` reports about a trace.
type Info struct {
	Meta  Meta  `json:"meta"`
	Count int64 `json:"count"`
	// Span is the last arrival minus the first.
	Span time.Duration `json:"span_ns"`
	// MeanRatePerSecond = MeanRate(Count, Span) = (Count − 1) / Span, the reciprocal of the
	// mean inter-arrival gap (0 when Count < 2 or Span is 0).
	MeanRatePerSecond float64 `json:"mean_rate_per_s"`
	// InterArrivalCV is the population SD of the gaps between consecutive arrivals over
	// their mean (both by montanaflynn/stats): 1 for a Poisson process, 0 for a constant
	// rate, > 1 bursty.
	InterArrivalCV float64 `json:"interarrival_cv"`
	// Dispersion1s and Dispersion60s are indexes of dispersion, Var/Mean of the request
	// counts in consecutive bins of 1 s and 60 s from the first arrival (every bin up to
	// the last arrival's, empty ones included): 1 for Poisson, > 1 bursty.
	Dispersion1s  float64 `json:"dispersion_1s"`
	Dispersion60s float64 `json:"dispersion_60s"`
	Prompt        Lengths `json:"prompt_tokens"`
	Output        Lengths `json:"output_tokens"`
	Sessions      int64   `json:"sessions"` // distinct session ids (0 without sessions)
	// PrefixBlockRefs counts prefix block ids over all rows, UniqueBlocks distinct ones;
	// ReusableBlockShare = 1 − Unique/Refs is the share of prompt blocks an infinite
	// prefix cache could serve from cache (every first occurrence is a miss).
	PrefixBlockRefs    int64   `json:"prefix_block_refs"`
	UniqueBlocks       int64   `json:"unique_blocks"`
	ReusableBlockShare float64 `json:"reusable_block_share"`
	// Agent is the shape of an agent trace (shape.go); nil when no row has agent columns.
	Agent *AgentShape `json:"agent,omitempty"`
	// Tools is what the trace says of its requests' tool definitions; nil when no row has
	// a tool_tokens value.
	Tools *ToolsInfo `json:"tools,omitempty"`
	// Images is what the trace says of its requests' images; nil when no row sends one
	// or records image_tokens.
	Images *ImagesInfo `json:"images,omitempty"`
	// Params is what a recorded trace says of its requests' API and parameters; nil when
	// no row has a recording column's value.
	Params   *ParamsInfo `json:"params,omitempty"`
	Warnings []string    `json:"warnings,omitempty"`
}

// ImagesInfo summarises the image columns.
type ImagesInfo struct {
	// WithImages counts the rows that send at least one image, Share = WithImages / Count,
	// Total the images over every row.
	WithImages int64   `json:"with_images"`
	Share      float64 `json:"share"`
	Total      int64   `json:"total"`
	// PerRequest is the spread of the image count over the rows that send images.
	PerRequest Lengths `json:"per_request"`
	// Sized counts the images whose size is known (not 0x0); Width and Height are the
	// spreads of their sides in pixels, nil when no image is sized.
	Sized  int64    `json:"sized"`
	Width  *Lengths `json:"width,omitempty"`
	Height *Lengths `json:"height,omitempty"`
	// Recorded counts the rows with an image_tokens value; Tokens is its spread over
	// those of them that send images (nil when none), and PromptShare
	// = Σ image_tokens / Σ prompt_tokens over every row.
	Recorded    int64    `json:"recorded"`
	Tokens      *Lengths `json:"tokens,omitempty"`
	PromptShare float64  `json:"prompt_share"`
}

// imagesAcc accumulates ImagesInfo row by row: 4 bytes per row with images, 8 per sized
// image, 4 per row with image tokens.
type imagesAcc struct {
	counts, widths, heights, tokens []int32
	total, recorded, tokenSum       int64
}

func (a *imagesAcc) add(r *Request) {
	if r.HasImageTokens {
		a.recorded++
		a.tokenSum += int64(r.ImageTokens)
	}
	if len(r.Images) == 0 {
		return
	}
	a.counts = append(a.counts, int32(len(r.Images)))
	a.total += int64(len(r.Images))
	if r.HasImageTokens {
		a.tokens = append(a.tokens, r.ImageTokens)
	}
	for _, im := range r.Images {
		if im.Known() {
			a.widths = append(a.widths, im.Width)
			a.heights = append(a.heights, im.Height)
		}
	}
}

// info returns the summary, nil when no row sends images or records image tokens.
func (a *imagesAcc) info(count, promptSum int64) *ImagesInfo {
	if len(a.counts) == 0 && a.recorded == 0 {
		return nil
	}
	ii := &ImagesInfo{WithImages: int64(len(a.counts)), Share: float64(len(a.counts)) / float64(count), Total: a.total,
		Sized: int64(len(a.widths)), Recorded: a.recorded, PromptShare: float64(a.tokenSum) / float64(promptSum)}
	opt := func(v []int32) *Lengths {
		if len(v) == 0 {
			return nil
		}
		l := summarise(v)
		return &l
	}
	if len(a.counts) > 0 {
		ii.PerRequest = summarise(a.counts)
	}
	ii.Width, ii.Height, ii.Tokens = opt(a.widths), opt(a.heights), opt(a.tokens)
	return ii
}

// writeText prints the images lines of trace info.
func (ii *ImagesInfo) writeText(b *strings.Builder, count int64) {
	fmt.Fprintf(b, "images     %.1f %% of requests send images (%d of %d; %d images)", 100*ii.Share, ii.WithImages, count, ii.Total)
	if ii.WithImages > 0 {
		p := ii.PerRequest
		fmt.Fprintf(b, "; per request mean %.2f, p50 %.1f, p99 %.1f, max %d", p.Mean, p.P50, p.P99, p.Max)
	}
	b.WriteString("\n")
	switch {
	case ii.Width != nil:
		fmt.Fprintf(b, "           sizes p50 %.0f x %.0f pixels (width x height; %d of %d images sized", ii.Width.P50, ii.Height.P50, ii.Sized, ii.Total)
		if ii.Sized < ii.Total {
			b.WriteString(", the others 0x0: unknown")
		}
		b.WriteString(")\n")
	case ii.Total > 0:
		fmt.Fprintf(b, "           sizes unknown (0x0: the trace gives counts only)\n")
	}
	if ii.Recorded > 0 {
		fmt.Fprintf(b, "           image tokens %.1f %% of prompt tokens (%d rows record image_tokens)", 100*ii.PromptShare, ii.Recorded)
		if t := ii.Tokens; t != nil {
			fmt.Fprintf(b, "; per request with images p50 %.1f, p99 %.1f, max %d", t.P50, t.P99, t.Max)
		}
		b.WriteString("\n")
	}
}

// ToolsInfo summarises the tool_tokens column.
type ToolsInfo struct {
	// Recorded counts the rows with a tool_tokens value, WithTools those whose value is
	// above 0 (they send a tools array), and Share = WithTools / Count.
	Recorded  int64   `json:"recorded"`
	WithTools int64   `json:"with_tools"`
	Share     float64 `json:"share"`
	// Tokens is the spread of tool_tokens over the rows that send tools.
	Tokens Lengths `json:"tokens"`
	// PromptShare = Σ tool_tokens / Σ prompt_tokens over every row: the part of the
	// prompt tokens sent that are tool definitions.
	PromptShare float64 `json:"prompt_share"`
}

// binCounter accumulates the sum and sum of squares of per-bin counts. The index of
// dispersion is computed here, not by montanaflynn/stats: the library needs every bin's
// count in memory, and the number of bins is span/width, bounded by no row count (a week
// at 1 s is 604,800 bins; one stray arrival years out would be billions), while this
// needs three numbers.
type binCounter struct {
	width      int64
	bin        int64
	cur        int64
	sum, sumSq float64
}

func (b *binCounter) add(off int64) {
	k := off / b.width
	if k != b.bin {
		b.sumSq += float64(b.cur * b.cur)
		b.cur, b.bin = 0, k
	}
	b.cur++
	b.sum++
}

func (b *binCounter) dispersion(span int64) float64 {
	nb := float64(span/b.width + 1)
	sumSq := b.sumSq + float64(b.cur*b.cur)
	mean := b.sum / nb
	if mean == 0 {
		return math.NaN()
	}
	return (sumSq/nb - mean*mean) / mean
}

// ComputeInfo reads src to its end and summarises it. It checks the calls' dependencies
// with DAGCheck (naming the file when src has a Name) and fails on the first bad row.
// Memory: 16 bytes per row (the two length columns and the inter-arrival gaps, then one
// length column as float64 at a time), plus a set of distinct session ids and prefix
// block ids; for each row with a session, DAGCheck's id and session and the agent
// shape's state; for rows with images, imagesAcc's; 4 bytes per row with max_tokens
// (docs/trace-format.md, "trace info", gives the measured total).
func ComputeInfo(ctx context.Context, src Source, meta Meta) (Info, error) {
	info := Info{Meta: meta}
	var (
		prompts, outputs []int32
		first, last      int64
		gaps             []float64
		b1               = binCounter{width: int64(time.Second)}
		b60              = binCounter{width: int64(time.Minute)}
		sessions         = map[int64]struct{}{}
		blocks           = map[int64]struct{}{}
		shape            = newShapeAcc()
		tools            []int32 // tool_tokens of the rows that send tools
		toolRows         int64   // rows with a tool_tokens value
		images           imagesAcc
		params           paramsAcc
		name             = "(in memory)"
	)
	if n, ok := src.(interface{ Name() string }); ok {
		name = n.Name()
	}
	dag := NewDAGCheck(name)
	for src.Next() {
		r := src.Request()
		if err := dag.Add(&r); err != nil {
			return info, err
		}
		shape.add(&r)
		a := int64(r.Arrival)
		if info.Count == 0 {
			first = a
		} else {
			gaps = append(gaps, float64(a-last))
		}
		last = a
		b1.add(a - first)
		b60.add(a - first)
		prompts = append(prompts, r.PromptTokens)
		if r.HasToolTokens {
			toolRows++
			if r.ToolTokens > 0 {
				tools = append(tools, r.ToolTokens)
			}
		}
		images.add(&r)
		params.add(&r)
		outputs = append(outputs, r.OutputTokens)
		if r.HasSession {
			sessions[r.SessionID] = struct{}{}
		}
		for _, id := range r.PrefixBlocks {
			blocks[id] = struct{}{}
		}
		info.PrefixBlockRefs += int64(len(r.PrefixBlocks))
		info.Count++
		if info.Count%65536 == 0 {
			if err := ctx.Err(); err != nil {
				return info, err
			}
		}
	}
	if err := src.Err(); err != nil {
		return info, err
	}
	if info.Count == 0 {
		info.Warnings = append(info.Warnings, "the trace is empty")
		return info, nil
	}
	span := last - first
	info.Span = time.Duration(span)
	info.MeanRatePerSecond, _ = MeanRate(info.Count, info.Span)
	if gapMean, err := mstats.Mean(gaps); err == nil && gapMean > 0 {
		gapSD, _ := mstats.StandardDeviationPopulation(gaps)
		info.InterArrivalCV = gapSD / gapMean
	}
	gaps = nil
	info.Dispersion1s = b1.dispersion(span)
	info.Dispersion60s = b60.dispersion(span)
	info.Prompt = summarise(prompts)
	if toolRows > 0 {
		ti := &ToolsInfo{Recorded: toolRows, WithTools: int64(len(tools)), Share: float64(len(tools)) / float64(info.Count)}
		if len(tools) > 0 {
			ti.Tokens = summarise(tools)
			ti.PromptShare = float64(ti.Tokens.Sum) / float64(info.Prompt.Sum)
		}
		info.Tools = ti
	}
	info.Images = images.info(info.Count, info.Prompt.Sum)
	info.Params = params.info(info.Count)
	info.Output = summarise(outputs)
	info.Sessions = int64(len(sessions))
	info.Agent = shape.shape()
	info.UniqueBlocks = int64(len(blocks))
	if info.PrefixBlockRefs > 0 {
		info.ReusableBlockShare = 1 - float64(info.UniqueBlocks)/float64(info.PrefixBlockRefs)
	}
	if info.Count < 100 {
		info.Warnings = append(info.Warnings, fmt.Sprintf("only %d requests: rates, CV and p99 are rough", info.Count))
	}
	if span < int64(time.Minute) {
		info.Warnings = append(info.Warnings, "span under 60 s: dispersion_60s is from a single bin")
	}
	return info, nil
}

// summarise returns the Lengths of non-empty v.
func summarise(v []int32) Lengths {
	l := Lengths{Min: v[0], Max: v[0]}
	x := make([]float64, len(v))
	for i, n := range v {
		l.Sum += int64(n)
		l.Min, l.Max = min(l.Min, n), max(l.Max, n)
		x[i] = float64(n)
	}
	l.Mean, _ = mstats.Mean(x)
	l.SD, _ = mstats.StandardDeviationPopulation(x)
	slices.Sort(x)
	l.P50, l.P90, l.P99 = stats.Type7(x, 0.5), stats.Type7(x, 0.9), stats.Type7(x, 0.99)
	return l
}

// WriteText renders info for people.
func (info Info) WriteText(w io.Writer, name string) error {
	var b strings.Builder
	m := info.Meta
	fmt.Fprintf(&b, "trace      %s\n", name)
	src := m.Source
	if src == "" {
		src = "(unknown)"
	}
	fmt.Fprintf(&b, "source     %s\n", src)
	if m.StartUnixNS != 0 {
		fmt.Fprintf(&b, "start      %s\n", time.Unix(0, m.StartUnixNS).UTC().Format("2006-01-02 15:04:05.000000000 UTC"))
	}
	fmt.Fprintf(&b, "requests   %d\n", info.Count)
	fmt.Fprintf(&b, "span       %.3f s (%s)\n", info.Span.Seconds(), info.Span.Round(time.Millisecond))
	fmt.Fprintf(&b, "mean rate  %.4g req/s\n", info.MeanRatePerSecond)
	fmt.Fprintf(&b, "burstiness inter-arrival CV %.3f; index of dispersion %.3g at 1 s, %.3g at 60 s (Poisson: 1, 1, 1)\n",
		info.InterArrivalCV, info.Dispersion1s, info.Dispersion60s)
	fmt.Fprintf(&b, "\n%-14s %10s %10s %8s %10s %10s %10s %8s\n", "tokens", "mean", "sd", "min", "p50", "p90", "p99", "max")
	for _, l := range []struct {
		n string
		v Lengths
	}{{"prompt", info.Prompt}, {"output", info.Output}} {
		fmt.Fprintf(&b, "%-14s %10.1f %10.1f %8d %10.1f %10.1f %10.1f %8d\n", l.n, l.v.Mean, l.v.SD, l.v.Min, l.v.P50, l.v.P90, l.v.P99, l.v.Max)
	}
	fmt.Fprintf(&b, "(percentiles: linear interpolation between order statistics)\n")
	if info.Sessions > 0 {
		fmt.Fprintf(&b, "\nsessions   %d (%.2f requests each)\n", info.Sessions, float64(info.Count)/float64(info.Sessions))
	}
	if info.PrefixBlockRefs > 0 {
		fmt.Fprintf(&b, "prefix     %d block refs, %d unique blocks of %d tokens: %.1f %% reusable with an infinite prefix cache\n",
			info.PrefixBlockRefs, info.UniqueBlocks, m.BlockTokens, 100*info.ReusableBlockShare)
	}
	if t := info.Tools; t != nil {
		fmt.Fprintf(&b, "tools      %.1f %% of requests send tool definitions (%d of %d; %d rows record tool_tokens)",
			100*t.Share, t.WithTools, info.Count, t.Recorded)
		if t.WithTools > 0 {
			fmt.Fprintf(&b, "; tool tokens p50 %.1f, p99 %.1f, max %d; %.1f %% of prompt tokens", t.Tokens.P50, t.Tokens.P99, t.Tokens.Max, 100*t.PromptShare)
		}
		b.WriteString("\n")
	}
	if info.Images != nil {
		info.Images.writeText(&b, info.Count)
	}
	if info.Params != nil {
		info.Params.writeText(&b, info.Count)
	}
	if info.Agent != nil {
		info.Agent.writeText(&b)
	}
	if m.Generator != "" {
		fmt.Fprintf(&b, "generator  %s\n", m.Generator)
	}
	if m.Transforms != "" {
		fmt.Fprintf(&b, "transforms %s\n", m.Transforms)
	}
	for _, wn := range info.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", wn)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
