package replay

import (
	"testing"

	"github.com/llmreplay/llmreplay/media"
	"github.com/llmreplay/llmreplay/replay/images"
)

// TestImageLookAhead: a trace of large images bounds the look-ahead to about
// imageLookAheadBytes of them (never below minImageLookAhead); one of usual images keeps
// the default (0).
func TestImageLookAhead(t *testing.T) {
	rule, _ := media.LookupRule(media.DefaultRule)
	builder := func(f media.Format) *images.Builder {
		return images.New(images.Options{Rule: rule, Format: f, Width: 1024, Height: 1024, Seed: 1})
	}
	png := builder(media.PNG)
	probe, err := png.Probe(1024, 1024)
	if err != nil {
		t.Fatal(err)
	}
	// 300 images over 100 rows: 3 a row.
	got, err := imageLookAhead(png, map[[2]int]int64{{1024, 1024}: 300}, 100)
	want := imageLookAheadBytes / (3 * len(probe.Base64))
	if err != nil || got != max(want, minImageLookAhead) || got >= DefaultLookAhead {
		t.Errorf("PNG 1024x1024, 3 a row (%d bytes each): look-ahead %d, %v; want %d", len(probe.Base64), got, err, want)
	}
	if got, err := imageLookAhead(png, map[[2]int]int64{{1024, 1024}: 30000}, 100); err != nil || got != minImageLookAhead {
		t.Errorf("300 PNGs a row: look-ahead %d, %v; want the least, %d", got, err, minImageLookAhead)
	}
	if got, err := imageLookAhead(builder(media.JPEG), map[[2]int]int64{{512, 512}: 100}, 100); err != nil || got != 0 {
		t.Errorf("one 512x512 JPEG a row: look-ahead %d, %v; want the default (0)", got, err)
	}
}
