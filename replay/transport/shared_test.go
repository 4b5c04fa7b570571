package transport

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"testing"

	"github.com/llmreplay/llmreplay/replay/results"
)

// TestSharedBodySent: a request whose body holds a shared part (an agent's context, sent
// in place) reaches the server as the body joined, through either client, also when the
// shared part is larger than a socket takes in one write.
func TestSharedBodySent(t *testing.T) {
	got := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.ContentLength != int64(len(b)) {
			t.Errorf("Content-Length %d, body %d bytes", r.ContentLength, len(b))
		}
		got <- b
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"text\":\" a\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL + "/v1")
	clients := []string{HTTPClientNetHTTP}
	if runtime.GOOS == "linux" {
		clients = append(clients, HTTPClientRaw)
	}
	shared := bytes.Repeat([]byte("context "), 1<<20) // 8 MiB: more than one writev
	for _, hc := range clients {
		c := newTestClient(t, base, func(o *ClientOptions) { o.HTTPClient = hc })
		tr := c.Transport()
		req := &Request{ID: 1, PromptTokens: 3, OutputTokens: 2, Body: []byte(`{"prompt":"` + `tail"}`), Shared: shared, SharedAt: len(`{"prompt":"`)}
		tr.Prepare(req, false)
		res := results.NewResult(1, 0, 0, 3, 2)
		tr.RoundTrip(context.Background(), Clock{}, req, res, NewSSEReader(nil, Clock{}.Now, 4096, DefaultMaxLine), func(int) {}, nil)
		if res.Status != results.StatusOK {
			t.Fatalf("%s: %s %s", hc, res.Status, res.Error)
		}
		b := <-got
		want := append(append([]byte(`{"prompt":"`), shared...), `tail"}`...)
		if !bytes.Equal(b, want) {
			t.Errorf("%s: server read %d bytes, want %d (the parts joined)", hc, len(b), len(want))
		}
	}
}
