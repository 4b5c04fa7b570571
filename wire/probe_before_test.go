package wire

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// A probe with earlier messages (Prober.Before) sends the conversation as a client does:
// chat's and the Messages API's messages and the Responses API's input list alternate user and assistant and end
// with the probe's text as a user message; without them the Responses API's input is the
// text alone.
func TestProbeBefore(t *testing.T) {
	var got map[string]json.RawMessage
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		got = nil
		json.Unmarshal(raw, &got)
		io.WriteString(w, `{"usage":{"prompt_tokens":3,"input_tokens":3},"count":3,"tokens":[1,2,3]}`)
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL + "/v1")
	want := `[{"role":"user","content":"u0"},{"role":"assistant","content":"a0"},{"role":"user","content":"text"}]`
	for _, tc := range []struct {
		api    API
		method string
		field  string
	}{{APIChat, MethodUsage, "messages"}, {APIChat, MethodTokenize, "messages"}, {APIMessages, MethodUsage, "messages"}, {APIResponses, MethodUsage, "input"}} {
		p := &Prober{Base: base, API: tc.api, Model: "m", Before: []string{"u0", "a0"}}
		if _, _, err := p.Count(context.Background(), tc.method, "text"); err != nil {
			t.Fatalf("%s %s: %v", tc.api, tc.method, err)
		}
		if string(got[tc.field]) != want {
			t.Errorf("%s %s: %s %s, want %s", tc.api, tc.method, tc.field, got[tc.field], want)
		}
	}
	p := &Prober{Base: base, API: APIResponses, Model: "m"}
	if _, _, err := p.Count(context.Background(), MethodUsage, "text"); err != nil || string(got["input"]) != `"text"` {
		t.Errorf("responses without earlier messages: input %s (%v), want the text alone", got["input"], err)
	}
}
