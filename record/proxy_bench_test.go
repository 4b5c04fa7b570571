package record

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/tokenize"
)

// BenchmarkProxyStream sends a streamed chat request through the proxy to an upstream
// on loopback and reads its answer, with each relay: the proxy's allocations per request
// (B/op, allocs/op, the client's and the upstream's included, which the proxy does not
// change).
//
//	go test ./record -run '^$' -bench ProxyStream -benchmem
func BenchmarkProxyStream(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range strings.SplitAfter(sseBody, "\n\n") {
			io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		b.Fatal(err)
	}
	for _, relay := range relays {
		b.Run(relay, func(b *testing.B) {
			rec, err := NewRecorder(Options{Dir: b.TempDir(), Upstream: u, Sample: 1, Encoding: enc, Workers: 1, ToolVersion: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer rec.Close()
			srv := serveProxy(b, relay, u, rec, RelayOptions{})
			defer srv.Close()
			target := srv.URL + "/v1/chat/completions"
			b.ReportAllocs()
			for b.Loop() {
				resp, err := http.Post(target, "application/json", strings.NewReader(chatStreamBody))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
