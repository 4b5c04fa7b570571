package replay

import (
	"github.com/llmreplay/llmreplay/wire"

	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/llmreplay/llmreplay/trace"
)

func TestDue(t *testing.T) {
	cases := []struct {
		arrival, origin time.Duration
		speedup         float64
		want            time.Duration
	}{
		{0, 0, 1, 0},
		{10 * time.Second, 0, 1, 10 * time.Second},
		{10 * time.Second, 0, 4, 2500 * time.Millisecond},
		{10 * time.Second, 2 * time.Second, 2, 4 * time.Second},
		{3, 0, 2, 2}, // rounds half away from zero: 1.5 ns -> 2 ns
		{time.Hour, 0, 0.5, 2 * time.Hour},
	}
	for _, c := range cases {
		if got := Due(c.arrival, c.origin, c.speedup); got != c.want {
			t.Errorf("Due(%v, %v, %v) = %v, want %v", c.arrival, c.origin, c.speedup, got, c.want)
		}
	}
}

func TestSpeedupForRate(t *testing.T) {
	// 11 requests over 20 s: 0.5 req/s; 5 req/s asks for 10x.
	s, err := SpeedupForRate(11, 20*time.Second, 5)
	if err != nil || s != 10 {
		t.Errorf("got %v, %v; want 10", s, err)
	}
	for _, bad := range []struct {
		n    int64
		span time.Duration
		rate float64
	}{{1, time.Second, 1}, {5, 0, 1}, {5, time.Second, 0}, {5, time.Second, -1}} {
		if _, err := SpeedupForRate(bad.n, bad.span, bad.rate); err == nil {
			t.Errorf("SpeedupForRate(%v) accepted", bad)
		}
	}
	reqs := uniformTrace(11, 2*time.Second, 1, 1)
	n, span, err := ScanSpan(trace.NewSliceSource(reqs), 0)
	if n != 11 || span != 20*time.Second || err != nil {
		t.Errorf("ScanSpan: %d, %v, %v", n, span, err)
	}
	if n, span, _ := ScanSpan(trace.NewSliceSource(reqs), 3); n != 3 || span != 4*time.Second {
		t.Errorf("ScanSpan limit 3: %d, %v", n, span)
	}
}

// TestPlanner checks the whole schedule of small runs without a clock.
func TestPlanner(t *testing.T) {
	arrivals := []time.Duration{5 * time.Second, 5 * time.Second, 6 * time.Second, 9 * time.Second, 13 * time.Second, 20 * time.Second}
	type step struct {
		due  time.Duration
		warm bool
	}
	cases := []struct {
		name string
		p    planner
		want []step
	}{
		{"speedup 1 from the first arrival", planner{speedup: 1},
			[]step{{0, false}, {0, false}, {time.Second, false}, {4 * time.Second, false}, {8 * time.Second, false}, {15 * time.Second, false}}},
		{"speedup 2, duration 4s", planner{speedup: 2, duration: 4 * time.Second},
			[]step{{0, false}, {0, false}, {500 * time.Millisecond, false}, {2 * time.Second, false}, {4 * time.Second, false}}},
		{"warmup 2 then limit 2", planner{speedup: 1, warmup: 2, limit: 2},
			[]step{{0, true}, {0, true}, {time.Second, false}, {4 * time.Second, false}}},
		{"closed loop ignores time", planner{closed: true, limit: 3, duration: time.Nanosecond},
			[]step{{0, false}, {0, false}, {0, false}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []step
			for _, a := range arrivals {
				due, warm, ok := c.p.plan(a)
				if !ok {
					break
				}
				got = append(got, step{due, warm})
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("request %d: got %+v, want %+v", i, got[i], c.want[i])
				}
			}
		})
	}
}

func TestAppendJSONBytes(t *testing.T) {
	cases := map[string]string{
		"plain":         `"plain"`,
		"q\"b\\n\n\t\r": `"q\"b\\n\n\t\r"`,
		"\x01\x1f":      `"\u0001\u001f"`,
		"é€😀":           `"é€😀"`,
		"bad\xffutf8":   `"bad\ufffdutf8"`,
		"line\u2028sep": `"line\u2028sep"`,
	}
	for in, want := range cases {
		if got := string(wire.AppendJSONBytes(nil, []byte(in))); got != want {
			t.Errorf("%q: got %s, want %s", in, got, want)
		}
	}
}

func FuzzAppendJSONBytes(f *testing.F) {
	f.Add([]byte("hello \"world\"\n\x00\xff\u2028"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var got string
		if err := json.Unmarshal(wire.AppendJSONBytes(nil, in), &got); err != nil {
			t.Fatalf("invalid JSON for %q: %v", in, err)
		}
		if want := strings.ToValidUTF8(string(in), "\uFFFD"); got != want && utf8.ValidString(string(in)) {
			t.Fatalf("round trip: got %q, want %q", got, want)
		}
	})
}
