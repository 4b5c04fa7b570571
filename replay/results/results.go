// Package results is the results contract of llmreplay (docs/results-format.md) and the
// record beside its codecs: the column names, the Arrow schema with its nullability, the
// request statuses, the run metadata and its JSON, the metadata keys, the null convention,
// a check of a file's schema by column name; and Result (one row), the crash-safe journal
// that writes results and metrics, its conversion to Parquet, Open (how every reader opens
// a results file: its kind, its run metadata, its columns) and ReadFile. The replayer and
// the analysis share this one definition. A column added in a later revision is added to the
// columns table below, and nowhere else in this package.
package results

import (
	"fmt"

	"github.com/apache/arrow/go/v15/arrow"
)

// Format is the value of the MetaFormat schema metadata key of a results file and of its
// journal.
const Format = "results/v1"

// Schema metadata keys of results files.
const (
	MetaFormat = "llmreplay.format" // Format
	MetaRun    = "llmreplay.run"    // RunMeta as JSON
)

// Column names of results/v1.
const (
	ColRequestID          = "request_id"
	ColShard              = "shard"
	ColScheduledNS        = "scheduled_ns"
	ColSentNS             = "sent_ns"
	ColFirstTokenNS       = "first_token_ns"
	ColEndNS              = "end_ns"
	ColChunkNS            = "chunk_ns"
	ColChunkTokens        = "chunk_tokens"
	ColPromptTokens       = "prompt_tokens"
	ColPromptTokensServer = "prompt_tokens_server"
	ColOutputTokensTarget = "output_tokens_target"
	ColOutputTokens       = "output_tokens"
	ColOutputTokensSource = "output_tokens_source"
	ColStatus             = "status"
	ColHTTPStatus         = "http_status"
	ColError              = "error"
	ColTTFTMS             = "ttft_ms"
	ColTPOTMS             = "tpot_ms"
	ColE2EMS              = "e2e_ms"

	// Revision 1.1 (conversations): null when the trace row has no session, the
	// turn did not wait (or the replay was not sequential) or the server did not say.
	ColSessionID          = "session_id"
	ColTurn               = "turn"
	ColSessionWaitNS      = "session_wait_ns"
	ColPromptTokensCached = "prompt_tokens_cached"

	// Revision 1.2 (agents): null unless the trace row is an agent call that has the value.
	ColGapNS                = "gap_ns"
	ColRecordedArrivalNS    = "recorded_arrival_ns"
	ColRecordedDurationNS   = "recorded_duration_ns"
	ColRecordedCachedTokens = "recorded_cached_tokens"

	// Revision 1.3 (reasoning measured apart): null when the stream carried no answer
	// output, or no reasoning that anyone counted.
	ColFirstAnswerNS         = "first_answer_ns"
	ColReasoningTokens       = "reasoning_tokens"
	ColReasoningTokensSource = "reasoning_tokens_source"

	// Revision 1.4 (images and requests that are not generation): null for a request
	// that sent no images, or that was a generation.
	ColImages      = "images"
	ColImageTokens = "image_tokens"
	ColInputs      = "inputs"
)

// Column is one column of the contract.
type Column struct {
	Name     string
	Type     arrow.DataType
	Nullable bool
	// Since is the minor revision of results/v1 that added the column: 0 for the columns
	// of results/v1 itself, which every file has; a later column may be missing from an
	// older file, and a reader then reads it as null (so a later column is nullable).
	Since int
}

// Required reports whether every results file has the column (it came in revision 1.0).
func (c Column) Required() bool { return c.Since == 0 }

// columns is the contract, in the order the writer writes the columns. Readers find them
// by name. An additive revision appends its columns here, nullable, with its Since.
var columns = []Column{
	{Name: ColRequestID, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColShard, Type: arrow.PrimitiveTypes.Int32},
	{Name: ColScheduledNS, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColSentNS, Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: ColFirstTokenNS, Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: ColEndNS, Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: ColChunkNS, Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int64)},
	{Name: ColChunkTokens, Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: ColPromptTokens, Type: arrow.PrimitiveTypes.Int32},
	{Name: ColPromptTokensServer, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: ColOutputTokensTarget, Type: arrow.PrimitiveTypes.Int32},
	{Name: ColOutputTokens, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: ColOutputTokensSource, Type: arrow.BinaryTypes.String},
	{Name: ColStatus, Type: arrow.BinaryTypes.String},
	{Name: ColHTTPStatus, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: ColError, Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: ColTTFTMS, Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: ColTPOTMS, Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: ColE2EMS, Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	// Revision 1.1.
	{Name: ColSessionID, Type: arrow.PrimitiveTypes.Int64, Nullable: true, Since: 1},
	{Name: ColTurn, Type: arrow.PrimitiveTypes.Int32, Nullable: true, Since: 1},
	{Name: ColSessionWaitNS, Type: arrow.PrimitiveTypes.Int64, Nullable: true, Since: 1},
	{Name: ColPromptTokensCached, Type: arrow.PrimitiveTypes.Int32, Nullable: true, Since: 1},
	// Revision 1.2.
	{Name: ColGapNS, Type: arrow.PrimitiveTypes.Int64, Nullable: true, Since: 2},
	{Name: ColRecordedArrivalNS, Type: arrow.PrimitiveTypes.Int64, Nullable: true, Since: 2},
	{Name: ColRecordedDurationNS, Type: arrow.PrimitiveTypes.Int64, Nullable: true, Since: 2},
	{Name: ColRecordedCachedTokens, Type: arrow.PrimitiveTypes.Int32, Nullable: true, Since: 2},
	// Revision 1.3.
	{Name: ColFirstAnswerNS, Type: arrow.PrimitiveTypes.Int64, Nullable: true, Since: 3},
	{Name: ColReasoningTokens, Type: arrow.PrimitiveTypes.Int32, Nullable: true, Since: 3},
	{Name: ColReasoningTokensSource, Type: arrow.BinaryTypes.String, Nullable: true, Since: 3},
	// Revision 1.4.
	{Name: ColImages, Type: arrow.PrimitiveTypes.Int32, Nullable: true, Since: 4},
	{Name: ColImageTokens, Type: arrow.PrimitiveTypes.Int32, Nullable: true, Since: 4},
	{Name: ColInputs, Type: arrow.PrimitiveTypes.Int32, Nullable: true, Since: 4},
}

