package trace

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// patches is a stand-in image rule for the tests (the real ones are package media's):
// one token per 28x28 patch, rounded up, plus 2 for the image's start and end markers.
func patches(w, h int) int { return ((w+27)/28)*((h+27)/28) + 2 }

func imageSpec(t *testing.T, count, width, height string) SynthSpec {
	s := baseSpec()
	s.Count = 2000
	s.Images = &SynthImages{Count: mustDist(t, count), Width: mustDist(t, width), Height: mustDist(t, height), Rule: "patches", Tokens: patches}
	return s
}

// TestSynthImagesFixed: fixed DISTs give exactly that many images of that size on every
// row; prompt_tokens is the text the trace without images drew plus the images' tokens by
// the rule given, which image_tokens records; the same spec and seed give the same bytes,
// and the spec stored in llmreplay.generator regenerates them once the rule is set again.
func TestSynthImagesFixed(t *testing.T) {
	spec := imageSpec(t, "fixed:3", "fixed:640", "fixed:480")
	spec.ToolTokens = 100
	plain := baseSpec()
	plain.Count, plain.ToolTokens = 2000, 100
	without, _ := readBytes(t, synthBytes(t, plain))
	b := synthBytes(t, spec)
	if !bytes.Equal(b, synthBytes(t, spec)) {
		t.Fatal("the same spec made different bytes")
	}
	rows, meta := readBytes(t, b)
	per := int32(patches(640, 480)) // 23 x 18 patches + 2 = 416
	for i, r := range rows {
		if len(r.Images) != 3 || r.Images[0] != (Image{640, 480}) || r.Images[2] != (Image{640, 480}) {
			t.Fatalf("row %d: images %v", i, r.Images)
		}
		if !r.HasImageTokens || r.ImageTokens != 3*per {
			t.Fatalf("row %d: image_tokens %d (%v), want %d", i, r.ImageTokens, r.HasImageTokens, 3*per)
		}
		text := r.PromptTokens - r.ImageTokens - r.ToolTokens
		if r.PromptTokens > spec.PromptMax || text < spec.PromptMin {
			t.Fatalf("row %d: prompt %d outside the clamp", i, r.PromptTokens)
		}
		// The text draws are the trace without images': below the lowered cap, equal.
		if w := without[i]; w.PromptTokens <= spec.PromptMax-3*per && r.PromptTokens != w.PromptTokens+3*per {
			t.Fatalf("row %d: prompt %d, the trace without images had %d (+%d image tokens)", i, r.PromptTokens, w.PromptTokens, 3*per)
		}
		if r.OutputTokens != without[i].OutputTokens || r.Arrival != without[i].Arrival {
			t.Fatalf("row %d: the images changed other draws", i)
		}
	}
	var gen struct {
		Spec SynthSpec `json:"spec"`
	}
	if err := json.Unmarshal([]byte(meta.Generator), &gen); err != nil {
		t.Fatal(err)
	}
	if im := gen.Spec.Images; im == nil || im.Rule != "patches" || im.Count.Kind != "fixed" || im.Count.A != 3 || im.Width.A != 640 || im.Height.A != 480 {
		t.Fatalf("generator %s does not record the images", meta.Generator)
	}
	gen.Spec.Images.Tokens = patches
	if !bytes.Equal(b, synthBytes(t, gen.Spec)) {
		t.Fatalf("the spec in llmreplay.generator does not regenerate the file:\n%s", meta.Generator)
	}
}

