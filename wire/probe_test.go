package wire

import "testing"

func TestProbeMethods(t *testing.T) {
	for _, tc := range []struct {
		api    API
		method string
		want   string // the methods joined, or "error"
	}{
		{APICompletions, "", "tokenize tokenize-llamacpp usage"},
		{APIChat, "", "tokenize usage"},
		{APIChat, MethodUsage, "usage"},
		{APICompletions, MethodTokenizeLlamaCpp, "tokenize-llamacpp"},
		{APIChat, MethodTokenizeLlamaCpp, "error"},
		{APIChat, "guess", "error"},
		{APIResponses, "", "tokenize usage"},
		{APIResponses, MethodTokenizeLlamaCpp, "error"},
		{APIMessages, "", "tokenize usage"},
		{"embeddings", "", "error"},
	} {
		ms, err := ProbeMethods(tc.api, tc.method)
		got := "error"
		if err == nil {
			got = ""
			for i, m := range ms {
				if i > 0 {
					got += " "
				}
				got += m
			}
		}
		if got != tc.want {
			t.Errorf("ProbeMethods(%s, %q) = %q (%v), want %q", tc.api, tc.method, got, err, tc.want)
		}
	}
}

func TestParseTokenizeResponse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		count   int
		maxLen  int
		wantErr bool
	}{
		{`{"count":3,"tokens":[1,2,3],"max_model_len":4096}`, 3, 4096, false},
		{`{"tokens":[1,2,3,4]}`, 4, 0, false},
		{`{"tokens":[{"id":1,"piece":"a"},{"id":2,"piece":"b"}]}`, 2, 0, false},
		{`{"count":5}`, 5, 0, false},
		{`{"count":3,"tokens":[1]}`, 0, 0, true},
		{`{"count":-1}`, 0, 0, true},
		{`{"count":1,"max_model_len":-3}`, 0, 0, true},
		{`{}`, 0, 0, true},
		{`[1,2]`, 0, 0, true},
		{`{"count":"3"}`, 0, 0, true},
		{``, 0, 0, true},
	} {
		r, err := ParseTokenizeResponse([]byte(tc.in))
		if (err != nil) != tc.wantErr || (err == nil && (r.Count != tc.count || r.MaxModelLen != tc.maxLen)) {
			t.Errorf("ParseTokenizeResponse(%s) = %+v, %v", tc.in, r, err)
		}
	}
}

func TestParseUsagePromptTokens(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int
		wantErr bool
	}{
		{`{"id":"x","usage":{"prompt_tokens":17,"completion_tokens":1}}`, 17, false},
		{`{"usage":{"prompt_tokens":0}}`, 0, false},
		{`{"object":"response","usage":{"input_tokens":21,"output_tokens":16}}`, 21, false},
		{`{"usage":{"input_tokens":-1}}`, 0, true},
		{`{"usage":null}`, 0, true},
		{`{"usage":{}}`, 0, true},
		{`{"usage":{"prompt_tokens":-2}}`, 0, true},
		{`{"usage":{"prompt_tokens":1.5}}`, 0, true},
		{`{"error":{"message":"too long"}}`, 0, true},
		{`nope`, 0, true},
	} {
		got, err := ParseUsagePromptTokens([]byte(tc.in))
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseUsagePromptTokens(%s) = %d, %v", tc.in, got, err)
		}
	}
}

// TestParseMessagesPromptTokens: a Messages answer's prompt is input_tokens plus the cache
// reads and writes (Anthropic's reading), or input_tokens alone (SGLang's).
func TestParseMessagesPromptTokens(t *testing.T) {
	const body = `{"type":"message","usage":{"input_tokens":12,"cache_read_input_tokens":30,"cache_creation_input_tokens":2,"output_tokens":1}}`
	if n, err := parseMessagesPromptTokens([]byte(body), true); err != nil || n != 44 {
		t.Errorf("Anthropic's reading: %d, %v; want 44", n, err)
	}
	if n, err := parseMessagesPromptTokens([]byte(body), false); err != nil || n != 12 {
		t.Errorf("SGLang's reading: %d, %v; want 12", n, err)
	}
	for _, bad := range []string{`{"usage":{"output_tokens":1}}`, `{"usage":null}`, `nope`, `{"usage":{"input_tokens":-3}}`} {
		if n, err := parseMessagesPromptTokens([]byte(bad), true); err == nil {
			t.Errorf("%s: %d accepted", bad, n)
		}
	}
}

func FuzzParseTokenizeResponse(f *testing.F) {
	for _, s := range []string{`{"count":3,"tokens":[1,2,3],"max_model_len":4096}`, `{"tokens":[{"id":1}]}`, `{}`, `{"count":1e99}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseTokenizeResponse(data)
		if err == nil && (r.Count < 0 || r.MaxModelLen < 0) {
			t.Fatalf("accepted negative values: %+v", r)
		}
	})
}

func FuzzParseUsagePromptTokens(f *testing.F) {
	for _, s := range []string{`{"usage":{"prompt_tokens":17}}`, `{"usage":null}`, `{"usage":{"prompt_tokens":-1}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := ParseUsagePromptTokens(data)
		if err == nil && n < 0 {
			t.Fatalf("accepted %d", n)
		}
	})
}
