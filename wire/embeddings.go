package wire

// APIEmbeddings is OpenAI's embeddings API: POST /embeddings.
const APIEmbeddings API = "embeddings"

// embeddingsKind is OpenAI's embeddings API (platform.openai.com/docs/api-reference/
// embeddings/create): {"model":M,"encoding_format":"base64","input":["...",...]}, answered
// by one JSON body {"object":"list","data":[{"object":"embedding","embedding":...,
// "index":i},...],"model":M,"usage":{"prompt_tokens":P,"total_tokens":P}}, one element of
// data per input.
//
// encoding_format is base64: each embedding comes as the base64 of its little-endian
// float32s, 5.3 bytes a dimension against ~10-20 as JSON floats, so the client reads
// about a quarter of the bytes and the server spends less time formatting floats, which
// would otherwise be in the latency measured. Every engine takes it: vLLM
// (vllm/entrypoints/pooling/base/protocol.py, EncodingRequestMixin.encoding_format: float,
// base64 or bytes), Ollama (v0.17.4 openai/openai.go, EmbedRequest.EncodingFormat and
// ToEmbeddingList), OpenAI's own; SGLang (python/sglang/srt/entrypoints/openai/
// serving_embedding.py) never reads the field and answers floats, which counts the same.
// The body asks for nothing else: no stream, sampling or length field applies.
var embeddingsKind = Kind{
	Name:         APIEmbeddings,
	Path:         "/embeddings",
	Unary:        true,
	AppendPrompt: appendEmbeddingsPrompt,
	AppendInputs: appendEmbeddingsInputs,
	Answer:       UnaryAnswer{Array: "data", Usage: "prompt_tokens"},
}

// appendEmbeddingsPrompt sends one prompt as one input.
func appendEmbeddingsPrompt(b, prompt []byte, _ bool) []byte {
	return appendEmbeddingsInputs(b, [][]byte{prompt})
}

func appendEmbeddingsInputs(b []byte, inputs [][]byte) []byte {
	b = append(b, `,"encoding_format":"base64","input":[`...)
	b = appendStrings(b, inputs)
	return append(b, `]}`...)
}

// appendStrings appends ss as JSON strings separated by commas.
func appendStrings(b []byte, ss [][]byte) []byte {
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendJSONBytes(b, s)
	}
	return b
}
