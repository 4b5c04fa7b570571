package wire

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// bodyCases are the bodies the replay client built before the API kinds moved here, for
// every API and backend, byte for byte: the fields the engines read (and the simulated
// engine checks) must not change with the code's home.
var bodyCases = []struct {
	api      API
	backend  Backend
	tokenIDs bool
	prompt   string
	body     string
}{
	{"completions", "vllm", false, "hi \"there\"\n\u2028\xff", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true},\"temperature\":0,\"ignore_eos\":true,\"max_tokens\":17,\"min_tokens\":17,\"prompt\":\"hi \\\"there\\\"\\n\\u2028\\ufffd\"}"},
	{"completions", "vllm", true, "[1,2,3]", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true},\"temperature\":0,\"ignore_eos\":true,\"max_tokens\":17,\"min_tokens\":17,\"prompt\":[1,2,3]}"},
	{"completions", "sglang", false, "hi \"there\"\n\u2028\xff", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"ignore_eos\":true,\"max_tokens\":17,\"min_tokens\":17,\"prompt\":\"hi \\\"there\\\"\\n\\u2028\\ufffd\"}"},
	{"completions", "sglang", true, "[1,2,3]", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"ignore_eos\":true,\"max_tokens\":17,\"min_tokens\":17,\"prompt\":[1,2,3]}"},
	{"completions", "tgi", false, "hi \"there\"\n\u2028\xff", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"max_tokens\":17,\"prompt\":\"hi \\\"there\\\"\\n\\u2028\\ufffd\"}"},
	{"completions", "tgi", true, "[1,2,3]", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"max_tokens\":17,\"prompt\":[1,2,3]}"},
	{"completions", "llamacpp", false, "hi \"there\"\n\u2028\xff", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"ignore_eos\":true,\"max_tokens\":17,\"n_predict\":17,\"prompt\":\"hi \\\"there\\\"\\n\\u2028\\ufffd\"}"},
	{"completions", "llamacpp", true, "[1,2,3]", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"ignore_eos\":true,\"max_tokens\":17,\"n_predict\":17,\"prompt\":[1,2,3]}"},
	{"completions", "openai", false, "hi \"there\"\n\u2028\xff", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"max_tokens\":17,\"prompt\":\"hi \\\"there\\\"\\n\\u2028\\ufffd\"}"},
	{"completions", "openai", true, "[1,2,3]", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"max_tokens\":17,\"prompt\":[1,2,3]}"},
	{"chat", "vllm", false, "hi \"there\"\n\u2028\xff", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true},\"temperature\":0,\"ignore_eos\":true,\"max_tokens\":17,\"min_tokens\":17,\"messages\":[{\"role\":\"user\",\"content\":\"hi \\\"there\\\"\\n\\u2028\\ufffd\"}]}"},
	{"chat", "sglang", false, "hi \"there\"\n\u2028\xff", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"ignore_eos\":true,\"max_tokens\":17,\"min_tokens\":17,\"messages\":[{\"role\":\"user\",\"content\":\"hi \\\"there\\\"\\n\\u2028\\ufffd\"}]}"},
	{"chat", "tgi", false, "hi \"there\"\n\u2028\xff", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"max_tokens\":17,\"messages\":[{\"role\":\"user\",\"content\":\"hi \\\"there\\\"\\n\\u2028\\ufffd\"}]}"},
	{"chat", "llamacpp", false, "hi \"there\"\n\u2028\xff", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"ignore_eos\":true,\"max_tokens\":17,\"n_predict\":17,\"messages\":[{\"role\":\"user\",\"content\":\"hi \\\"there\\\"\\n\\u2028\\ufffd\"}]}"},
	{"chat", "openai", false, "hi \"there\"\n\u2028\xff", "{\"model\":\"m\\\"1\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"max_completion_tokens\":17,\"messages\":[{\"role\":\"user\",\"content\":\"hi \\\"there\\\"\\n\\u2028\\ufffd\"}]}"},
}

