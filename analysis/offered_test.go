package analysis

import (
	"math"
	"testing"

	"github.com/llmreplay/llmreplay/analysis/decode"
)

func TestOffered(t *testing.T) {
	// 11 requests every 100 ms, 10 target tokens each: 10 req/s, 100 tok/s.
	d := &decode.Data{}
	for i := 0; i < 11; i++ {
		d.Scheduled = append(d.Scheduled, int64(i)*100e6)
		d.OutTarget = append(d.OutTarget, 10)
	}
	o := OfferedLoad(d, 0.25, 0.75) // holds the arrivals at 0.3, 0.4, 0.5, 0.6, 0.7
	near := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("RequestsPerS", o.RequestsPerS, 10)
	near("OutputTokensPerS", o.OutputTokensPerS, 100)
	near("WindowRequestsPerS", o.WindowRequestsPerS, 10)
	near("WindowOutputTokensPerS", o.WindowOutputTokensPerS, 100)
	if z := OfferedLoad(&decode.Data{}, 0, 1); z != (Offered{}) {
		t.Errorf("empty data offered %+v", z)
	}
	if z := OfferedLoad(d, 1, 1); z.WindowRequestsPerS != 0 {
		t.Errorf("empty window offered %+v", z)
	}
}
