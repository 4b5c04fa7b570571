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
	"github.com/llmreplay/llmreplay/sim/imglift"
)

// parsedImage is one image of a request: where its bytes are (src, a data URL or, with
// url false, base64; or a placeholder for bytes lifted out of the body: imglift.Lift),
// and once loaded (loadImages) its size, read from its bytes, and a hash of them that
// stands for its tokens in the prefix cache's block chain (so a request that sends the
// same image again finds it cached, and another image does not).
type parsedImage struct {
	src   string
	url   bool
	field string // the part, for errors: "messages[0].content[1].image_url"

	width, height int
	key           uint64
}

// imageSeed keys the images' hashes; one per process, as the prefix cache is.
var imageSeed = maphash.MakeSeed()

// imagePad is the token id /tokenize lists for an image's tokens: one of cl100k_base's
// unassigned ids below vocabSize, so no text encodes to it.
const imagePad = 100266

// loadImages reads the size of every image of msgs from its bytes, blobs holding those
// imglift.Lift cut out, and reports how many of the blobs the images took: a caller that
// lifted more than the images took (a placeholder that landed in a text, say) parses
// the body again without lifting.
func loadImages(msgs []parsedMessage, blobs [][]byte) (used int, aerr *apiError) {
	for i := range msgs {
		for j := range msgs[i].images {
			img := &msgs[i].images[j]
			src, lifted, ok := imglift.Blob(img.src, blobs)
			if !ok {
				return used, badRequest(topField(img.field), "%s: not an image", img.field)
			}
			if lifted {
				used++
			}
			if aerr := img.load(src); aerr != nil {
				return used, aerr
			}
		}
	}
	return used, nil
}

// load reads the image's size from src, a data URL or base64 as img.url says.
func (img *parsedImage) load(src []byte) *apiError {
	field := img.field
	if img.url {
		rest, ok := bytes.CutPrefix(src, []byte("data:"))
		if ok {
			_, src, ok = bytes.Cut(rest, []byte(";base64,"))
		}
		if !ok {
			return badRequest(topField(field), "%s: the simulated engine takes images as base64 data URLs (data:image/png;base64,...), not %.40q", field, img.src)
		}
	}
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(src)))
	n, err := base64.StdEncoding.Decode(raw, src)
	if err != nil {
		return badRequest(topField(field), "%s: the image is not valid base64: %v", field, err)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(raw[:n]))
	if err != nil {
		return badRequest(topField(field), "%s: cannot identify the image (the simulated engine reads PNG and JPEG): %v", field, err)
	}
	if cfg.Width < 1 || cfg.Height < 1 {
		return badRequest(topField(field), "%s: the image is %dx%d pixels", field, cfg.Width, cfg.Height)
	}
	img.width, img.height, img.key = cfg.Width, cfg.Height, maphash.Bytes(imageSeed, src)
	img.src = "" // the bytes are not kept past the parse
	return nil
}

// parseLifted parses body by parse with its images' bytes lifted out (imglift.Lift), then
// loads the images of the messages it returns; it parses the whole body when a
// placeholder did not end in an image, or to word an error in the body's own terms.
func parseLifted[T any](body []byte, parse func([]byte) (T, error), msgs func(T) []parsedMessage) (T, error) {
	small, blobs := imglift.Lift(body)
	v, err := parse(small)
	if err == nil && blobs != nil {
		used, aerr := loadImages(msgs(v), blobs)
		if aerr != nil {
			return v, aerr
		}
		if used == len(blobs) {
			return v, nil
		}
	}
	if err == nil && blobs == nil {
		if _, aerr := loadImages(msgs(v), nil); aerr != nil {
			return v, aerr
		}
		return v, nil
	}
	if v, err = parse(body); err != nil {
		return v, err
	}
	if _, aerr := loadImages(msgs(v), nil); aerr != nil {
		return v, aerr
	}
	return v, nil
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
