// Package prom turns a Prometheus exposition (text 0.0.4 or OpenMetrics) into samples as
// exposed: a counter keeps its name (foo_total), a histogram gives foo_bucket{le=...},
// foo_sum and foo_count, a summary foo{quantile=...}, foo_sum and foo_count. Parsing is
// github.com/prometheus/common/expfmt's; this package only flattens its metric families
// into sorted rows, the shape of a metrics file (docs/results-format.md, "Metrics file").
//
// It imports nothing of ours: the scraper (replay) and the tests of analysis share it.
package prom

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Accept is the Accept header a scraper sends: the classic text format only (every engine
// and exporter serves it). expfmt's OpenMetrics decoder is a reference ABNF parser, some
// 600 times slower: BenchmarkParse measured 0.43-0.77 s for a 40-family page against
// 0.6-1.2 ms as text, on the 2-core development machine under load. A server that answers
// OpenMetrics anyway is still parsed (its Content-Type says so).
const Accept = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"

// Label is one label pair of a sample.
type Label struct{ Name, Value string }

// Sample is one exposed value: Name as exposed (with _total, _bucket, _sum or _count where
// the exposition has them), Type its family's type in lower case (counter, gauge,
// histogram, summary, untyped, gaugehistogram), Labels sorted by name (without __name__).
type Sample struct {
	Name   string
	Type   string
	Labels []Label
	Value  float64
}

// Label returns the value of the label called name, and whether the sample has it.
func (s *Sample) Label(name string) (string, bool) {
	for _, l := range s.Labels {
		if l.Name == name {
			return l.Value, true
		}
	}
	return "", false
}

// Parse reads one exposition whose format is given by the response header h (its
// Content-Type; a missing or unknown one is read as the classic text format). The samples
// come sorted by name, then labels. An error names the format and, for text, the line.
func Parse(r io.Reader, h http.Header) ([]Sample, error) {
	format := expfmt.ResponseFormat(h)
	if format.FormatType() == expfmt.TypeUnknown {
		format = expfmt.NewFormat(expfmt.TypeTextPlain)
	}
	dec := expfmt.NewDecoder(r, format)
	var out []Sample
	for {
		var f dto.MetricFamily
		err := dec.Decode(&f)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", formatName(format), err)
		}
		typ := strings.ToLower(f.GetType().String())
		typ = strings.ReplaceAll(typ, "_", "")
		vec, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{}, &f)
		if err != nil {
			return nil, fmt.Errorf("parse %s: family %s: %w", formatName(format), f.GetName(), err)
		}
		for _, s := range vec {
			out = append(out, sampleOf(s, typ))
		}
	}
	sort.Slice(out, func(i, j int) bool { return less(&out[i], &out[j]) })
	return out, nil
}

func sampleOf(s *model.Sample, typ string) Sample {
	o := Sample{Name: string(s.Metric[model.MetricNameLabel]), Type: typ, Value: float64(s.Value)}
	o.Labels = make([]Label, 0, len(s.Metric)-1)
	for k, v := range s.Metric {
		if k != model.MetricNameLabel {
			o.Labels = append(o.Labels, Label{string(k), string(v)})
		}
	}
	sort.Slice(o.Labels, func(i, j int) bool { return o.Labels[i].Name < o.Labels[j].Name })
	return o
}

func less(a, b *Sample) bool {
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	for i := 0; i < len(a.Labels) && i < len(b.Labels); i++ {
		if a.Labels[i] != b.Labels[i] {
			if a.Labels[i].Name != b.Labels[i].Name {
				return a.Labels[i].Name < b.Labels[i].Name
			}
			return a.Labels[i].Value < b.Labels[i].Value
		}
	}
	return len(a.Labels) < len(b.Labels)
}

func formatName(f expfmt.Format) string {
	if f.FormatType() == expfmt.TypeOpenMetrics {
		return "OpenMetrics exposition"
	}
	return "Prometheus text exposition"
}
