package results

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/apache/arrow/go/v15/arrow"
)

// RunMeta is the run description stored as JSON under MetaRun in every results file and
// journal. Every key is always present (zero values when not applicable); it never holds a
// credential: Endpoint is stripped of userinfo and query, and Flags leaves out the API key
// and header values.
type RunMeta struct {
	ToolVersion    string            `json:"tool_version"`
	RunID          string            `json:"run_id"`
	Mode           string            `json:"mode"` // ModeOpen or ModeClosed
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
	// RampUpNS is a closed-loop run's --ramp-up: worker i started at i*RampUpNS/Concurrency
	// on the run clock. Added in revision 1.1; absent (0) when there was no ramp-up.
	RampUpNS int64 `json:"ramp_up_ns,omitempty"`
	// PrefixReusableShare is the best prefix-cache hit rate the replayed rows allow: of
	// their prompt tokens, the share an infinite prefix cache could serve, from the trace's
	// prefix blocks (replay.ReusableShare). Added in revision 1.1; absent when the trace
	// has no prefix blocks.
	PrefixReusableShare *float64 `json:"prefix_reusable_share,omitempty"`
	// PrefixReusableRule names how PrefixReusableShare was computed: ReusableBlocks or
	// ReusableHistory. Added in revision 1.1 after the share; absent in a file that has
	// the share without it, whose rule is ReusableBlocks (the only one then).
	PrefixReusableRule string `json:"prefix_reusable_rule,omitempty"`

	// Scrape lists the Prometheus endpoints this run (shard) sampled during the run, each
	// without credentials or query (replay.SafeURL), every ScrapeIntervalNS; MetricsFile is
	// the base name of the metrics file they went to, beside the results file
	// (MetricsPath). Added in revision 1.2; absent when the run scraped nothing.
	Scrape           []string `json:"scrape,omitempty"`
	ScrapeIntervalNS int64    `json:"scrape_interval_ns,omitempty"`
	MetricsFile      string   `json:"metrics_file,omitempty"`

	// Repeat is this run's 1-based index among the RepeatCount runs of one `replay --repeat`
	// (or of one sweep point with --repeat); RepeatGroup is the run_id of the group's first
	// repeat, shared by every repeat, so analysis and compare tell a group of repeats from
	// unrelated runs. Added in revision 1.2; absent for a run that was not repeated.
	Repeat      int    `json:"repeat,omitempty"`
	RepeatCount int    `json:"repeat_count,omitempty"`
	RepeatGroup string `json:"repeat_group,omitempty"`

	// SimProfileName and SimProfileSHA256 say which profile file served a simulated run
	// when --sim-profile named a file (SimProfile then holds its path as given): the
	// file's name field and the SHA-256, in hex, of its bytes, so that a run against an
	// edited or refitted profile is told apart. Added in revision 1.5; absent for a
	// built-in profile and for a run against an endpoint.
	SimProfileName   string `json:"sim_profile_name,omitempty"`
	SimProfileSHA256 string `json:"sim_profile_sha256,omitempty"`

	// Source says where the records come from when not from a replay: SourceRecord for the
	// production results `llmreplay record` wrote from the traffic it passed (sent_ns is
	// when the proxy handed the request to the upstream, scheduled_ns when it arrived at
	// the proxy). Added in revision 1.4; absent for a replay.
	Source string `json:"source,omitempty"`
}

// SourceRecord is RunMeta.Source of production results written by `llmreplay record`.
const SourceRecord = "record"

// Rules of RunMeta.PrefixReusableShare (docs/metrics.md, "prefix_reusable_share").
const (
	// ReusableBlocks: a row reuses the leading prefix blocks an earlier row had
	// (independent sessions, or sequential with --history synthetic).
	ReusableBlocks = "prefix-blocks"
	// ReusableHistory: sequential sessions with --history actual: a later turn reuses its
	// history as the replay plans it (what its predecessor sent plus the trace's output
	// length); a first turn, or a row without a session, reuses the prefix blocks an
	// earlier such row had.
	ReusableHistory = "actual-history"
	// ReusableAgents: agent sessions (--sessions dag): a call reuses the part of its first
	// parent's context its prompt starts with (replay.PlanAgents).
	ReusableAgents = "agent-contexts"
)

// Modes of a run (RunMeta.Mode).
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

// SchemaWithRun returns Schema carrying the format and run metadata: the schema of a
// results file and of its journal.
func SchemaWithRun(run *RunMeta) (*arrow.Schema, error) { return withRun(Schema, Format, run) }

// withRun returns s's fields with the metadata of a file of the given format: the format
// key and run as JSON.
func withRun(s *arrow.Schema, format string, run *RunMeta) (*arrow.Schema, error) {
	js, err := json.Marshal(run)
	if err != nil {
		return nil, fmt.Errorf("results: encode run metadata: %w", err)
	}
	md := arrow.NewMetadata([]string{MetaFormat, MetaRun}, []string{format, string(js)})
	return arrow.NewSchema(s.Fields(), &md), nil
}

// ParseRunMeta decodes the run metadata of a results file or journal schema, after checking
// its format.
func ParseRunMeta(s *arrow.Schema) (*RunMeta, error) { return runOf(s, Format) }

// runOf checks that s's format key is format and decodes its run metadata.
func runOf(s *arrow.Schema, format string) (*RunMeta, error) {
	md := s.Metadata()
	if f := md.FindKey(MetaFormat); f < 0 || md.Values()[f] != format {
		return nil, fmt.Errorf("schema metadata %s is not %q", MetaFormat, format)
	}
	i := md.FindKey(MetaRun)
	if i < 0 {
		return nil, fmt.Errorf("schema metadata lacks %s", MetaRun)
	}
	var m RunMeta
	if err := json.Unmarshal([]byte(md.Values()[i]), &m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", MetaRun, err)
	}
	return &m, nil
}
