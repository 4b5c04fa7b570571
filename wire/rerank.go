package wire

// APIRerank is the rerank API of vLLM, Jina and Cohere: POST /rerank.
const APIRerank API = "rerank"

// rerankKind is the Jina- and Cohere-shaped rerank endpoint as vLLM serves it
// (vllm/entrypoints/pooling/score/protocol.py, RerankRequest and RerankResponse; also at
// /v1/rerank and /v2/rerank): {"model":M,"query":"...","documents":["...",...]}, answered
// by one JSON body {"id":...,"model":M,"usage":{"total_tokens":T},"results":[{"index":i,
// "document":{"text":...},"relevance_score":s},...]}, one element of results per document
// (top_n 0, the default, returns all). The first input is the query, the rest the
// documents.
//
// vLLM's usage has total_tokens only (RerankUsage), and it counts what the model saw: each
// query-document pair, the query once per document, with the tokenizer's separators. So
// the record's prompt_tokens_server is that count, larger than the query and documents
// sent.
var rerankKind = Kind{
	Name:         APIRerank,
	Path:         "/rerank",
	Unary:        true,
	AppendPrompt: appendRerankPrompt,
	AppendInputs: appendRerankInputs,
	Answer:       UnaryAnswer{Array: "results", Usage: "total_tokens"},
}

// appendRerankPrompt sends one prompt as a query with one document, itself.
func appendRerankPrompt(b, prompt []byte, _ bool) []byte {
	return appendRerankInputs(b, [][]byte{prompt, prompt})
}

func appendRerankInputs(b []byte, inputs [][]byte) []byte {
	b = append(b, `,"query":`...)
	if len(inputs) > 0 {
		b = AppendJSONBytes(b, inputs[0])
		inputs = inputs[1:]
	} else {
		b = append(b, `""`...)
	}
	b = append(b, `,"documents":[`...)
	b = appendStrings(b, inputs)
	return append(b, `]}`...)
}
