package tokenize

// Counter counts the tokens of a text that arrives in pieces, such as the chunks of a
// streamed completion when the server reports no usage. Pieces are buffered and the whole
// text is counted once by Count: token boundaries do not follow chunk boundaries (a word may
// arrive as "hel" then "lo", one token split over two chunks), so summing per-chunk counts
// overcounts. Memory is the text of one response, held only while it streams.
//
// The count is in this encoding's tokens, not the serving model's: for a model with another
// tokenizer it is an estimate (for English text, Llama 3 counts the same as cl100k_base for
// most words; other tokenizers differ by a few percent either way), which is why results
// record output_tokens_source = "tokenizer" beside it. A Counter is not safe for concurrent
// use; use one per response.
type Counter struct {
	enc *Encoding
	buf []byte
}

// NewCounter returns an empty Counter for e.
func (e *Encoding) NewCounter() *Counter { return &Counter{enc: e} }

// Write appends p to the text. It never fails.
func (c *Counter) Write(p []byte) (int, error) {
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// WriteString appends s to the text. It never fails.
func (c *Counter) WriteString(s string) (int, error) {
	c.buf = append(c.buf, s...)
	return len(s), nil
}

// Len returns the number of bytes written since the last Reset.
func (c *Counter) Len() int { return len(c.buf) }

// Count returns the number of tokens in the text written so far, counted as one text.
func (c *Counter) Count() int {
	if len(c.buf) == 0 {
		return 0
	}
	return c.enc.Count(string(c.buf))
}

// Reset empties the Counter, keeping its buffer for reuse.
func (c *Counter) Reset() { c.buf = c.buf[:0] }
