package replay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/llmreplay/llmreplay/replay/results"
)

type event struct{ name, data string }

func readAll(r io.Reader, maxLine int) ([]event, error) {
	s := newSSEReader(r, func() int64 { return 0 }, 16, maxLine)
	var out []event
	for s.Next() {
		out = append(out, event{string(s.Event()), string(s.Data())})
	}
	return out, s.Err()
}

func TestSSEReader(t *testing.T) {
	cases := []struct {
		name, in string
		want     []event
	}{
		{"with space", "data: {\"a\":1}\n\n", []event{{"", `{"a":1}`}}},
		{"without space", "data:{\"a\":1}\n\n", []event{{"", `{"a":1}`}}},
		{"two spaces keep one", "data:  x\n\n", []event{{"", " x"}}},
		{"crlf", "data: a\r\n\r\ndata: b\r\n\r\n", []event{{"", "a"}, {"", "b"}}},
		{"cr only", "data: a\r\rdata: b\r\r", []event{{"", "a"}, {"", "b"}}},
		{"comments and unknown fields", ": ping\nid: 7\nretry: 10\ndata: x\n\n:\n\n", []event{{"", "x"}}},
		{"multi-line", "data: line1\ndata: line2\ndata:\n\n", []event{{"", "line1\nline2\n"}}},
		{"named event", "event: error\ndata: boom\n\ndata: next\n\n", []event{{"error", "boom"}, {"", "next"}}},
		{"no data: no event", "event: ping\n\n\n\ndata: x\n\n", []event{{"", "x"}}},
		{"done", "data: [DONE]\n\n", []event{{"", "[DONE]"}}},
		{"cut event dropped", "data: a\n\ndata: b\n", []event{{"", "a"}}},
		{"field without colon", "data\n\n", []event{{"", ""}}},
		{"long line grows buffer", "data: " + strings.Repeat("y", 1000) + "\n\n", []event{{"", strings.Repeat("y", 1000)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in))} {
				got, err := readAll(r, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(tc.want) {
					t.Fatalf("got %q, want %q", got, tc.want)
				}
				for i := range got {
					if got[i] != tc.want[i] {
						t.Errorf("event %d: got %q, want %q", i, got[i], tc.want[i])
					}
				}
			}
		})
	}
}

func TestSSEReaderLineCap(t *testing.T) {
	in := "data: ok\n\ndata: " + strings.Repeat("z", 5000)
	got, err := readAll(strings.NewReader(in), 1024)
	if !errors.Is(err, ErrLineTooLong) || len(got) != 1 {
		t.Fatalf("got %q, %v; want one event then ErrLineTooLong", got, err)
	}
	// A line of exactly the cap is fine.
	got, err = readAll(strings.NewReader("data: "+strings.Repeat("z", 1024-6)+"\n\n"), 1024)
	if err != nil || len(got) != 1 {
		t.Fatalf("line at the cap: %v", err)
	}
}

func TestSSEReaderErrorAfterData(t *testing.T) {
	r := io.MultiReader(strings.NewReader("data: a\n\n"), iotest.ErrReader(io.ErrUnexpectedEOF))
	got, err := readAll(r, 0)
	if len(got) != 1 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %q, %v", got, err)
	}
}

// TestSSEReaderStampsAtRead: an event is stamped with the clock of the read that
// delivered it, not of a later parse. The clock advances by 10 at every reading of it, so a
// reader that read the clock per event (or per parse) would stamp 10, 20, 30; the reads are
// scripted (no goroutine, no timing), so the test decides the same on any machine.
func TestSSEReaderStamps(t *testing.T) {
	var now int64
	clock := func() int64 { now += 10; return now }
	r := &scriptReader{chunks: []string{"data: a\n\ndata: b\n\n", "data: c\n\n"}}
	s := newSSEReader(r, clock, 64, 0)
	var stamps []int64
	for s.Next() {
		stamps = append(stamps, s.Stamp())
	}
	if len(stamps) != 3 || stamps[0] != 10 || stamps[1] != 10 || stamps[2] != 20 {
		t.Errorf("stamps %v, want [10 10 20]", stamps)
	}
}

// scriptReader returns its chunks one Read each, then io.EOF.
type scriptReader struct{ chunks []string }

func (r *scriptReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	if r.chunks[0] = r.chunks[0][n:]; r.chunks[0] == "" {
		r.chunks = r.chunks[1:]
	}
	return n, nil
}

// FuzzSSEReader: any input, split anywhere, parses the same as whole, within the cap,
// without panicking.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\n"), uint8(3))
	f.Add([]byte("event: error\r\ndata:x\r\ndata: y\r\r: c\n\n"), uint8(1))
	f.Add([]byte("data: [DONE]\n\ndata"), uint8(7))
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		whole, err1 := readAll(bytes.NewReader(in), 256)
		parts, err2 := readAll(&chunkReader{b: in, n: int(split%17) + 1}, 256)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("errors differ: %v vs %v", err1, err2)
		}
		if err1 == nil && len(whole) != len(parts) {
			t.Fatalf("%d events whole, %d split", len(whole), len(parts))
		}
		for i := range min(len(whole), len(parts)) {
			if whole[i] != parts[i] {
				t.Fatalf("event %d differs: %q vs %q", i, whole[i], parts[i])
			}
		}
	})
}

type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(c.n, len(p), len(c.b))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

// FuzzReadStream: whatever a server streams, the client ends with a status and never
// panics; chunk times never exceed the events read.
func FuzzReadStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"text\":\"a\"}],\"usage\":{\"completion_tokens\":1}}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\n"))
	f.Add([]byte("data: {\"error\":\"boom\"}\n\n"))
	f.Add([]byte("event: error\ndata: {}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		c := &Client{opts: ClientOptions{CountTokens: func(s string) int { return len(s) }}}
		res := newResult(1, 0, 0, 1, 1)
		res.SentNS = 0
		s := newSSEReader(bytes.NewReader(body), func() int64 { return 5 }, 64, 1024)
		ctx := context.Background()
		c.readStream(ctx, ctx, s, res, nil)
		if res.Status == "" {
			t.Fatal("no status")
		}
		if res.ChunkTokens != nil && len(res.ChunkTokens) != len(res.ChunkNS) {
			t.Fatalf("%d chunk token counts for %d chunks", len(res.ChunkTokens), len(res.ChunkNS))
		}
		if (res.Status == results.StatusOK) != (res.Error == "") {
			t.Fatalf("status %s with error %q", res.Status, res.Error)
		}
	})
}
