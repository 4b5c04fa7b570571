package record

import (
	"time"

	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

type Request struct {
	API               wire.API
	Model             string
	Stream, HasStream bool
	MaxTokens, N      int32
	UserKey, PrevKey  uint64
	Msgs              []uint64
	Roles             []byte
	PromptTokens      int32
	Blocks            []int64
	Images            int32
}
type Parser struct{}
type ParserOptions struct {
	Salt        [32]byte
	Encoding    *tokenize.Encoding
	BlockTokens int
	CacheTokens int
}

func NewParser(o ParserOptions) (*Parser, error) { return &Parser{}, nil }
func (p *Parser) Parse(path string, body []byte) (Request, error) {
	return Request{PromptTokens: 10}, nil
}
func (p *Parser) Key(s string) uint64 { return uint64(len(s)) }

type Sessions struct{ n int64 }
type Link struct {
	Session int64
	Parent  int64
	GapKind string
}

func NewSessions(idle time.Duration, max int) *Sessions { return &Sessions{} }
func (s *Sessions) Link(id, arrivalNS int64, r *Request, headerKey uint64) Link {
	return Link{Session: id, Parent: -1}
}
func (s *Sessions) Ended(id, endNS int64, r *Request, respKey uint64) {}

type TraceJournal struct {
	path string
	rows []trace.Request
	meta trace.Meta
}

var journals = map[string]*TraceJournal{}

func CreateTraceJournal(path string, meta trace.Meta) (*TraceJournal, error) {
	j := &TraceJournal{path: path, meta: meta}
	journals[path] = j
	return j, nil
}
func (j *TraceJournal) Add(r *trace.Request) error { j.rows = append(j.rows, *r); return nil }
func (j *TraceJournal) Flush() error               { return nil }
func (j *TraceJournal) Close() error               { return nil }
func ConvertTraceJournal(journal, out string) (int, error) {
	j := journals[journal]
	w, err := trace.Create(out, j.meta)
	if err != nil {
		return 0, err
	}
	for _, r := range j.rows {
		r.Params = nil
		if err := w.Write(r); err != nil {
			return 0, err
		}
	}
	return len(j.rows), w.Close()
}
