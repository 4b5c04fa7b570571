package replay

import (
	"testing"
)

var chunkSeeds = []string{
	`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"prompt_tokens":100,"total_tokens":101,"completion_tokens":1}}`,
	`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"hm\u00e9\n"}}]}`,
	`{"choices":[{"delta":{"reasoning":"x"},"finish_reason":"length"}],"usage":null}`,
	`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5}}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}`,
	`{"error":{"message":"boom","code":500}}`,
	`{"object":"error","message":"overloaded","code":503}`,
	`{"Choices":[{"Text":"x"}]}`,
	`{"choices":[{"text":"a"}],"choices":[{"text":"b"}]}`,
	`{"choices":[{"text":5}]}`,
	`{"usage":{"prompt_tokens":1.5}}`,
	`{"usage":{"prompt_tokens":99999999999}}`,
	`{"choices":[{"text":"\ud83d\ude00 \ud800"}]}`,
	`{"choices":[null,{"text":"y"}]} `,
	`null`, `[]`, `{}`, `{"a":[1,-0.5e+3,true,false,null,{"b":"c"}]}`, `{"a":01}`, `{"x":"\x01"}`,
}

func TestParseChunk(t *testing.T) {
	var ci chunkInfo
	if err := parseChunk([]byte(chunkSeeds[0]), &ci); err != nil || !ci.output || ci.compl != 1 || ci.prompt != 100 || string(ci.text) != " the" || ci.finished {
		t.Errorf("vllm chunk: %+v, %v", ci, err)
	}
	if err := parseChunk([]byte(chunkSeeds[1]), &ci); err != nil || ci.output || ci.choices != 1 {
		t.Errorf("role chunk counts as output: %+v, %v", ci, err)
	}
	if err := parseChunk([]byte(chunkSeeds[6]), &ci); err != nil || !ci.isErr || ci.errMsg != "boom" {
		t.Errorf("error chunk: %+v, %v", ci, err)
	}
	if err := parseChunk([]byte(`{"choices":[{"text":"x"`), &ci); err == nil {
		t.Errorf("cut chunk accepted")
	}
	// The fast path takes the common vLLM chunk without falling back.
	p := chunkParser{b: []byte(chunkSeeds[0])}
	if err := p.chunk(&chunkInfo{}); err != nil {
		t.Errorf("fast path refused a vLLM chunk: %v", err)
	}
}

// FuzzParseChunk: whenever the fast scanner accepts a chunk, encoding/json accepts it
// too and agrees on everything the client uses.
func FuzzParseChunk(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, slow chunkInfo
		p := chunkParser{b: data}
		if p.chunk(&fast) != nil {
			return
		}
		if err := parseChunkJSON(data, &slow); err != nil {
			t.Fatalf("fast path accepted what encoding/json rejects (%v): %q", err, data)
		}
		if fast.output != slow.output || fast.finished != slow.finished || fast.choices != slow.choices ||
			fast.usage != slow.usage || fast.hasPrompt != slow.hasPrompt || fast.prompt != slow.prompt ||
			fast.hasCompl != slow.hasCompl || fast.compl != slow.compl || fast.isErr != slow.isErr ||
			len(fast.text) != len(slow.text) {
			t.Fatalf("disagree on %q:\nfast %+v\nslow %+v", data, fast, slow)
		}
	})
}
