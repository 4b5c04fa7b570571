package replay

import (
	"strconv"

	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
)

// PrompterOptions configure the production prompter (NewPrompter).
type PrompterOptions struct {
	Builder *tokenize.Builder // builds prompt text (and token ids) of an exact length
	// Encoding encodes a recorded prompt into token ids (TokenIDs only).
	Encoding *tokenize.Encoding
	// TokenIDs: prompts are JSON arrays of token ids (--prompt-format token-ids), ids below
	// VocabSize; else text.
	TokenIDs  bool
	VocabSize int
	// BlockTokens is the trace's tokens per prefix block (0: the trace has none): a
	// request's leading blocks are built once per block id, so equal ids share a prefix.
	BlockTokens int
	// Calibration, when set, corrects every built prompt's length so that the server
	// counts the trace's (text prompts).
	Calibration *tokenize.Calibration
}

// NewPrompter returns the prompter `llmreplay replay` uses: a recorded prompt is sent as
// recorded (encoded to ids for token-id prompts); else the builder makes one of the
// request's length, with its prefix blocks, corrected by the calibration when there is one.
// The prompter is not safe for concurrent use: Run calls it from one goroutine.
func NewPrompter(o PrompterOptions) Prompter {
	p := &prompter{o: o}
	return PrompterFunc(p.append)
}

type prompter struct {
	o   PrompterOptions
	ids []int32 // reused: the prompter runs on the one goroutine that prepares requests
}

func (p *prompter) append(dst []byte, r *trace.Request) ([]byte, error) {
	o := &p.o
	if r.Prompt != "" && !o.TokenIDs {
		return append(dst, r.Prompt...), nil
	}
	spec := tokenize.PromptSpec{RequestID: r.ID, Tokens: int(r.PromptTokens)}
	if o.BlockTokens > 0 {
		spec.Blocks, spec.BlockTokens = r.PrefixBlocks, o.BlockTokens
	}
	if o.Calibration != nil {
		// The whole prompt is corrected; shared blocks keep their builder length, so
		// sharing stays exact and the tail absorbs the correction.
		spec.Tokens = o.Calibration.Target(spec.Tokens)
	}
	if !o.TokenIDs {
		return o.Builder.AppendPrompt(dst, spec)
	}
	p.ids = p.ids[:0]
	if r.Prompt != "" {
		for _, id := range o.Encoding.Encode(r.Prompt) {
			p.ids = append(p.ids, int32(id))
		}
	} else {
		var err error
		if p.ids, err = o.Builder.AppendTokenIDs(p.ids, spec, o.VocabSize); err != nil {
			return dst, err
		}
	}
	dst = append(dst, '[')
	for i, id := range p.ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(id), 10)
	}
	return append(dst, ']'), nil
}
