package replay

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
)

func testBuilder(t testing.TB) (*tokenize.Encoding, *tokenize.Builder) {
	t.Helper()
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tokenize.NewBuilder(enc, tokenize.BuilderOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	return enc, b
}

func TestPrompterText(t *testing.T) {
	enc, b := testBuilder(t)
	p := NewPrompter(PrompterOptions{Builder: b, Encoding: enc})
	r := &trace.Request{ID: 7, PromptTokens: 50}
	got, err := p.AppendPrompt([]byte("x"), r)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := b.AppendPrompt([]byte("x"), tokenize.PromptSpec{RequestID: 7, Tokens: 50})
	if string(got) != string(want) {
		t.Fatalf("text prompt = %q, want the builder's %q", got, want)
	}
	if n := enc.Count(string(got[1:])); n != 50 {
		t.Errorf("text prompt counts %d tokens, want 50", n)
	}
	// A recorded prompt goes as recorded.
	r.Prompt = "hello there"
	if got, _ := p.AppendPrompt(nil, r); string(got) != "hello there" {
		t.Errorf("recorded prompt = %q", got)
	}
}

func TestPrompterTokenIDs(t *testing.T) {
	enc, b := testBuilder(t)
	p := NewPrompter(PrompterOptions{Builder: b, Encoding: enc, TokenIDs: true, VocabSize: 100256})
	for _, r := range []*trace.Request{{ID: 1, PromptTokens: 30}, {ID: 2, PromptTokens: 5, Prompt: "hello there, friend"}} {
		got, err := p.AppendPrompt(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int
		if err := json.Unmarshal(got, &ids); err != nil {
			t.Fatalf("token-id prompt %q is not a JSON array: %v", got, err)
		}
		want := int(r.PromptTokens)
		if r.Prompt != "" {
			want = len(enc.Encode(r.Prompt))
		}
		if len(ids) != want {
			t.Errorf("request %d: %d ids, want %d", r.ID, len(ids), want)
		}
	}
}

func TestPrompterBlocksAndCalibration(t *testing.T) {
	enc, b := testBuilder(t)
	// Two requests with the same leading block share a prefix of exactly that block.
	p := NewPrompter(PrompterOptions{Builder: b, Encoding: enc, BlockTokens: 16})
	a, err := p.AppendPrompt(nil, &trace.Request{ID: 1, PromptTokens: 40, PrefixBlocks: []int64{9, 1}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.AppendPrompt(nil, &trace.Request{ID: 2, PromptTokens: 40, PrefixBlocks: []int64{9, 2}})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := b.AppendPrompt(nil, tokenize.PromptSpec{RequestID: 1, Tokens: 16, Blocks: []int64{9}, BlockTokens: 16})
	if !strings.HasPrefix(string(a), string(block)) || !strings.HasPrefix(string(c), string(block)) || string(a) == string(c) {
		t.Errorf("requests with block 9 do not share its prefix:\n%q\n%q", a, c)
	}
	// A calibration changes the length built.
	cal := &tokenize.Calibration{Ratio: 2}
	pc := NewPrompter(PrompterOptions{Builder: b, Encoding: enc, Calibration: cal})
	got, err := pc.AppendPrompt(nil, &trace.Request{ID: 3, PromptTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if n, want := enc.Count(string(got)), cal.Target(100); n != want {
		t.Errorf("calibrated prompt counts %d builder tokens, want cal.Target(100) = %d", n, want)
	}
}

// BenchmarkPrompter: the per-request cost of the production prompter (what replay and
// bench/replaybench run), beside the constant prompter replaybench used before.
func BenchmarkPrompter(b *testing.B) {
	enc, bld := testBuilder(b)
	words := PrompterFunc(func(dst []byte, r *trace.Request) ([]byte, error) {
		for range r.PromptTokens {
			dst = append(dst, " the"...)
		}
		return dst, nil
	})
	for _, c := range []struct {
		name string
		p    Prompter
	}{
		{"words", words},
		{"text", NewPrompter(PrompterOptions{Builder: bld, Encoding: enc})},
		{"token-ids", NewPrompter(PrompterOptions{Builder: bld, Encoding: enc, TokenIDs: true, VocabSize: 100256})},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var dst []byte
			r := trace.Request{PromptTokens: 100}
			for i := 0; b.Loop(); i++ {
				r.ID = int64(i)
				var err error
				if dst, err = c.p.AppendPrompt(dst[:0], &r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