// messagesCases are chat bodies with the messages given, to model "x", for 5 tokens.
var messagesCases = []struct {
	api     API
	backend Backend
	body    string
}{
	{"chat", "vllm", "{\"model\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true},\"temperature\":0,\"ignore_eos\":true,\"max_tokens\":5,\"min_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}"},
	{"chat", "sglang", "{\"model\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"ignore_eos\":true,\"max_tokens\":5,\"min_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}"},
	{"chat", "tgi", "{\"model\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}"},
	{"chat", "llamacpp", "{\"model\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"ignore_eos\":true,\"max_tokens\":5,\"n_predict\":5,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}"},
	{"chat", "openai", "{\"model\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"max_completion_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}"},
}

func TestBodiesUnchanged(t *testing.T) {
	for _, tc := range bodyCases {
		e, err := NewEncoder(tc.api, tc.backend, tc.tokenIDs)
		if err != nil {
			t.Fatal(err)
		}
		start := e.AppendStart(nil, "m\"1")
		if got := string(e.AppendBody(nil, start, []byte(tc.prompt), 17)); got != tc.body {
			t.Errorf("%s %s ids=%v:\n got %s\nwant %s", tc.api, tc.backend, tc.tokenIDs, got, tc.body)
		}
		// The body is what the simulated engine decodes: one definition of the fields.
		var rb RequestBody
		if err := json.Unmarshal([]byte(tc.body), &rb); err != nil || rb.Model == nil || *rb.Model != "m\"1" || rb.Stream == nil || !*rb.Stream {
			t.Errorf("%s %s: body does not decode as a RequestBody: %v", tc.api, tc.backend, err)
		}
	}
	for _, tc := range messagesCases {
		e, _ := NewEncoder(tc.api, tc.backend, false)
		got := string(e.AppendMessagesBody(nil, e.AppendStart(nil, "x"), []byte(`{"role":"user","content":"a"}`), 5))
		if got != tc.body {
			t.Errorf("%s %s messages:\n got %s\nwant %s", tc.api, tc.backend, got, tc.body)
		}
	}
}

// TestBodyAllocs: building a body into a buffer with room allocates nothing.
func TestBodyAllocs(t *testing.T) {
	e, _ := NewEncoder(APIChat, BackendVLLM, false)
	start := e.AppendStart(nil, "m")
	prompt := []byte(strings.Repeat("a \"b\"\n", 100))
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = e.AppendBody(buf[:0], start, prompt, 128) }); n != 0 {
		t.Errorf("%v allocations per body", n)
	}
}

func TestNewEncoderRefuses(t *testing.T) {
	// toy_test.go registers a kind of its own in this test binary.
	if _, err := NewEncoder("images", BackendVLLM, false); err == nil || err.Error() != `unknown API "images" (want completions, chat, messages, responses, embeddings, rerank or toy)` {
		t.Errorf("unknown API: %v", err)
	}
	if _, err := NewEncoder(APIChat, "triton", false); err == nil {
		t.Error("unknown backend accepted")
	}
	if _, err := NewEncoder(APIChat, BackendVLLM, true); err == nil {
		t.Error("token-id prompts accepted for chat")
	}
}

func TestEndpointURLs(t *testing.T) {
	for _, tc := range []struct {
		in, base, api, models, metrics, tokenize, root string
	}{
		{"http://h:8000", "http://h:8000/v1", "http://h:8000/v1/chat/completions", "http://h:8000/v1/models", "http://h:8000/metrics", "http://h:8000/tokenize", "http://h:8000"},
		{"https://u:p@h/gw/v1/?k=1", "https://u:p@h/gw/v1?k=1", "https://u:p@h/gw/v1/chat/completions?k=1", "https://h/gw/v1/models?k=1", "https://u:p@h/gw/metrics", "https://u:p@h/gw/tokenize", "https://u:p@h/gw"},
		{"http://h/openai", "http://h/openai", "http://h/openai/chat/completions", "http://h/openai/models", "http://h/openai/metrics", "http://h/openai/tokenize", "http://h/openai"},
	} {
		u, err := BaseURL(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ what, got, want string }{
			{"base", u.String(), tc.base},
			{"api", APIURL(u, APIChat).String(), tc.api},
			{"models", ModelsURL(u).String(), tc.models},
			{"metrics", MetricsURL(u).String(), tc.metrics},
			{"tokenize", TokenizeURL(u).String(), tc.tokenize},
			{"root", ServerRoot(u), tc.root},
		} {
			if c.got != c.want {
				t.Errorf("%s: %s = %s, want %s", tc.in, c.what, c.got, c.want)
			}
		}
	}
	for _, bad := range []string{"ftp://h/v1", "http:///v1", "http://u:secret@h:bad/v1"} {
		_, err := BaseURL(bad)
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("BaseURL(%q) = %v", bad, err)
		}
	}
	// MetricsURL of an unnormalised base still finds the root.
	u, _ := url.Parse("http://h/gw/v1/")
	if got := MetricsURL(u).String(); got != "http://h/gw/metrics" {
		t.Errorf("MetricsURL = %s", got)
	}
}

