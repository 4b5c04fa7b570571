package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// toolsKinds are the registered kinds that take tool definitions: every one is checked
// below, so an API added with AppendTools is covered without a test of its own.
func toolsKinds(t *testing.T) []*Kind {
	t.Helper()
	var ks []*Kind
	for _, a := range APIs() {
		if k, _ := Lookup(a); k.AppendTools != nil {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		t.Fatal("no registered kind takes tools")
	}
	return ks
}

// findDescription reports whether v holds, at any depth, a "description" equal to want.
func findDescription(v any, want string) bool {
	switch x := v.(type) {
	case map[string]any:
		if d, ok := x["description"].(string); ok && d == want {
			return true
		}
		for _, e := range x {
			if findDescription(e, want) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if findDescription(e, want) {
				return true
			}
		}
	}
	return false
}

// TestToolsBodies: for every kind with tools and every backend, a body with tools is
// valid JSON with a one-tool "tools" array whose description is the text given, and is
// the body without tools with the kind's tools field inserted before the prompt: the
// other fields are as they were (TestBodiesUnchanged pins those). The three builders
// agree, the shared context's offset included.
func TestToolsBodies(t *testing.T) {
	text := "search \"files\"\n\x00 é" + strings.Repeat(" word", 50)
	desc := AppendJSONContent(nil, []byte(text))
	field := func(k *Kind) string { return string(k.AppendTools(nil, desc)) }
	for _, k := range toolsKinds(t) {
		for _, be := range []Backend{BackendVLLM, BackendSGLang, BackendTGI, BackendLlamaCPP, BackendOpenAI} {
			plain, err := NewEncoder(k.Name, be, false)
			if err != nil {
				t.Fatal(err)
			}
			e := plain.WithTools(desc)
			start := e.AppendStart(nil, "m")
			msgs := []byte(`{"role":"user","content":"a"}`)
			for name, pair := range map[string][2][]byte{
				"prompt":   {e.AppendBody(nil, start, []byte("hi"), 9), plain.AppendBody(nil, start, []byte("hi"), 9)},
				"messages": {e.AppendMessagesBody(nil, start, msgs, 9), plain.AppendMessagesBody(nil, start, msgs, 9)},
			} {
				got, without := pair[0], pair[1]
				var v map[string]any
				if err := json.Unmarshal(got, &v); err != nil {
					t.Fatalf("%s %s %s: %v\n%s", k.Name, be, name, err, got)
				}
				tools, ok := v["tools"].([]any)
				if !ok || len(tools) != 1 || !findDescription(tools[0], text) {
					t.Errorf("%s %s %s: tools %v, want one tool described %q", k.Name, be, name, v["tools"], text)
				}
				if string(bytes.Replace(got, []byte(field(k)), nil, 1)) != string(without) {
					t.Errorf("%s %s %s: with tools\n%s\nis not the body without them\n%s\nwith %s inserted", k.Name, be, name, got, without, field(k))
				}
			}
			// The context body: joined around a context that holds a NUL, it is the messages body.
			ctx := []byte(`{"role":"user","content":"\u0000 a"}`)
			body, at := e.AppendContextBody(nil, start, 9, []byte(`,{"role":"user","content":"b"}`))
			joined := string(body[:at]) + string(ctx) + string(body[at:])
			if want := string(e.AppendMessagesBody(nil, start, append(append([]byte{}, ctx...), `,{"role":"user","content":"b"}`...), 9)); k.AppendMessages != nil && joined != want {
				t.Errorf("%s %s: context body\n%s\nwant\n%s", k.Name, be, joined, want)
			}
		}
	}
}

// TestToolsChatBody pins chat's body with tools byte for byte (OpenAI's chat completions
// reference, "tools": [{"type": "function", "function": {name, description, parameters}}]).
func TestToolsChatBody(t *testing.T) {
	e, _ := NewEncoder(APIChat, BackendVLLM, false)
	got := string(e.WithTools([]byte(`a \"b\"`)).AppendBody(nil, e.AppendStart(nil, "m"), []byte("hi"), 3))
	want := `{"model":"m","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"temperature":0,"ignore_eos":true,"max_tokens":3,"min_tokens":3,"tools":[{"type":"function","function":{"name":"tool_0","description":"a \"b\"","parameters":{"type":"object","properties":{}}}}],"messages":[{"role":"user","content":"hi"}]}`
	if got != want {
		t.Errorf("chat body with tools\n got %s\nwant %s", got, want)
	}
}

// TestToolsIgnored: an empty description, or a kind without tools, leaves the body as
// it was without WithTools (the caller put the tools' tokens in the prompt's text).
func TestToolsIgnored(t *testing.T) {
	for _, c := range []struct {
		api  API
		desc []byte
	}{{APIChat, nil}, {APIChat, []byte{}}, {APICompletions, []byte("tools")}} {
		e, _ := NewEncoder(c.api, BackendVLLM, false)
		start := e.AppendStart(nil, "m")
		if got, want := e.WithTools(c.desc).AppendBody(nil, start, []byte("hi"), 3), e.AppendBody(nil, start, []byte("hi"), 3); !bytes.Equal(got, want) {
			t.Errorf("%s with tools %q: %s, want %s", c.api, c.desc, got, want)
		}
	}
	if e, _ := NewEncoder(APICompletions, BackendVLLM, false); e.TakesTools() {
		t.Error("completions takes tools")
	}
	if e, _ := NewEncoder(APIChat, BackendVLLM, false); !e.TakesTools() {
		t.Error("chat takes no tools")
	}
}

// TestToolsBodyAllocs: a body with tools, into a buffer with room, allocates nothing,
// for every kind with tools and each builder.
func TestToolsBodyAllocs(t *testing.T) {
	desc := AppendJSONContent(nil, []byte(strings.Repeat("a tool \"x\" ", 200)))
	prompt := []byte(strings.Repeat("a \"b\"\n", 100))
	msgs := []byte(`{"role":"user","content":"a"}`)
	for _, k := range toolsKinds(t) {
		plain, _ := NewEncoder(k.Name, BackendVLLM, false)
		start := plain.AppendStart(nil, "m")
		buf := make([]byte, 0, 16384)
		if n := testing.AllocsPerRun(100, func() { buf = plain.WithTools(desc).AppendBody(buf[:0], start, prompt, 128) }); n != 0 {
			t.Errorf("%s: %v allocations per body with tools", k.Name, n)
		}
		if n := testing.AllocsPerRun(100, func() { buf = plain.WithTools(desc).AppendMessagesBody(buf[:0], start, msgs, 128) }); n != 0 {
			t.Errorf("%s: %v allocations per messages body with tools", k.Name, n)
		}
		if n := testing.AllocsPerRun(100, func() { buf, _ = plain.WithTools(desc).AppendContextBody(buf[:0], start, 128, msgs) }); n != 0 {
			t.Errorf("%s: %v allocations per context body with tools", k.Name, n)
		}
	}
}
