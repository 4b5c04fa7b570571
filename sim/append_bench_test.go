package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/internal/cputime"
	"github.com/llmreplay/llmreplay/tokenize"
)

// appendText is about n tokens of text of message m, its own (so the count cache has
// not seen it).
func appendText(m, n int) string {
	var sb strings.Builder
	for i := 0; sb.Len() < 33*n/10; i++ {
		fmt.Fprintf(&sb, "Message %d: read src/module%d.go line %d and found %d issues.\n", m, i, m*31+i, i%7)
	}
	return sb.String()
}

// BenchmarkAppend100k is the server-side cost (handler and engine, one op one request)
// of an agent's next call: a prompt of 100k tokens whose first 99k the previous call
// sent, and 1k new tokens. Call i sends the previous call's prompt plus about 1,000
// tokens (so call i is about 100k + i·1k tokens long); call 0 is sent before the timer.
// moe-230b-8gpu with the prefix cache on, at time scale 1e6 (model time costs nothing),
// non-streaming, one output token. cpu-ms/op is the process's CPU per call (the client's
// share, building a recorder and decoding the answer, is small).
//
//   - chat: 100 messages of ~1k tokens, one more each call (the count cache knows the old ones);
//   - ids: a completions prompt of token ids, 1k more each call;
//   - text: a completions prompt of one text that grows by 1k tokens each call.
func BenchmarkAppend100k(b *testing.B) {
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		b.Fatal(err)
	}
	const base, calls = 100, 21 // messages in call 0; bodies built (run with -benchtime 20x)
	msgs := make([]string, base+calls)
	for i := range msgs {
		msgs[i] = appendText(i, 1000)
	}
	for _, api := range []string{"chat", "ids", "text"} {
		b.Run(api, func(b *testing.B) {
			bodies := make([][]byte, calls)
			var ids []int
			for i := range bodies {
				req := map[string]any{"max_tokens": 1, "ignore_eos": true}
				path := "/v1/completions"
				switch api {
				case "chat":
					var m []map[string]string
					for _, t := range msgs[:base+i] {
						m = append(m, map[string]string{"role": "user", "content": t})
					}
					req["messages"], path = m, "/v1/chat/completions"
				case "ids":
					if i == 0 {
						ids = enc.Encode(strings.Join(msgs[:base], ""))
					} else {
						ids = append(ids, enc.Encode(msgs[base+i-1])...)
					}
					req["prompt"] = ids
				case "text":
					req["prompt"] = strings.Join(msgs[:base+i], "")
				}
				body, _ := json.Marshal(req)
				bodies[i] = append([]byte(path+"\n"), body...)
			}
			cfg, _ := Profile("moe-230b-8gpu")
			cfg.TimeScale = MaxTimeScale
			s, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			h := s.Handler()
			send := func(i int) int {
				path, body, _ := bytes.Cut(bodies[i%calls], []byte("\n"))
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, string(path), bytes.NewReader(body)))
				var v struct {
					Usage struct {
						PromptTokens int `json:"prompt_tokens"`
						Details      struct {
							CachedTokens int `json:"cached_tokens"`
						} `json:"prompt_tokens_details"`
					} `json:"usage"`
				}
				if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &v) != nil {
					b.Fatalf("call %d: status %d %.200s", i, w.Code, w.Body.Bytes())
				}
				if i > 0 && i < calls && v.Usage.Details.CachedTokens < v.Usage.PromptTokens-2000 {
					b.Fatalf("call %d: %d of %d tokens cached", i, v.Usage.Details.CachedTokens, v.Usage.PromptTokens)
				}
				return v.Usage.PromptTokens
			}
			prompt := send(0)
			i := 1
			cpu0 := cputime.Process()
			for b.Loop() {
				send(i)
				i++
			}
			// CPU of the process (handler, engine, garbage collector) per call: on a
			// shared machine wall time mostly measures the neighbours.
			b.ReportMetric(float64(cputime.Process()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(prompt), "tokens-call0")
		})
	}
}
