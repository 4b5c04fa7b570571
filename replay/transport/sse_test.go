package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/llmreplay/llmreplay/replay/results"
)

type event struct{ name, data string }

func readAll(r io.Reader, maxLine int) ([]event, error) {
	s := NewSSEReader(r, func() int64 { return 0 }, 16, maxLine)
	var out []event
	for s.Next() {
		out = append(out, event{string(s.Event()), string(s.Data())})
	}
	return out, s.Err()
}

// pushAll feeds in to a reader's push side in writes of split bytes (stamped 1, 2, ...),
// as the raw client's reactor does; with direct, whole events at a write's start are
// taken by direct first (rawResp.deliver). It returns each event as "stamp event data",
// and the error that stopped the reader.
func pushAll(in []byte, split, maxLine int, direct bool) ([]string, error) {
	s := NewSSEReader(nil, nil, 16, maxLine)
	var out []string
	for stamp := int64(1); len(in) > 0; stamp++ {
		b := in[:min(split, len(in))]
		in = in[len(b):]
		for len(b) > 0 {
			if direct {
				if data, n := s.direct(b); n > 0 {
					b = b[n:]
					out = append(out, fmt.Sprintf("%d %q %q", stamp, "", data))
					continue
				}
			}
			n := s.write(b, stamp)
			b = b[n:]
			for s.nextBuffered() {
				out = append(out, fmt.Sprintf("%d %q %q", s.Stamp(), s.Event(), s.Data()))
			}
			if s.Err() != nil {
				return out, s.Err()
			}
			if n == 0 {
				return out, io.ErrNoProgress
			}
		}
	}
	return out, nil
}

// TestSSEDirect: direct takes the events engines stream without a copy, leaves every
// other shape to the buffered path, and what a stream gives does not change with it.
func TestSSEDirect(t *testing.T) {
	for _, tc := range []struct {
		in   string
		data string // "" with n 0: not taken
		n    int
	}{
		{"data: {\"a\":1}\n\ndata: x", `{"a":1}`, 15},
		{"data:{}\r\n\r\n", "{}", 11},
		{"data:  x\n\n", " x", 10},
		{"data: x\n", "", 0},            // the blank line has not arrived
		{"data: x\r\n\r", "", 0},        // nor all of it
		{"data: x\r\n\n", "", 0},        // mixed endings: the buffered path reads them
		{"data: x\rdata: y\n\n", "", 0}, // a CR ends a line
		{"event: e\ndata: x\n\n", "", 0},
		{": ping\n\n", "", 0},
		{"data: a\ndata: b\n\n", "", 0}, // two data lines: not a blank line after the first
		{"datum: x\n\n", "", 0},
	} {
		s := NewSSEReader(nil, nil, 16, DefaultMaxLine)
		data, n := s.direct([]byte(tc.in))
		if n != tc.n || string(data) != tc.data {
			t.Errorf("direct(%q) = %q, %d; want %q, %d", tc.in, data, n, tc.data, tc.n)
		}
	}
	s := NewSSEReader(nil, nil, 16, DefaultMaxLine)
	s.write([]byte("data: a"), 1)
	if _, n := s.direct([]byte("data: x\n\n")); n != 0 {
		t.Error("direct took an event while the reader held bytes")
	}
	s = NewSSEReader(nil, nil, 16, 4)
	if _, n := s.direct([]byte("data: x\n\n")); n != 0 {
		t.Error("direct took a line over the cap")
	}
	in := []byte("data: a\n\ndata:b\r\n\r\nevent: e\ndata: c\n\n: x\n\ndata: d\n\ndata: e\ndata: f\n\ndata: [DONE]\n\n")
	for split := 1; split <= len(in); split++ {
		want, err := pushAll(in, split, DefaultMaxLine, false)
		if err != nil || len(want) != 6 {
			t.Fatalf("split %d, buffered path: %q, %v", split, want, err)
		}
		got, err := pushAll(in, split, DefaultMaxLine, true)
		if err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("split %d: %q, %v; want %q", split, got, err, want)
		}
	}
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
	s := NewSSEReader(r, clock, 64, 0)
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
		// The push side gives the same events at the same stamps with and without direct.
		maxLine := int(split%5)*8 + 8
		buffered, err1 := pushAll(in, int(split%17)+1, maxLine, false)
		direct, err2 := pushAll(in, int(split%17)+1, maxLine, true)
		if fmt.Sprint(err1) != fmt.Sprint(err2) || strings.Join(buffered, "|") != strings.Join(direct, "|") {
			t.Fatalf("push side: direct %q, %v; buffered %q, %v", direct, err2, buffered, err1)
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
		res := results.NewResult(1, 0, 0, 1, 1)
		res.SentNS = 0
		s := NewSSEReader(bytes.NewReader(body), func() int64 { return 5 }, 64, 1024)
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

// TestSSEEndlessCommentsBounded: an endless stream of empty comments never grows the SSE
// reader's buffer, on the pull side (net/http) and the push side (raw client).
func TestSSEEndlessCommentsBounded(t *testing.T) {
	block := []byte(strings.Repeat(":\n\n", 1<<14))
	body := io.MultiReader(bytes.NewReader(bytes.Repeat(block, 200)), strings.NewReader("data: x\n\n")) // 9.6 MB
	s := NewSSEReader(bufio.NewReaderSize(body, 4096), func() int64 { return 0 }, 16<<10, DefaultMaxLine)
	if !s.Next() || string(s.Data()) != "x" {
		t.Fatalf("pull: the event after the comments: %q, %v", s.Data(), s.Err())
	}
	if len(s.buf) != 16<<10 {
		t.Errorf("pull: buffer grew to %d bytes", len(s.buf))
	}
	p := NewSSEReader(nil, nil, 16<<10, DefaultMaxLine)
	for range 200 {
		for b := block; len(b) > 0; {
			n := p.write(b, 1)
			b = b[n:]
			if p.nextBuffered() {
				t.Fatal("push: an event from comments")
			}
		}
	}
	if len(p.buf) != 16<<10 {
		t.Errorf("push: buffer grew to %d bytes", len(p.buf))
	}
}
