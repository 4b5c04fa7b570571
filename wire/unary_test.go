package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

// TestUnaryBodies: an embeddings body is OpenAI's embeddings request and a rerank body
// vLLM's RerankRequest, for every backend, with the inputs as sent and no field of a
// generation (stream, stream_options, temperature, ignore_eos, max_tokens ...).
func TestUnaryBodies(t *testing.T) {
	inputs := [][]byte{[]byte(`one "two"`), []byte("three\nfour"), []byte("five")}
	for _, b := range []Backend{BackendVLLM, BackendSGLang, BackendTGI, BackendLlamaCPP, BackendOpenAI} {
		for _, api := range []API{APIEmbeddings, APIRerank} {
			enc, err := NewEncoder(api, b, false)
			if err != nil {
				t.Fatal(err)
			}
			if !enc.Kind().Unary || enc.ForcesLength() {
				t.Errorf("%s: Unary %v, ForcesLength %v", api, enc.Kind().Unary, enc.ForcesLength())
			}
			body := enc.AppendInputsBody(nil, enc.AppendStart(nil, "m"), inputs)
			var got map[string]any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("%s %s: %v: %s", api, b, err, body)
			}
			want := map[string]any{"model": "m", "encoding_format": "base64", "input": []any{`one "two"`, "three\nfour", "five"}}
			if api == APIRerank {
				want = map[string]any{"model": "m", "query": `one "two"`, "documents": []any{"three\nfour", "five"}}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s %s: body %s, want the fields %v", api, b, body, want)
			}
			// AppendBody (one prompt) makes the same shape.
			one := enc.AppendBody(nil, enc.AppendStart(nil, "m"), []byte("p"), 99)
			if !json.Valid(one) || bytes.Contains(one, []byte("99")) || bytes.Contains(one, []byte("stream")) {
				t.Errorf("%s %s: one-prompt body %s", api, b, one)
			}
		}
	}
	if Path(APIEmbeddings) != "/embeddings" || Path(APIRerank) != "/rerank" {
		t.Errorf("paths %q %q", Path(APIEmbeddings), Path(APIRerank))
	}
}

// Path returns a registered kind's path (tests).
func Path(a API) string {
	k, _ := Lookup(a)
	return k.Path
}

// floatsBase64 is an embedding as OpenAI's base64 encoding_format sends it: the base64 of
// its little-endian float32s.
func floatsBase64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// embeddingsBody is an embeddings response in the shape of OpenAI's reference (and
// Ollama v0.17.4's ToEmbeddingList): n embeddings of dims dimensions, base64 or floats.
func embeddingsBody(n, dims int, b64 bool, promptTokens int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"object":"list","data":[`)
	v := make([]float32, dims)
	for i := range n {
		for j := range v {
			v[j] = float32(math.Sin(float64(i*dims + j)))
		}
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"object":"embedding","embedding":`)
		if b64 {
			sb.WriteString(strconv.Quote(floatsBase64(v)))
		} else {
			e, _ := json.Marshal(v)
			sb.Write(e)
		}
		fmt.Fprintf(&sb, `,"index":%d}`, i)
	}
	fmt.Fprintf(&sb, `],"model":"m","usage":{"prompt_tokens":%d,"total_tokens":%d}}`, promptTokens, promptTokens)
	return []byte(sb.String())
}

