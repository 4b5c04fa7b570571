package images

import (
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/media"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

func testImages(t *testing.T, reuse float64, seed uint64) *Builder {
	t.Helper()
	rule, err := media.LookupRule("fixed:100")
	if err != nil {
		t.Fatal(err)
	}
	return New(Options{Rule: rule, Format: media.JPEG, Width: 64, Height: 48, Reuse: reuse, Seed: seed})
}

// imagesOf splits n one-image requests of 32x32 and returns their images.
func imagesOf(t *testing.T, b *Builder, n int) []wire.Image {
	t.Helper()
	var out []wire.Image
	for i := range n {
		r := trace.Request{ID: int64(i), PromptTokens: 500, OutputTokens: 1, Images: []trace.Image{{Width: 32, Height: 32}}}
		text, s, err := b.Split(&r)
		if err != nil {
			t.Fatal(err)
		}
		if text.PromptTokens != 400 || s.Tokens != 100 || len(s.Images) != 1 || s.Images[0].MIME != "image/jpeg" {
			t.Fatalf("request %d: text %d tokens, images %d counted %d (%s); want 400, 1, 100, image/jpeg", i, text.PromptTokens, len(s.Images), s.Tokens, s.Images[0].MIME)
		}
		out = append(out, s.Images[0])
	}
	return out
}

// TestImagesDistinctUnlessReused: by default every image sent is distinct; the same seed
// sends the same bytes; --image-reuse repeats earlier images in about its share, as the
// seed decides; 1 repeats the first image ever after.
func TestImagesDistinctUnlessReused(t *testing.T) {
	a, b := imagesOf(t, testImages(t, 0, 7), 40), imagesOf(t, testImages(t, 0, 7), 40)
	seen := map[string]bool{}
	for i := range a {
		if string(a[i].Base64) != string(b[i].Base64) {
			t.Errorf("image %d differs between two runs of one seed", i)
		}
		seen[string(a[i].Base64)] = true
	}
	if len(seen) != len(a) {
		t.Errorf("%d distinct images of %d sent without --image-reuse", len(seen), len(a))
	}
	other := imagesOf(t, testImages(t, 0, 8), 1)
	if string(other[0].Base64) == string(a[0].Base64) {
		t.Error("another seed sends the same first image")
	}
	all := imagesOf(t, testImages(t, 1, 7), 10)
	for i := range all {
		if string(all[i].Base64) != string(all[0].Base64) {
			t.Errorf("--image-reuse 1: image %d is not the first repeated", i)
		}
	}
	half := testImages(t, 0.5, 7)
	got := imagesOf(t, half, 400)
	distinct := map[string]bool{}
	for _, im := range got {
		distinct[string(im.Base64)] = true
	}
	if n, _ := half.Made(); n != int64(len(distinct)) || n < 140 || n > 260 {
		t.Errorf("--image-reuse 0.5: %d images made, %d distinct sent of 400; want them equal and about 200", n, len(distinct))
	}
}

// TestImagesSizesAndText: an image the trace gives no size for is sent at the default
// size; the text is what the rule leaves; a row whose images leave no text is refused,
// naming the request and what to change.
func TestImagesSizesAndText(t *testing.T) {
	rule, _ := media.LookupRule("qwen2-vl")
	b := New(Options{Rule: rule, Format: media.PNG, Width: 280, Height: 56, Seed: 1})
	r := trace.Request{ID: 5, PromptTokens: 1000, OutputTokens: 1, Images: []trace.Image{{}, {}}}
	text, s, err := b.Split(&r)
	per := int32(rule.Tokens(280, 56))
	if err != nil || s.Tokens != 2*per || text.PromptTokens != 1000-2*per || s.Images[0].MIME != "image/png" {
		t.Fatalf("two images of unknown size: %v, counted %d, text %d; want %d, %d", err, s.Tokens, text.PromptTokens, 2*per, 1000-2*per)
	}
	r.PromptTokens = 2 * per
	if _, _, err := b.Split(&r); err == nil || !strings.Contains(err.Error(), "request 5") || !strings.Contains(err.Error(), "--image-rule") {
		t.Errorf("images that leave no text: %v; want an error naming request 5 and --image-rule", err)
	}
	plain := trace.Request{ID: 6, PromptTokens: 10, OutputTokens: 1}
	if text, s, err := b.Split(&plain); err != nil || text.PromptTokens != 10 || s.Images != nil {
		t.Errorf("a row without images: %v, %d, %v", err, text.PromptTokens, s.Images)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string][2]int{"1024x768": {1024, 768}, "1X1": {1, 1}} {
		if w, h, err := ParseSize(in); err != nil || w != want[0] || h != want[1] {
			t.Errorf("%q: %d x %d, %v", in, w, h, err)
		}
	}
	for _, in := range []string{"", "1024", "0x5", "5x-1", "20000x10", "axb"} {
		if _, _, err := ParseSize(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}
