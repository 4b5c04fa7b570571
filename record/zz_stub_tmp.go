package record

import (
	"github.com/llmreplay/llmreplay/trace"
)

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