// rerankBody is a rerank response in vLLM's shape (RerankResponse): n results.
func rerankBody(n, totalTokens int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"id":"rerank-1","model":"m","usage":{"total_tokens":` + strconv.Itoa(totalTokens) + `},"results":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"index":%d,"document":{"text":"d%d"},"relevance_score":0.%d}`, n-1-i, i, i)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

var (
	embedAnswer  = UnaryAnswer{Array: "data", Usage: "prompt_tokens"}
	rerankAnswer = UnaryAnswer{Array: "results", Usage: "total_tokens"}
)

// TestDecodeUnary: the scanner reads the answer's count, the usage and the error message
// of the engines' shapes, and says why a body is not JSON, in whatever pieces it comes.
func TestDecodeUnary(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		a    UnaryAnswer
		want UnaryBody
		err  string
	}{
		{"embeddings base64", string(embeddingsBody(3, 8, true, 41)), embedAnswer, UnaryBody{Count: 3, PromptTokens: 41}, ""},
		{"embeddings floats", string(embeddingsBody(5, 4, false, 12)), embedAnswer, UnaryBody{Count: 5, PromptTokens: 12}, ""},
		{"rerank", string(rerankBody(4, 99)), rerankAnswer, UnaryBody{Count: 4, PromptTokens: 99}, ""},
		{"rerank read as embeddings", string(rerankBody(4, 99)), embedAnswer, UnaryBody{Count: -1, PromptTokens: -1}, ""},
		{"no usage", `{"data":[1,2]}`, embedAnswer, UnaryBody{Count: 2, PromptTokens: -1}, ""},
		{"usage not an integer", `{"data":[],"usage":{"prompt_tokens":1.5}}`, embedAnswer, UnaryBody{Count: 0, PromptTokens: -1}, ""},
		{"escaped key", `{"d\u0061ta":[{},{}],"usage":{"prompt_tokens":7}}`, embedAnswer, UnaryBody{Count: 2, PromptTokens: 7}, ""},
		{"nested data is not the answer", `{"x":{"data":[1,2,3]},"data":[[1,2],[3]]}`, embedAnswer, UnaryBody{Count: 2, PromptTokens: -1}, ""},
		{"last one counts", `{"data":[1],"data":[1,2,3],"usage":{"prompt_tokens":3},"usage":{}}`, embedAnswer, UnaryBody{Count: 3, PromptTokens: -1}, ""},
		// vLLM's and OpenAI's error object; vLLM's older ErrorResponse.
		{"error object", `{"error":{"message":"input too \"long\"","type":"BadRequestError","code":400}}`, embedAnswer,
			UnaryBody{Count: -1, PromptTokens: -1, Error: `input too "long"`}, ""},
		{"old error", `{"object":"error","message":"model not found","type":"NotFoundError","param":null,"code":404}`, embedAnswer,
			UnaryBody{Count: -1, PromptTokens: -1, Error: "model not found"}, ""},
		{"cut short", `{"data":[{"embedding":"AAAA"},{"embed`, embedAnswer, UnaryBody{}, "JSON cut short: the body ended after 37 bytes inside it"},
		{"empty", ``, embedAnswer, UnaryBody{}, "empty body"},
		{"trailing garbage", `{"data":[]} x`, embedAnswer, UnaryBody{}, `malformed JSON at byte 12: invalid character 'x' after the top-level value`},
		{"bad number", `{"data":[01]}`, embedAnswer, UnaryBody{}, `malformed JSON at byte 10: invalid character '1' after`},
	} {
		for _, piece := range []int{1, 3, 64, 1 << 20} {
			s := NewUnaryScanner(tc.a)
			b := []byte(tc.body)
			for len(b) > 0 {
				n := min(piece, len(b))
				s.Write(b[:n])
				b = b[n:]
			}
			got, err := s.Close()
			switch {
			case tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err)):
				t.Errorf("%s (pieces of %d): %+v, %v; want the error %q", tc.name, piece, got, err, tc.err)
			case tc.err == "" && (err != nil || got != tc.want):
				t.Errorf("%s (pieces of %d): %+v, %v; want %+v", tc.name, piece, got, err, tc.want)
			}
		}
	}
}