// TestAppendJSONBytesASCII: every ASCII byte is written as it is or escaped as JSON
// requires (\n, \r and \t by name, other control bytes as \u00XX), and decodes back.
func TestAppendJSONBytesASCII(t *testing.T) {
	for c := range 128 {
		want := string(rune(c))
		switch {
		case c == '"' || c == '\\':
			want = `\` + want
		case c == '\n':
			want = `\n`
		case c == '\r':
			want = `\r`
		case c == '\t':
			want = `\t`
		case c < 0x20:
			want = fmt.Sprintf(`\u%04x`, c)
		}
		got := AppendJSONBytes(nil, []byte{byte(c)})
		if string(got) != `"`+want+`"` {
			t.Errorf("byte %#x: %s, want \"%s\"", c, got, want)
		}
		var back string
		if err := json.Unmarshal(got, &back); err != nil || back != string(rune(c)) {
			t.Errorf("byte %#x: %s decodes to %q, %v", c, got, back, err)
		}
	}
}

// TestAppendContextBody: a body built around a shared context, joined, is the body built
// with the context copied in, for a kind with messages and one without.
func TestAppendContextBody(t *testing.T) {
	for _, api := range []API{APIChat, APICompletions} {
		e, err := NewEncoder(api, BackendVLLM, false)
		if err != nil {
			t.Fatal(err)
		}
		start := e.AppendStart(nil, "m\x00odel")
		var ctx, tail, whole []byte
		if api == APIChat {
			ctx = []byte(`{"role":"user","content":"a \" b"},{"role":"assistant","content":"\u0000"}`)
			tail = []byte(`,{"role":"user","content":"c"}`)
			whole = e.AppendMessagesBody(nil, start, append(append([]byte{}, ctx...), tail...), 7)
		} else {
			ctx = AppendJSONContent(nil, []byte("first \"part\"\n\x00"))
			tail = AppendJSONContent(nil, []byte(" and then é"))
			whole = e.AppendBody(nil, start, []byte("first \"part\"\n\x00 and then é"), 7)
		}
		for _, tl := range [][]byte{tail, nil} {
			body, at := e.AppendContextBody(nil, start, 7, tl)
			got := string(body[:at]) + string(ctx) + string(body[at:])
			want := string(whole)
			if tl == nil {
				if api == APIChat {
					want = string(e.AppendMessagesBody(nil, start, ctx, 7))
				} else {
					want = string(e.AppendBody(nil, start, []byte("first \"part\"\n\x00"), 7))
				}
			}
			if got != want {
				t.Errorf("%s: context body\n%s\nwant\n%s", api, got, want)
			}
		}
	}
}

// TestSafe8: the eight-byte test agrees with the table on every byte in every position.
func TestSafe8(t *testing.T) {
	for c := range 256 {
		for pos := range 8 {
			var w [8]byte
			for i := range w {
				w[i] = 'a'
			}
			w[pos] = byte(c)
			x := uint64(0)
			for i := 7; i >= 0; i-- {
				x = x<<8 | uint64(w[i])
			}
			if got := safe8(x); got != jsonSafe[c] {
				t.Fatalf("byte %#x at %d: safe8 %v, table %v", c, pos, got, jsonSafe[c])
			}
		}
	}
	s := []byte("0123456789abcdef\"x\\y\n\x01é\u2028" + "0123456789abcdef")
	if got, want := string(AppendJSONBytes(nil, s)), `"0123456789abcdef\"x\\y\n\u0001é\u2028`+`0123456789abcdef"`; got != want {
		t.Errorf("%s, want %s", got, want)
	}
}