// TestSynthImagesDraws: counts and sizes follow their DISTs (the seed fixes the draws, so
// the tolerances, four standard errors, are checked on one sample that cannot change),
// and prompt_tokens = text + image_tokens row by row.
func TestSynthImagesDraws(t *testing.T) {
	spec := imageSpec(t, "uniform:0,4", "uniform:256,2048", "lognormal:768,200")
	spec.PromptMax = 65536 // room for 4 images of up to 2048 pixels (about 6,500 tokens)
	rows, _ := readBytes(t, synthBytes(t, spec))
	plain := baseSpec()
	plain.Count, plain.PromptMax = spec.Count, spec.PromptMax
	without, _ := readBytes(t, synthBytes(t, plain))
	var counts, widths, heights []float64
	zero := 0
	for i, r := range rows {
		counts = append(counts, float64(len(r.Images)))
		if len(r.Images) == 0 {
			zero++
			if r.Images != nil || r.HasImageTokens {
				t.Fatalf("row %d without images: %+v", i, r)
			}
			if r.PromptTokens != without[i].PromptTokens {
				t.Fatalf("row %d without images: prompt %d, want the text %d", i, r.PromptTokens, without[i].PromptTokens)
			}
			continue
		}
		want := 0
		for _, im := range r.Images {
			widths = append(widths, float64(im.Width))
			heights = append(heights, float64(im.Height))
			want += patches(int(im.Width), int(im.Height))
		}
		if !r.HasImageTokens || int(r.ImageTokens) != want {
			t.Fatalf("row %d: image_tokens %d, the rule gives %d", i, r.ImageTokens, want)
		}
		if w := without[i].PromptTokens; w <= spec.PromptMax-r.ImageTokens && r.PromptTokens != w+r.ImageTokens {
			t.Fatalf("row %d: prompt %d, want text %d + images %d", i, r.PromptTokens, w, r.ImageTokens)
		}
	}
	check := func(what string, v []float64, mean, sd float64) {
		t.Helper()
		var sum float64
		for _, x := range v {
			sum += x
		}
		got := sum / float64(len(v))
		if se := sd / math.Sqrt(float64(len(v))); math.Abs(got-mean) > 4*se {
			t.Errorf("%s: mean %.2f over %d draws, want %.2f ± %.2f", what, got, len(v), mean, 4*se)
		}
	}
	// uniform:0,4: mean 2, variance (5²−1)/12 = 2; P(0) = 1/5.
	check("count", counts, 2, math.Sqrt(2))
	if p := float64(zero) / float64(len(rows)); math.Abs(p-0.2) > 4*math.Sqrt(0.2*0.8/float64(len(rows))) {
		t.Errorf("%.3f of requests without images, want 0.2", p)
	}
	// uniform:256,2048: mean 1152, variance (1793²−1)/12.
	check("width", widths, 1152, math.Sqrt((1793*1793-1)/12.0))
	check("height", heights, 768, 200)
}

// TestSynthImagesNoRule: without a token function the images are drawn but image_tokens is
// null and prompt_tokens is the text alone.
func TestSynthImagesNoRule(t *testing.T) {
	spec := imageSpec(t, "fixed:2", "fixed:64", "fixed:32")
	spec.Images.Rule, spec.Images.Tokens = "", nil
	spec.Count = 200
	plain := baseSpec()
	plain.Count = 200
	without, _ := readBytes(t, synthBytes(t, plain))
	rows, _ := readBytes(t, synthBytes(t, spec))
	for i, r := range rows {
		if len(r.Images) != 2 || r.Images[1] != (Image{64, 32}) || r.HasImageTokens || r.PromptTokens != without[i].PromptTokens {
			t.Fatalf("row %d: %+v, want 2 images of 64x32, no image_tokens, prompt %d", i, r, without[i].PromptTokens)
		}
	}
}

// TestSynthImagesRejects: specs the generator refuses, and images too big for the clamp.
func TestSynthImagesRejects(t *testing.T) {
	turns := mustDist(t, "uniform:2,3")
	cases := []struct {
		edit func(s *SynthSpec)
		want string
	}{
		{func(s *SynthSpec) { s.Turns, s.Sessions, s.BlockTokens = &turns, 4, 16 }, "images are drawn for single requests only"},
		{func(s *SynthSpec) { s.Images.Width = Dist{Kind: "empirical", Path: "x.parquet"} }, "image width distribution: empirical is for token lengths"},
		{func(s *SynthSpec) { s.Images.Height = Dist{} }, "image height distribution is required"},
		{func(s *SynthSpec) { s.Images.Tokens = nil }, `image rule "patches" has no token function`},
	}
	for _, c := range cases {
		s := imageSpec(t, "fixed:1", "fixed:64", "fixed:64")
		c.edit(&s)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v, want %q", err, c.want)
		}
	}
	s := imageSpec(t, "fixed:16", "fixed:2048", "fixed:2048") // 16 x (74² + 2) = 87,648 tokens
	var buf bytes.Buffer
	_, err := Synth(t.Context(), s, NewWriter(&buf, Meta{}))
	if err == nil || !strings.Contains(err.Error(), "request 0: 16 images of 87648 tokens leave no room for a text of 1 tokens within the prompt clamp 4096") {
		t.Errorf("images over the clamp: %v", err)
	}
}