// oracleUnary is what encoding/json makes of body: the reference the scanner must agree
// with.
func oracleUnary(body []byte, a UnaryAnswer) (UnaryBody, bool) {
	if !json.Valid(body) {
		return UnaryBody{}, false
	}
	want := UnaryBody{Count: -1, PromptTokens: -1}
	var top map[string]json.RawMessage
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' || json.Unmarshal(body, &top) != nil {
		return want, true
	}
	var arr []json.RawMessage
	if raw, ok := top[a.Array]; ok && bytes.HasPrefix(raw, []byte("[")) && json.Unmarshal(raw, &arr) == nil {
		want.Count = len(arr)
	}
	var usage map[string]json.RawMessage
	if raw, ok := top["usage"]; ok && bytes.HasPrefix(raw, []byte("{")) && json.Unmarshal(raw, &usage) == nil {
		if n, err := strconv.ParseInt(string(usage[a.Usage]), 10, 32); err == nil && n >= 0 {
			want.PromptTokens = int32(n)
		}
	}
	str := func(raw json.RawMessage) string {
		var s string
		if bytes.HasPrefix(raw, []byte(`"`)) && json.Unmarshal(raw, &s) == nil {
			return s
		}
		return ""
	}
	msg := str(top["error"])
	var eo map[string]json.RawMessage
	if raw := top["error"]; bytes.HasPrefix(raw, []byte("{")) && json.Unmarshal(raw, &eo) == nil {
		msg = str(eo["message"])
	}
	if msg == "" {
		msg = str(top["message"])
	}
	want.Error = msg
	return want, true
}

// FuzzUnaryScanner: on any body, in any pieces, the scanner accepts exactly what
// encoding/json accepts and says what it decodes (messages when not cut).
func FuzzUnaryScanner(f *testing.F) {
	f.Add(embeddingsBody(2, 3, true, 9), uint8(7))
	f.Add(embeddingsBody(2, 3, false, 9), uint8(1))
	f.Add(rerankBody(3, 30), uint8(13))
	f.Add([]byte(`{"error":{"message":"\ud83d\ude00 x"},"message":"y","data":null}`), uint8(2))
	f.Add([]byte(`{"data":[1e5,-0.5,"\u00e9",true,false,null,{"a":[]}],"usage":{"prompt_tokens":2147483647}}`), uint8(5))
	f.Add([]byte(`[{"data":[1]}]`), uint8(3))
	f.Add([]byte(` 12 `), uint8(1))
	f.Fuzz(func(t *testing.T, body []byte, piece uint8) {
		for _, a := range []UnaryAnswer{embedAnswer, rerankAnswer} {
			want, valid := oracleUnary(body, a)
			s := NewUnaryScanner(a)
			for b, n := body, int(piece)+1; len(b) > 0; {
				k := min(n, len(b))
				s.Write(b[:k])
				b = b[k:]
			}
			got, err := s.Close()
			if valid != (err == nil) {
				t.Fatalf("%q: scanner error %v, encoding/json valid %v", body, err, valid)
			}
			if !valid {
				continue
			}
			if len(want.Error) > maxUnaryMessage/2 || strings.ContainsRune(want.Error, '\\') {
				got.Error, want.Error = "", "" // a long message is cut; compared below in part
			}
			if got != want {
				t.Fatalf("%q (%v): scanner %+v, encoding/json %+v", body, a, got, want)
			}
		}
	})
}

// BenchmarkUnaryScanner: reading an embeddings answer of 1,000 inputs of 4,096 dimensions,
// base64 (what replay asks for) and as JSON floats, in the 16 KiB pieces a connection
// delivers.
func BenchmarkUnaryScanner(b *testing.B) {
	for _, b64 := range []bool{true, false} {
		body := embeddingsBody(1000, 4096, b64, 123456)
		name := "floats"
		if b64 {
			name = "base64"
		}
		b.Run(name, func(b *testing.B) {
			s := NewUnaryScanner(embedAnswer)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				s.Reset(embedAnswer)
				for p := body; len(p) > 0; {
					n := min(16<<10, len(p))
					s.Write(p[:n])
					p = p[n:]
				}
				if got, err := s.Close(); err != nil || got.Count != 1000 {
					b.Fatal(got, err)
				}
			}
			b.ReportMetric(float64(len(body))/1e6, "MB/body")
		})
	}
}
