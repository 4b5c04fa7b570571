// Package tokenize builds prompt text (and token-id prompts) of an exact token length with
// prefix sharing exactly where a trace says, counts tokens, and fits a calibration to the
// server's own counts. It is a leaf: it sends nothing over the network (package wire asks
// the server to count; tokenize only fits what it says), and tiktoken's encodings are
// embedded, so nothing is downloaded at run time.
package tokenize

import (
	"fmt"
	"sync"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// Encoding names supported.
const (
	CL100kBase = "cl100k_base"
	O200kBase  = "o200k_base"
)

var (
	loaderOnce sync.Once
	encMu      sync.Mutex
	encCache   = map[string]*Encoding{}
)

// Encoding is a loaded tiktoken encoding. It is safe for concurrent use.
type Encoding struct {
	name string
	tk   *tiktoken.Tiktoken
}

// Get returns the named encoding (cl100k_base or o200k_base), loading it once from the
// encodings embedded in the binary.
func Get(name string) (*Encoding, error) {
	loaderOnce.Do(func() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) })
	encMu.Lock()
	defer encMu.Unlock()
	if e, ok := encCache[name]; ok {
		return e, nil
	}
	switch name {
	case CL100kBase, O200kBase:
	default:
		return nil, fmt.Errorf("tokenize: unknown encoding %q (want %s or %s)", name, CL100kBase, O200kBase)
	}
	tk, err := tiktoken.GetEncoding(name)
	if err != nil {
		return nil, fmt.Errorf("tokenize: load %s: %w", name, err)
	}
	e := &Encoding{name: name, tk: tk}
	encCache[name] = e
	return e, nil
}

// Name returns the encoding's name.
func (e *Encoding) Name() string { return e.name }

// Encode returns the token ids of text (special tokens are encoded as ordinary text).
func (e *Encoding) Encode(text string) []int { return e.tk.EncodeOrdinary(text) }

// Decode returns the text of token ids.
func (e *Encoding) Decode(ids []int) string { return e.tk.Decode(ids) }

// Count returns the number of tokens in text.
func (e *Encoding) Count(text string) int { return len(e.tk.EncodeOrdinary(text)) }