// Columns returns the contract's columns in the order the writer writes them.
func Columns() []Column { return append([]Column(nil), columns...) }

// byName maps a column name to its position in columns (TestColumnTable checks that no
// name is listed twice).
var byName = indexColumns(columns)

func indexColumns(cs []Column) map[string]int {
	m := make(map[string]int, len(cs))
	for i, c := range cs {
		m[c.Name] = i
	}
	return m
}

// Lookup returns the contract's column of that name.
func Lookup(name string) (Column, bool) {
	i, ok := byName[name]
	if !ok {
		return Column{}, false
	}
	return columns[i], true
}

// Schema is the Arrow schema of a results file without metadata: the contract's columns,
// their types and nullability, in the writer's order.
var Schema = schemaOf(columns)

func schemaOf(cs []Column) *arrow.Schema {
	fs := make([]arrow.Field, len(cs))
	for i, c := range cs {
		fs[i] = arrow.Field{Name: c.Name, Type: c.Type, Nullable: c.Nullable}
	}
	return arrow.NewSchema(fs, nil)
}

// Null is the value a nullable integer field of a Go record (Result's *NS, token and
// http_status fields) holds when its column is null: no offset, token count or HTTP status
// is negative. Strings use "" and lists nil.
const Null = -1

// Status is what happened to one due request.
type Status string

// The statuses a result can have.
const (
	StatusOK             Status = "ok"              // stream completed normally
	StatusHTTPError      Status = "http_error"      // the server answered with a non-2xx status
	StatusTimeout        Status = "timeout"         // --timeout passed before the stream ended
	StatusTransportError Status = "transport_error" // connection refused, reset, TLS, ... before a response
	StatusStreamError    Status = "stream_error"    // the response stream broke, was malformed or carried an error event
	StatusDropped        Status = "dropped"         // never sent: --max-inflight was reached at its due time
	StatusCanceled       Status = "canceled"        // in flight when the run was interrupted
)

// statuses lists every status in the contract's order: ok, then the failures, then dropped
// and canceled. Reports list statuses in this order.
var statuses = []Status{StatusOK, StatusHTTPError, StatusTimeout, StatusTransportError, StatusStreamError, StatusDropped, StatusCanceled}

// Statuses returns every status in the contract's order (ok; http_error, timeout,
// transport_error, stream_error — the failures; dropped; canceled).
func Statuses() []Status { return append([]Status(nil), statuses...) }

// Values of the output_tokens_source column.
const (
	SourceUsage     = "usage"     // usage.completion_tokens as the server counted
	SourceTokenizer = "tokenizer" // the client counted the generated text
)

// SourceChunkUsage is a reasoning_tokens_source value (beside SourceUsage and
// SourceTokenizer, which mean there the usage's reasoning count and the client's count of
// the reasoning text): the sum of the chunk_tokens of the chunks that carried only
// reasoning, when the server's running usage gave every chunk's tokens.
const SourceChunkUsage = "chunk_usage"

// Error is a results file's schema that breaks the contract, naming the column.
type Error struct {
	Column string
	Msg    string
}

func (e *Error) Error() string { return "column " + e.Column + ": " + e.Msg }

// Layout locates the contract's columns in one file's schema.
type Layout struct {
	pos []int // per contract column (columns order): field index in the schema, -1 if absent
}

// Check checks a file's schema against the contract, by column name: every required
// column is present, and every contract column present has the contract's type and
// nullability. Order does not matter and columns the contract does not know are ignored
// (a newer revision's). List element names and nullability are not compared: Parquet
// round trips rename them, and other writers make elements nullable. The error names the
// column; the caller wraps it with the file.
func Check(s *arrow.Schema) (*Layout, error) {
	l := &Layout{pos: make([]int, len(columns))}
	for i, c := range columns {
		is := s.FieldIndices(c.Name)
		switch {
		case len(is) > 1:
			return nil, &Error{c.Name, fmt.Sprintf("appears %d times", len(is))}
		case len(is) == 0:
			if c.Required() {
				return nil, &Error{c.Name, "missing (results/v1 requires it)"}
			}
			l.pos[i] = -1
			continue
		}
		f := s.Field(is[0])
		if !sameType(f.Type, c.Type) {
			return nil, &Error{c.Name, fmt.Sprintf("type %s, want %s", f.Type, c.Type)}
		}
		if f.Nullable != c.Nullable {
			return nil, &Error{c.Name, fmt.Sprintf("nullable %v, want nullable %v", f.Nullable, c.Nullable)}
		}
		l.pos[i] = is[0]
	}
	return l, nil
}

// sameType compares types by id, and list types by their element's type.
func sameType(got, want arrow.DataType) bool {
	if got.ID() != want.ID() {
		return false
	}
	if wl, ok := want.(*arrow.ListType); ok {
		return sameType(got.(*arrow.ListType).Elem(), wl.Elem())
	}
	return true
}

// Index returns the field index of the named contract column in the checked schema, or -1
// when the file lacks it (an optional column of a later revision: read it as null) or the
// contract has no such column.
func (l *Layout) Index(name string) int {
	i, ok := byName[name]
	if !ok {
		return -1
	}
	return l.pos[i]
}
