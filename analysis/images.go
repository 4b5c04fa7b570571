package analysis

import (
	"fmt"
	"math"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"
)

// Images of a run of generations (results revision 1.4: images, image_tokens): how many
// requests sent images, how many, what share of the prompt they were, and what they cost
// in TTFT (the server encodes them before the prefill). Shown only when a run sent images
// (docs/metrics.md, "Images").

// Images are the image figures, over ok requests.
type Images struct {
	Requests int64 // ok requests that sent at least one image
	Images   int64 // the images they sent
	// PerRequest = Images / Requests.
	PerRequest float64
	// TokenShare: the image_tokens of the ok requests, in percent of their prompt tokens
	// (the server's count when it gave one, else the target); a request with images whose
	// image_tokens is unknown is left out of both. NaN when none is known.
	TokenShare float64
	// TTFT of the ok requests with images and of those without, ms.
	TTFTWith, TTFTWithout stats.Quantiles
}

func hasImages(r *Report) bool { return r.Images != nil }

// imageRow reports whether request i sent images.
func imageRow(d *decode.Data, i int) bool {
	return d.Images != nil && d.Images[i] != decode.Null32 && d.Images[i] > 0
}

// images sets r.Images when an ok request of a run of generations sent images.
func (r *Report) images(d *decode.Data) {
	if d.Images == nil || r.Unary != nil {
		return
	}
	g := &Images{}
	var with, without []float64
	var imgTok, prompt int64
	known := false
	for i, s := range d.Status {
		if s != decode.StOK {
			continue
		}
		if !imageRow(d, i) {
			without = append(without, d.TTFTMS(i))
			prompt += promptTokens(d, i)
			continue
		}
		g.Requests++
		g.Images += int64(d.Images[i])
		with = append(with, d.TTFTMS(i))
		if t := d.ImageTokens; t != nil && t[i] != decode.Null32 {
			known = true
			imgTok += int64(t[i])
			prompt += promptTokens(d, i)
		}
	}
	if g.Requests == 0 {
		return
	}
	g.PerRequest = float64(g.Images) / float64(g.Requests)
	g.TokenShare = math.NaN()
	if known && prompt > 0 {
		g.TokenShare = 100 * float64(imgTok) / float64(prompt)
	}
	g.TTFTWith, g.TTFTWithout = stats.Summarize(with), stats.Summarize(without)
	r.Images = g
}

// imagesValue reads a figure of Images (NaN for a run without images).
func imagesValue(get func(*Images) any) func(*Report) any {
	return func(r *Report) any {
		if r.Images == nil {
			return math.NaN()
		}
		return get(r.Images)
	}
}

// imagesTTFT is the TTFT of the ok requests with images, or of those without.
func imagesTTFT(key, json, text, compare string, get func(*Images) stats.Quantiles) Figure {
	return Figure{Key: key, Unit: "ms", JSON: json, Column: key + "_ms", Section: "latency", Text: text, Present: hasImages,
		Compare: &CompareSpec{Name: compare, Relative: true},
		Dist: func(r *Report) stats.Quantiles {
			if r.Images == nil {
				return stats.Quantiles{}
			}
			return get(r.Images)
		}}
}

// imageFigures are the figures of a run that sent images (reportFigures places them).
var imageFigures = []Figure{
	{Key: "image_requests", JSON: "images.requests", Column: "image_requests", Section: "images", Text: "requests with images", HTML: "requests with images",
		Format: f0, Note: imageRequestsNote, HTMLNote: imageRequestsNote, Present: hasImages,
		Value: func(r *Report) any {
			if r.Images == nil {
				return int64(0)
			}
			return r.Images.Requests
		}},
	{Key: "images_per_request", JSON: "images.images_per_request", Column: "images_per_request", Section: "images", Text: "images per request (with any)",
		HTML: "images per request (with any)", Format: f2, Present: hasImages, Value: imagesValue(func(g *Images) any { return g.PerRequest })},
	{Key: "image_token_share_pct", Unit: "%", JSON: "images.image_token_share_pct", Column: "image_token_share_pct", Section: "images",
		Text: "image tokens' share of prompt", HTML: "image tokens' share of prompt tokens", Format: pct, Present: hasImages,
		Value: imagesValue(func(g *Images) any { return g.TokenShare })},
	imagesTTFT("ttft_images", "images.ttft_with_images_ms", "TTFT, with images", "TTFT with images", func(g *Images) stats.Quantiles { return g.TTFTWith }),
	imagesTTFT("ttft_no_images", "images.ttft_without_images_ms", "TTFT, without images", "TTFT without images", func(g *Images) stats.Quantiles { return g.TTFTWithout }),
}

func imageRequestsNote(r *Report) string {
	return fmt.Sprintf("of %d ok requests (%s), %d images", r.Requests.OK, pct(shareOf(r.Images.Requests, r.Requests.OK)), r.Images.Images)
}
