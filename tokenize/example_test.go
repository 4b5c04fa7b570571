package tokenize_test

import (
	"fmt"

	"github.com/llmreplay/llmreplay/tokenize"
)

func ExampleBuilder_AppendPrompt() {
	enc, _ := tokenize.Get(tokenize.O200kBase)
	b, _ := tokenize.NewBuilder(enc, tokenize.BuilderOptions{})
	var buf []byte
	for _, p := range []tokenize.PromptSpec{
		{RequestID: 1, Tokens: 12, Blocks: []int64{7}, BlockTokens: 8},
		{RequestID: 2, Tokens: 12, Blocks: []int64{7}, BlockTokens: 8},
		{RequestID: 3, Tokens: 5},
	} {
		buf, _ = b.AppendPrompt(buf[:0], p)
		fmt.Printf("%d tokens:%s\n", enc.Count(string(buf)), buf)
	}
	// Output:
	// 12 tokens: on indicate answer take suppose selection struggle above to pay final which
	// 12 tokens: on indicate answer take suppose selection struggle above is insurance walk wide
	// 5 tokens: for century style taken square
}
