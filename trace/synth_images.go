package trace

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// SynthImages makes a synthetic trace's requests send images: Count draws how many a
// request sends (clamped to 0..MaxImages; a draw of 0 sends none), Width and Height each
// image's sides in pixels (clamped to 1..MaxImageSide). Each figure draws from a PCG
// stream of its own seeded by the arrivals' seed, so adding images leaves the arrivals'
// and lengths' draws as they were.
type SynthImages struct {
	Count  Dist `json:"count"`
	Width  Dist `json:"width"`
	Height Dist `json:"height"`
	// Rule names the image rule Tokens implements (package media's names), recorded so the
	// file says how image_tokens was counted and regenerates with the same rule; "" when
	// Tokens is nil.
	Rule string `json:"rule,omitempty"`
	// Tokens returns the prompt tokens one image of that size counts for. With it, a
	// request's prompt_tokens is its text (the Prompt draw, which is the text), its tools
	// and its images' tokens, and image_tokens records the last; without it, image_tokens
	// is null and prompt_tokens holds no image tokens. Not stored: the caller sets it from
	// Rule (cmd looks the rule up by name), so the package needs no image rules of its own.
	Tokens func(width, height int) int `json:"-"`
}

// validate checks the image spec.
func (im *SynthImages) validate(s *SynthSpec) error {
	if s.Agent != nil || s.Turns != nil {
		// A later turn or call would resend its history's images; how a replay sends those
		// is not settled, so the generator makes single requests only.
		return errors.New("synth: images are drawn for single requests only, not with --turns or --agent-sessions")
	}
	for _, d := range []struct {
		what string
		d    Dist
	}{{"image count", im.Count}, {"image width", im.Width}, {"image height", im.Height}} {
		switch d.d.Kind {
		case "":
			return fmt.Errorf("synth: the %s distribution is required with images", d.what)
		case "empirical":
			return fmt.Errorf("synth: the %s distribution: empirical is for token lengths", d.what)
		}
	}
	if im.Rule != "" && im.Tokens == nil {
		return fmt.Errorf("synth: image rule %q has no token function (set SynthImages.Tokens from the rule)", im.Rule)
	}
	return nil
}

// imageGen draws the images of one request after another.
type imageGen struct {
	spec          *SynthImages
	count, wd, hd *sampler
}

func newImageGen(spec *SynthImages, seed uint64) *imageGen {
	if spec == nil {
		return nil
	}
	return &imageGen{spec: spec,
		count: newSampler(&spec.Count, rand.New(rand.NewPCG(seed, 20))),
		wd:    newSampler(&spec.Width, rand.New(rand.NewPCG(seed, 21))),
		hd:    newSampler(&spec.Height, rand.New(rand.NewPCG(seed, 22)))}
}

// draw sets req's images and, with a token function, its image_tokens; it returns the
// images' tokens (0 without a function).
func (g *imageGen) draw(req *Request) (int64, error) {
	n := max(0, min(int64(MaxImages), g.count.draw()))
	if n == 0 {
		return 0, nil
	}
	req.Images = make([]Image, n)
	var tokens int64
	for k := range req.Images {
		w := int32(max(1, min(MaxImageSide, g.wd.draw())))
		h := int32(max(1, min(MaxImageSide, g.hd.draw())))
		req.Images[k] = Image{Width: w, Height: h}
		if g.spec.Tokens != nil {
			t := g.spec.Tokens(int(w), int(h))
			if t < 0 {
				return 0, fmt.Errorf("image rule %q: %d tokens for a %dx%d image", g.spec.Rule, t, w, h)
			}
			tokens += int64(t)
		}
	}
	if g.spec.Tokens != nil {
		if tokens > math.MaxInt32 {
			return 0, fmt.Errorf("%d images count for %d tokens, more than a prompt can hold", n, tokens)
		}
		req.ImageTokens, req.HasImageTokens = int32(tokens), true
	}
	return tokens, nil
}
