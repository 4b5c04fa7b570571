package wire

// completionsKind is OpenAI's legacy completions API: POST /completions with a "prompt",
// a string or (vLLM, SGLang) a list of token ids; its stream chunks carry choices[].text.
var completionsKind = Kind{
	Name:            APICompletions,
	Path:            "/completions",
	OpenAIMaxTokens: "max_tokens",
	TokenIDs:        true,
	AppendPrompt:    appendCompletionsPrompt,
}

func appendCompletionsPrompt(b, prompt []byte, tokenIDs bool) []byte {
	b = append(b, `,"prompt":`...)
	if tokenIDs {
		b = append(b, prompt...) // already a JSON array of ids
	} else {
		b = AppendJSONBytes(b, prompt)
	}
	return append(b, '}')
}
