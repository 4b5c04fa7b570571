package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// This file is all a new API needs: its Kind (path, body, stream decoder) and its
// registration. The toy API posts {"input": ...} to /toy/generate and streams
// {"piece":"...","think":true,"tokens":n,"stop":true} events, which its own decoder reads;
// nothing else in the package knows of it, yet ParseAPI, APIURL, NewEncoder and Lookup
// serve it like the built-ins.

var toyKind = Kind{
	Name: "toy",
	Path: "/toy/generate",
	AppendPrompt: func(b, prompt []byte, _ bool) []byte {
		b = append(b, `,"input":`...)
		b = AppendJSONBytes(b, prompt)
		return append(b, '}')
	},
	Decode: func(data []byte, c *Chunk) error {
		var ev struct {
			Piece  string `json:"piece"`
			Think  bool   `json:"think"`
			Tokens *int32 `json:"tokens"`
			Stop   bool   `json:"stop"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return err
		}
		*c = Chunk{Text: c.Text[:0], Reasoning: c.Reasoning[:0], Choices: 1, Finished: ev.Stop}
		if ev.Piece != "" {
			c.Output = true
			c.Text = append(c.Text, ev.Piece...)
			if ev.Think {
				c.Reasoning = append(c.Reasoning, ev.Piece...)
			}
		}
		if ev.Tokens != nil {
			c.Usage, c.HasCompletion, c.CompletionTokens = true, true, *ev.Tokens
		}
		return nil
	},
}

func init() { Register(&toyKind) }

func TestToyKind(t *testing.T) {
	api, err := ParseAPI("toy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseAPI("nope"); err == nil || !strings.Contains(err.Error(), "want completions, chat, messages, responses, embeddings, rerank or toy") {
		t.Errorf("ParseAPI lists %v", err)
	}
	base, _ := BaseURL("http://h:8000")
	if got := APIURL(base, api).String(); got != "http://h:8000/v1/toy/generate" {
		t.Errorf("URL %s", got)
	}
	e, err := NewEncoder(api, BackendVLLM, false)
	if err != nil {
		t.Fatal(err)
	}
	body := e.AppendBody(nil, e.AppendStart(nil, "m"), []byte("say \"hi\""), 3)
	want := `{"model":"m","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"temperature":0,"ignore_eos":true,"max_tokens":3,"min_tokens":3,"input":"say \"hi\""}`
	if string(body) != want {
		t.Errorf("body\n got %s\nwant %s", body, want)
	}
	// A conversation goes to an API without messages as its prompt's text.
	if got := e.AppendMessagesBody(nil, nil, []byte(`{}`), 1); !bytes.HasSuffix(got, []byte(`"input":"{}"}`)) {
		t.Errorf("messages body %s", got)
	}

	// Decode a stream through the registry, as a client does: one Chunk, reused.
	stream := "data: {\"piece\":\"hm\",\"think\":true}\n\ndata: {\"piece\":\" yes\",\"tokens\":2}\n\ndata: {\"stop\":true,\"tokens\":2}\n\n"
	k, ok := Lookup(api)
	if !ok {
		t.Fatal("toy not registered")
	}
	var c Chunk
	var text, reasoning []byte
	var outputs int
	var finished bool
	var tokens int32
	for _, ev := range strings.Split(strings.TrimSpace(stream), "\n\n") {
		if err := k.Decoder()([]byte(strings.TrimPrefix(ev, "data: ")), &c); err != nil {
			t.Fatal(err)
		}
		if c.Output {
			outputs++
			text = append(text, c.Text...)
			reasoning = append(reasoning, c.Reasoning...)
		}
		finished = finished || c.Finished
		if c.HasCompletion {
			tokens = c.CompletionTokens
		}
	}
	if outputs != 2 || string(text) != "hm yes" || string(reasoning) != "hm" || !finished || tokens != 2 {
		t.Errorf("stream: %d outputs, text %q, reasoning %q, finished %v, %d tokens", outputs, text, reasoning, finished, tokens)
	}
}

func TestRegisterRefuses(t *testing.T) {
	for name, k := range map[string]*Kind{
		"duplicate":  &toyKind,
		"incomplete": {Name: "half", Path: "/half"},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s kind registered", name)
				}
			}()
			Register(k)
		}()
	}
}
