package trace

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow/go/v15/arrow/array"
)

// Column names of the recording revision of trace/v1 (all nullable): what a recorded
// request asked of production beyond its lengths (docs/trace-format.md, "Recorded
// requests").
const (
	ColAPI       = "api"
	ColMaxTokens = "max_tokens"
	ColN         = "n"
	ColStream    = "stream"
)

// APIs are the values the api column takes: the API kinds llmreplay speaks, by their
// --api names. They are strings checked against this list, not wire.API, because trace
// sits below wire in the import rule (docs/design.md) and a file's column is a string
// whatever the program reading it knows; a test holds the list equal to wire.APIs().
var APIs = []string{"completions", "chat", "messages", "responses", "embeddings", "rerank"}

// Params are what a recorded request asked of production that shapes its load: the API
// it called, its output cap, how many choices and whether it streamed. A replay today
// sends every row through its --api, streamed, one choice, with output_tokens as the
// forced length: Params are the production record, for analysis and for what a later
// replay may honour.
type Params struct {
	API       string // one of APIs; "" when unknown
	MaxTokens int32  // the max_tokens (or the API's name for it) sent; 0: none sent
	N         int32  // choices asked for; 0: the field was not sent (one choice)
	// Stream is the stream field's value, meaningful only when HasStream (the request
	// sent the field; without it the API answers in one body).
	Stream, HasStream bool
}

// validate checks p on its own.
func (p *Params) validate() error {
	switch {
	case p.API != "" && !slices.Contains(APIs, p.API):
		return fmt.Errorf("%s: %q, want one of %v or null", ColAPI, p.API, APIs)
	case p.MaxTokens < 0:
		return fmt.Errorf("%s: %d, must be >= 1 (null: none sent)", ColMaxTokens, p.MaxTokens)
	case p.N < 0:
		return fmt.Errorf("%s: %d, must be >= 1 (null: not sent)", ColN, p.N)
	case p.Stream && !p.HasStream:
		return fmt.Errorf("%s: Stream set without HasStream", ColStream)
	}
	return nil
}

// ParamsInfo summarises the recording columns for trace info.
type ParamsInfo struct {
	// Recorded counts the rows with any recording value; APIs counts the rows of each api
	// ("" for rows without one).
	Recorded int64            `json:"recorded"`
	APIs     map[string]int64 `json:"apis"`
	// Streamed counts the rows that sent stream true, StreamShare = Streamed / Count;
	// Multi the rows that asked for more than one choice, MultiShare = Multi / Count.
	Streamed    int64   `json:"streamed"`
	StreamShare float64 `json:"stream_share"`
	Multi       int64   `json:"n_over_1"`
	MultiShare  float64 `json:"n_over_1_share"`
	// MaxTokens is the spread of max_tokens over the rows that sent it (nil when none).
	MaxTokens *Lengths `json:"max_tokens,omitempty"`
}

// appendParams appends the recording columns of p: null where p has no value.
func appendParams(b *array.RecordBuilder, p *Params) {
	p = cmp.Or(p, &noParams)
	appendStr(b.Field(colParams).(*array.StringBuilder), p.API)
	appendOpt32(b.Field(colParams+1).(*array.Int32Builder), cmp.Or(p.MaxTokens, Unknown)) // 0: null
	appendOpt32(b.Field(colParams+2).(*array.Int32Builder), cmp.Or(p.N, Unknown))
	if sb := b.Field(colParams + 3).(*array.BooleanBuilder); p.HasStream {
		sb.Append(p.Stream)
	} else {
		sb.AppendNull()
	}
}

// readParams sets req's Params from row i, nil when every recording column of it is null.
// A max_tokens or n of 0 or less is refused here: in Params 0 stands for the null.
func (c *readerCols) readParams(i int, req *Request) error {
	var p Params
	if c.api != nil && c.api.IsValid(i) {
		p.API = c.api.Value(i)
		if k := slices.Index(APIs, p.API); k >= 0 {
			p.API = APIs[k] // the constant, not the record's bytes, which are released
		} else {
			p.API = strings.Clone(p.API) // Validate names it
		}
	}
	for _, f := range []struct {
		a    *array.Int32
		name string
		v    *int32
	}{{c.maxTokens, ColMaxTokens, &p.MaxTokens}, {c.nCount, ColN, &p.N}} {
		if f.a != nil && f.a.IsValid(i) {
			if *f.v = f.a.Value(i); *f.v < 1 {
				return fmt.Errorf("%s: %d, must be >= 1 (null: not sent)", f.name, *f.v)
			}
		}
	}
	if c.stream != nil && c.stream.IsValid(i) {
		p.Stream, p.HasStream = c.stream.Value(i), true
	}
	if p != (Params{}) {
		req.Params = &p
	}
	return nil
}

var noParams Params

// paramsAcc accumulates ParamsInfo row by row: 4 bytes per row with max_tokens.
type paramsAcc struct {
	pi   ParamsInfo
	maxT []int32
}

func (a *paramsAcc) add(r *Request) {
	p := cmp.Or(r.Params, &noParams)
	if a.pi.APIs == nil {
		a.pi.APIs = map[string]int64{}
	}
	a.pi.APIs[p.API]++
	if r.Params != nil {
		a.pi.Recorded++
	}
	if p.Stream {
		a.pi.Streamed++
	}
	if p.N > 1 {
		a.pi.Multi++
	}
	if p.MaxTokens > 0 {
		a.maxT = append(a.maxT, p.MaxTokens)
	}
}

// info returns the summary, nil when no row records any of the columns.
func (a *paramsAcc) info(count int64) *ParamsInfo {
	if a.pi.Recorded == 0 {
		return nil
	}
	pi := a.pi
	pi.StreamShare, pi.MultiShare = float64(pi.Streamed)/float64(count), float64(pi.Multi)/float64(count)
	if len(a.maxT) > 0 {
		l := summarise(a.maxT)
		pi.MaxTokens = &l
	}
	return &pi
}

// writeText prints the recording lines of trace info: the API mix in the order of APIs.
func (pi *ParamsInfo) writeText(b *strings.Builder, count int64) {
	fmt.Fprintf(b, "recorded   %d of %d requests record their API or parameters; api", pi.Recorded, count)
	sep := " "
	for _, a := range append(slices.Clone(APIs), "") {
		if n := pi.APIs[a]; n > 0 {
			fmt.Fprintf(b, "%s%s %.1f %%", sep, cmp.Or(a, "(none)"), 100*float64(n)/float64(count))
			sep = ", "
		}
	}
	fmt.Fprintf(b, "\n           streamed %.1f %%, n > 1 %.1f %%", 100*pi.StreamShare, 100*pi.MultiShare)
	if m := pi.MaxTokens; m != nil {
		fmt.Fprintf(b, "; max_tokens min %d, p50 %.1f, p90 %.1f, p99 %.1f, max %d", m.Min, m.P50, m.P90, m.P99, m.Max)
	}
	b.WriteString("\n")
}
