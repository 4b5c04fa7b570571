package replay

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/apache/arrow/go/v15/arrow"
)

// ResultsFormat is the value of the llmreplay.format schema metadata key of a results
// file and of its journal.
const ResultsFormat = "results/v1"

// Schema metadata keys of results files (docs/results-format.md).
const (
	MetaFormat = "llmreplay.format"
	MetaRun    = "llmreplay.run"
)

// Status is what happened to one due request.
type Status string

// The statuses a result can have (docs/results-format.md).
const (
	StatusOK             Status = "ok"              // stream completed normally
	StatusHTTPError      Status = "http_error"      // the server answered with a non-2xx status
	StatusTimeout        Status = "timeout"         // --timeout passed before the stream ended
	StatusTransportError Status = "transport_error" // connection refused, reset, TLS, ... before a response
	StatusStreamError    Status = "stream_error"    // the response stream broke, was malformed or carried an error event
	StatusDropped        Status = "dropped"         // never sent: --max-inflight was reached at its due time
	StatusCanceled       Status = "canceled"        // in flight when the run was interrupted
)

// Token-count sources of Result.OutputTokens.
const (
	SourceUsage     = "usage"     // usage.completion_tokens as the server counted
	SourceTokenizer = "tokenizer" // the client counted the generated text
)

// Null is the value of a nullable integer field of Result that has no value.
const Null = -1

// Result is the record of one due request: one row of a results file. All *NS fields are
// nanosecond offsets from the run start except ChunkNS, whose entries are offsets from
// SentNS. Integer fields documented as nullable hold Null (-1) when they have no value;
// HTTPStatus 0 and Error "" are null.
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
	HTTPStatus         int32  // 0 when no response
	Error              string // short message, "" when none; never a credential
}

// newResult returns a Result with every nullable field null.
func newResult(id int64, shard int32, scheduledNS int64, promptTokens, outputTarget int32) *Result {
	return &Result{
		RequestID: id, Shard: shard, ScheduledNS: scheduledNS,
		SentNS: Null, FirstTokenNS: Null, EndNS: Null,
		PromptTokens: promptTokens, PromptTokensServer: Null,
		OutputTokensTarget: outputTarget, OutputTokens: Null,
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

// Schema is the Arrow schema of results format v1, without metadata: the columns, their
// types and nullability, in the order the contract lists them.
var Schema = arrow.NewSchema([]arrow.Field{
	{Name: "request_id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "shard", Type: arrow.PrimitiveTypes.Int32},
	{Name: "scheduled_ns", Type: arrow.PrimitiveTypes.Int64},
	{Name: "sent_ns", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "first_token_ns", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "end_ns", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: "chunk_ns", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int64)},
	{Name: "chunk_tokens", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: "prompt_tokens", Type: arrow.PrimitiveTypes.Int32},
	{Name: "prompt_tokens_server", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "output_tokens_target", Type: arrow.PrimitiveTypes.Int32},
	{Name: "output_tokens", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "output_tokens_source", Type: arrow.BinaryTypes.String},
	{Name: "status", Type: arrow.BinaryTypes.String},
	{Name: "http_status", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "error", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "ttft_ms", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "tpot_ms", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "e2e_ms", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
}, nil)

// RunMeta is the run description stored as JSON under llmreplay.run in every results file
// and journal. Every key is always present (zero values when not applicable); it never
// holds a credential: Endpoint is stripped of userinfo and query, and Flags leaves out the
// API key and header values.
type RunMeta struct {
	ToolVersion    string            `json:"tool_version"`
	RunID          string            `json:"run_id"`
	Mode           string            `json:"mode"` // "open" or "closed"
	Endpoint       string            `json:"endpoint"`
	API            string            `json:"api"`
	Backend        string            `json:"backend"`
	Model          string            `json:"model"`
	Simulated      bool              `json:"simulated"`
	SimProfile     string            `json:"sim_profile"`
	TraceFile      string            `json:"trace_file"`
	TraceSHA256    string            `json:"trace_sha256"`
	Speedup        float64           `json:"speedup"`
	Rate           float64           `json:"rate"`
	Concurrency    int               `json:"concurrency"`
	ShardIndex     int               `json:"shard_index"`
	ShardCount     int               `json:"shard_count"`
	RunStartUnixNS int64             `json:"run_start_unix_ns"`
	MaxLatenessMS  float64           `json:"max_lateness_ms"`
	SLO            string            `json:"slo"`
	Host           string            `json:"host"`
	Flags          map[string]string `json:"flags"`
}

// Modes of a run.
const (
	ModeOpen   = "open"
	ModeClosed = "closed"
)

// RunID derives the run id shared by every shard of one run: the first 8 bytes, in hex,
// of sha256(run_start_unix_ns as 8 big-endian bytes || trace_sha256 || shard_count as 4
// big-endian bytes).
func RunID(runStartUnixNS int64, traceSHA256 string, shardCount int) string {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(runStartUnixNS))
	h.Write(b[:])
	h.Write([]byte(traceSHA256))
	binary.BigEndian.PutUint32(b[:4], uint32(shardCount))
	h.Write(b[:4])
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// schemaWithMeta returns Schema carrying the format and run metadata.
func schemaWithMeta(run *RunMeta) (*arrow.Schema, error) {
	js, err := json.Marshal(run)
	if err != nil {
		return nil, fmt.Errorf("replay: encode run metadata: %w", err)
	}
	md := arrow.NewMetadata([]string{MetaFormat, MetaRun}, []string{ResultsFormat, string(js)})
	return arrow.NewSchema(Schema.Fields(), &md), nil
}

// ParseRunMeta decodes the llmreplay.run metadata of a results file or journal schema.
func ParseRunMeta(s *arrow.Schema) (*RunMeta, error) {
	md := s.Metadata()
	if f := md.FindKey(MetaFormat); f < 0 || md.Values()[f] != ResultsFormat {
		return nil, fmt.Errorf("replay: schema metadata %s is not %q", MetaFormat, ResultsFormat)
	}
	i := md.FindKey(MetaRun)
	if i < 0 {
		return nil, fmt.Errorf("replay: schema metadata lacks %s", MetaRun)
	}
	var m RunMeta
	if err := json.Unmarshal([]byte(md.Values()[i]), &m); err != nil {
		return nil, fmt.Errorf("replay: decode %s: %w", MetaRun, err)
	}
	return &m, nil
}
