package agent

import (
	"math"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis/decode"
)

// BenchmarkAnalyze: the agent section of 1,000,000 calls in 100,000 sessions of ten calls
// (two branches of five, overlapping), as decode.Load leaves them.
func BenchmarkAnalyze(b *testing.B) {
	const sessions, per = 100_000, 10
	n := sessions * per
	d := &decode.Data{FileEnd: []int{n}, Status: make([]uint8, n), Sent: make([]int64, n), First: make([]int64, n), End: make([]int64, n),
		Prompt: make([]int32, n), PromptServer: make([]int32, n), SessionID: make([]int64, n), RecArrival: make([]int64, n),
		RecDuration: make([]int64, n), Cached: make([]int32, n), RecCached: make([]int32, n)}
	for i := range n {
		s, k := int64(i/per), int64(i%per)
		t0 := s*int64(time.Millisecond) + (k/2)*int64(2*time.Second)
		d.SessionID[i], d.Sent[i], d.First[i], d.End[i] = s, t0, t0+int64(100*time.Millisecond), t0+int64(time.Second)+k*int64(time.Millisecond)
		d.Prompt[i], d.PromptServer[i], d.Cached[i], d.RecCached[i] = int32(1000+k*10000), decode.Null32, int32(500+k*9000), int32(600+k*9000)
		d.RecArrival[i], d.RecDuration[i] = t0, int64(900*time.Millisecond)
	}
	b.ReportAllocs()
	for b.Loop() {
		if r := Analyze(d, time.Second, math.NaN()); r.Complete != sessions {
			b.Fatalf("%d complete sessions", r.Complete)
		}
	}
}
