package sim

import (
	"bytes"
	"encoding/base64"
	"hash/maphash"
	"image"
	_ "image/jpeg" // the formats a request's images may be in: image.DecodeConfig's
	_ "image/png"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/media"
)

// parsedImage is one image of a request: its size, read from its bytes, and a hash of
// them that stands for its tokens in the prefix cache's block chain (so a request that
// sends the same image again finds it cached, and another image does not).
type parsedImage struct {
	width, height int
	key           uint64
}

// imageSeed keys the images' hashes; one per process, as the prefix cache is.
var imageSeed = maphash.MakeSeed()

// imagePad is the token id /tokenize lists for an image's tokens: one of cl100k_base's
// unassigned ids below vocabSize, so no text encodes to it.
const imagePad = 100266

// parseDataURL reads an image sent as a data URL (chat's image_url.url, the Responses
// API's input_image.image_url); field names it in errors.
func parseDataURL(u, field string) (parsedImage, *apiError) {
	rest, ok := strings.CutPrefix(u, "data:")
	var data string
	if ok {
		_, data, ok = strings.Cut(rest, ";base64,")
	}
	if !ok {
		return parsedImage{}, badRequest(topField(field), "%s: the simulated engine takes images as base64 data URLs (data:image/png;base64,...), not %.40q", field, u)
	}
	return decodeImage(data, field)
}

// decodeImage reads an image's base64 bytes and its size from their header (PNG or
// JPEG), as vLLM loads a request's images before it schedules it: a bad one is a 400
// naming the part. The pixels themselves are not decoded: the size is all the rule takes.
func decodeImage(b64, field string) (parsedImage, *apiError) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return parsedImage{}, badRequest(topField(field), "%s: the image is not valid base64: %v", field, err)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil {
		return parsedImage{}, badRequest(topField(field), "%s: cannot identify the image (the simulated engine reads PNG and JPEG): %v", field, err)
	}
	if cfg.Width < 1 || cfg.Height < 1 {
		return parsedImage{}, badRequest(topField(field), "%s: the image is %dx%d pixels", field, cfg.Width, cfg.Height)
	}
	return parsedImage{width: cfg.Width, height: cfg.Height, key: maphash.String(imageSeed, b64)}, nil
}

// topField is the request's top-level field that field is inside ("messages" of
// "messages[0].content[1]"): an error's param, as the other errors name it.
func topField(field string) string {
	if i := strings.IndexAny(field, "[."); i >= 0 {
		return field[:i]
	}
	return field
}

// visionSpan is one image of a request as the engine sees it: where its tokens end in
// the prompt's token stream and its vision encoder time. The engine charges the encoder
// for the images that end past the prefix it finds cached: those within it need no
// encoder, as vLLM schedules encoder inputs only for the tokens it computes.
type visionSpan struct {
	end  int
	cost time.Duration
}

// imageTokens counts a message's images by the server's rule, and feeds their tokens to
// h when h is not nil: each image's tokens as the same id drawn from its hash. With
// spans not nil it appends each image's span, the images starting at token at of the
// prompt.
func (s *Server) imageTokens(imgs []parsedImage, h *blockHasher, at int, spans *[]visionSpan) int {
	n := 0
	for _, img := range imgs {
		t := s.rule.Tokens(img.width, img.height)
		if h != nil {
			id := uint32(img.key) ^ uint32(img.key>>32)
			for range t {
				h.add(id)
			}
		}
		n += t
		if spans != nil {
			*spans = append(*spans, visionSpan{end: at + n, cost: s.cfg.VisionTime(1, t)})
		}
	}
	return n
}

// visionTime is the encoder time of the spans that end past cached prompt tokens.
func visionTime(spans []visionSpan, cached int) time.Duration {
	var d time.Duration
	for _, sp := range spans {
		if sp.end > cached {
			d += sp.cost
		}
	}
	return d
}

// VisionTime is the vision encoder's model time for images images of imageTokens tokens
// in all: VisionPerImage each plus VisionPerImageToken per token. The engine adds the
// time of a request's images to the step that admits it, before its first prefill chunk
// (the encoder runs on the same GPUs, inside the step, as vLLM runs it), less that of
// the images wholly within the prefix it finds cached.
func (c *Config) VisionTime(images, imageTokens int) time.Duration {
	return time.Duration(images)*c.VisionPerImage + time.Duration(imageTokens)*c.VisionPerImageToken
}

// imageRule returns the configured rule (media.DefaultRule when none is named).
func (c *Config) imageRule() (media.Rule, error) {
	name := c.ImageRule
	if name == "" {
		name = media.DefaultRule
	}
	return media.LookupRule(name)
}
