package analysis

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// burstRow is an ok request sent at sentNS with n chunks arriving per bursts of burst
// chunks each (one read each: equal stamps), the bursts gapMS apart.
func burstRow(id int64, sentNS int64, n, burst int, gapMS int64) row {
	chunks := make([]int64, n)
	for k := range chunks {
		chunks[k] = int64(1+k/burst) * gapMS * ms_
	}
	return okRow(id, sentNS, chunks...)
}

// TestBufferedRule: the rule's figures from chunk_ns, and its decision at both sides of
// its bounds (chunks per read, share of streams, streams judged).
func TestBufferedRule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rows    func() []row
		streams int64
		bursty  int64
		zeroGap float64
		perRead float64
		otherMS float64
		flagged bool
	}{
		{"each chunk its own read", func() []row {
			var rs []row
			for i := range 10 {
				rs = append(rs, burstRow(int64(i), int64(i)*ms_, 16, 1, 5))
			}
			return rs
		}, 10, 0, 0, 1, 5, false},
		{"bursts of 8 through a proxy", func() []row {
			var rs []row
			for i := range 10 {
				rs = append(rs, burstRow(int64(i), int64(i)*ms_, 16, 8, 40))
			}
			return rs
		}, 10, 10, 14.0 / 15, 8, 40, true},
		// Streams of 6 chunks per 2 reads: 3 per read exactly, the bound; 5 of 10 streams,
		// the share's bound: flagged.
		{"at the bounds", func() []row {
			var rs []row
			for i := range 5 {
				rs = append(rs, burstRow(int64(i), int64(i)*ms_, 9, 3, 30))
			}
			for i := 5; i < 10; i++ {
				rs = append(rs, burstRow(int64(i), int64(i)*ms_, 9, 1, 10))
			}
			return rs
		}, 10, 5, 30.0 / 80, 90.0 / 60, (5*60 + 5*80) / 50.0, true},
		{"just under the share", func() []row {
			var rs []row
			for i := range 4 {
				rs = append(rs, burstRow(int64(i), int64(i)*ms_, 9, 3, 30))
			}
			for i := 4; i < 10; i++ {
				rs = append(rs, burstRow(int64(i), int64(i)*ms_, 9, 1, 10))
			}
			return rs
		}, 10, 4, 24.0 / 80, 90.0 / 66, (4*60 + 6*80) / 56.0, false},
		// Bursts of 8 every 9 ms: a reader slower than the tokens, not a proxy's buffer
		// (the other gaps are under BufferedGap); then exactly at BufferedGap: flagged.
		{"short gaps", func() []row {
			var rs []row
			for i := range 10 {
				rs = append(rs, burstRow(int64(i), int64(i)*ms_, 16, 8, 9))
			}
			return rs
		}, 10, 0, 14.0 / 15, 8, 9, false},
		{"gaps at the bound", func() []row {
			var rs []row
			for i := range 10 {
				rs = append(rs, burstRow(int64(i), int64(i)*ms_, 16, 8, 10))
			}
			return rs
		}, 10, 10, 14.0 / 15, 8, 10, true},
		// Each stream in one read: no gap to judge.
		{"one read each", func() []row {
			var rs []row
			for i := range 10 {
				rs = append(rs, burstRow(int64(i), int64(i)*ms_, 16, 16, 40))
			}
			return rs
		}, 10, 0, 1, 16, math.NaN(), false},
		// Every request sent 50 ms late: a reader that late bunches 40 ms of chunks itself,
		// so the gap bound rises to the lateness p99 (50 ms) and 40 ms bursts are not a
		// proxy's; bursts 60 ms apart are.
		{"late client, short bursts", func() []row {
			var rs []row
			for i := range 10 {
				r := burstRow(int64(i), 100*ms_+int64(i)*ms_, 16, 8, 40)
				r.scheduled -= 50 * ms_
				rs = append(rs, r)
			}
			return rs
		}, 10, 0, 14.0 / 15, 8, 40, false},
		{"late client, long bursts", func() []row {
			var rs []row
			for i := range 10 {
				r := burstRow(int64(i), 100*ms_+int64(i)*ms_, 16, 8, 60)
				r.scheduled -= 50 * ms_
				rs = append(rs, r)
			}
			return rs
		}, 10, 10, 14.0 / 15, 8, 60, true},
		{"too few streams", func() []row {
			var rs []row
			for i := range 4 {
				rs = append(rs, burstRow(int64(i), int64(i)*ms_, 16, 8, 40))
			}
			return append(rs, burstRow(9, 0, 7, 7, 40)) // 7 chunks: not judged
		}, 4, 4, 14.0 / 15, 8, 40, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustAnalyze(t, tc.rows())
			b := r.Buffered
			if b.Streams != tc.streams || b.Bursty != tc.bursty || b.Flagged != tc.flagged || r.Flags.Buffered != tc.flagged {
				t.Errorf("streams %d bursty %d flagged %v (flags %v), want %d %d %v", b.Streams, b.Bursty, b.Flagged, r.Flags.Buffered, tc.streams, tc.bursty, tc.flagged)
			}
			near(t, "zero-gap share", b.ZeroGapShare, tc.zeroGap)
			near(t, "chunks per read", b.ChunksPerRead, tc.perRead)
			near(t, "other gaps, ms", b.OtherGapMeanMS, tc.otherMS)
			warned := strings.Contains(strings.Join(r.Warnings, "\n"), "stream buffered between server and client")
			if warned != tc.flagged {
				t.Errorf("warning %v, flag %v:\n%s", warned, tc.flagged, strings.Join(r.Warnings, "\n"))
			}
			var text, js strings.Builder
			if err := r.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if want := "  stream buffered: " + yesno(tc.flagged) + " ("; !strings.Contains(text.String(), want) {
				t.Errorf("text lacks %q:\n%s", want, text.String())
			}
			if err := r.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			var got struct {
				Flags struct {
					StreamBuffered bool `json:"stream_buffered"`
					Evidence       struct {
						Streams       int64   `json:"streams"`
						BurstyStreams int64   `json:"bursty_streams"`
						ChunksPerRead float64 `json:"chunks_per_read"`
					} `json:"stream_buffered_evidence"`
				} `json:"flags"`
			}
			if err := json.Unmarshal([]byte(js.String()), &got); err != nil {
				t.Fatal(err)
			}
			if f := got.Flags; f.StreamBuffered != tc.flagged || f.Evidence.Streams != tc.streams || f.Evidence.BurstyStreams != tc.bursty {
				t.Errorf("JSON flags %+v", f)
			}
		})
	}
}
