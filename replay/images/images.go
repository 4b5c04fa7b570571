// Package images builds the images a replay sends (docs/replay.md, "Images"): each as a
// real file of its size, distinct unless repeats are asked for, and how many prompt
// tokens they leave the text under the run's rule.
package images

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/llmreplay/llmreplay/media"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// DefaultSize is the size sent for an image whose size the trace does not give (the
// Azure multimodal trace gives counts only): 1024x1024, a phone photo downscaled the way
// chat clients upload them, and within every rule's resize bounds.
const DefaultSize = "1024x1024"

// Options say how a run sends its trace's images.
type Options struct {
	Rule   media.Rule   // how many prompt tokens the server counts one image for
	Format media.Format // the files' format
	// Width and Height are the size sent for an image the trace gives no size for.
	Width, Height int
	// Reuse is the share of images that repeat one already sent of the same size (0: every
	// image distinct), to exercise an engine's multimodal cache.
	Reuse float64
	Seed  uint64 // the run's seed: the images' pixels and which repeat
	// Measured are the server's counts of one image of a size, where calibration probed
	// it (replay --calibrate): they take the rule's place for that size.
	Measured map[[2]int]int
}

// ParseSize reads --image-size: WIDTHxHEIGHT, each side 1..media.MaxSide.
func ParseSize(s string) (w, h int, err error) {
	ws, hs, ok := strings.Cut(strings.ToLower(s), "x")
	w, err1 := strconv.Atoi(ws)
	h, err2 := strconv.Atoi(hs)
	if !ok || err1 != nil || err2 != nil || w < 1 || h < 1 || w > media.MaxSide || h > media.MaxSide {
		return 0, 0, fmt.Errorf("image size %q: want WIDTHxHEIGHT, each side 1..%d pixels (e.g. 1024x768)", s, media.MaxSide)
	}
	return w, h, nil
}

// maxRecent bounds the distinct images kept per size for --image-reuse to repeat: a
// repeat draws among the last 64 sent, enough for a cache to hit and little memory (64
// JPEGs of 1024x1024 in base64 are 18 MB).
const maxRecent = 64

// Builder builds the images of requests. The preparer calls split in trace order, so a
// run's images and which of them repeat are a function of its seed and trace alone.
type Builder struct {
	o     Options
	mu    sync.Mutex
	seen  map[[2]int][]wire.Image // size → the last distinct images made, for repeats
	made  int64                   // distinct images encoded
	bytes int64                   // their base64 bytes
}

// New returns the image builder of o.
func New(o Options) *Builder {
	return &Builder{o: o, seen: map[[2]int][]wire.Image{}}
}

// Sent is what Split decides for one request: the images to send and what they count.
type Sent struct {
	Images []wire.Image
	Tokens int32 // the prompt tokens the server is expected to count for them
}

// Bytes returns the bytes the images add to a body, their parts' framing included.
func (s Sent) Bytes() int {
	n := 0
	for _, im := range s.Images {
		n += len(im.Base64) + 96
	}
	return n
}

// size returns the size sent for im: its own, or the default.
func (b *Builder) size(im trace.Image) (int, int) {
	if im.Known() {
		return int(im.Width), int(im.Height)
	}
	return b.o.Width, b.o.Height
}

// Tokens returns the prompt tokens r's images count for at the sizes sent: the server's
// measured count of a size calibration probed, else the rule's.
func (b *Builder) Tokens(r *trace.Request) int64 {
	var n int64
	for _, im := range r.Images {
		w, h := b.size(im)
		n += int64(b.SizeTokens(w, h))
	}
	return n
}

// SizeTokens returns what one image of w x h counts for: measured, else the rule's.
func (b *Builder) SizeTokens(w, h int) int {
	if m, ok := b.o.Measured[[2]int{w, h}]; ok {
		return m
	}
	return b.o.Rule.Tokens(w, h)
}

// Size returns the size an image of the trace is sent at: its own, or the default.
func (b *Builder) Size(im trace.Image) [2]int {
	w, h := b.size(im)
	return [2]int{w, h}
}

// Probe returns the image calibration sends to learn what the server counts one image
// of w x h for: the run's format, pixels of a seed no request's image has.
func (b *Builder) Probe(w, h int) (wire.Image, error) {
	raw, err := media.Encode(w, h, mix(b.o.Seed^0x5ca1ab1e), b.o.Format)
	if err != nil {
		return wire.Image{}, err
	}
	return wire.Image{MIME: b.o.Format.MIME(), Base64: media.AppendBase64(nil, raw)}, nil
}

// Measure sets the server's count of one image of each size probed (Options.Measured).
// It is called before the run, before any Split.
func (b *Builder) Measure(m map[[2]int]int) { b.o.Measured = m }

// check returns the error of a row whose images leave no text: its prompt_tokens less
// its tools and its images' tokens under the rule must be at least one token.
func (b *Builder) Check(r *trace.Request) error {
	if len(r.Images) == 0 {
		return nil
	}
	n := b.Tokens(r)
	if int64(r.PromptTokens)-int64(r.Tools())-n < 1 {
		return fmt.Errorf("request %d: its %d images count for %d tokens under image rule %s, which leaves no text of its prompt_tokens %d (tool_tokens %d): choose the rule of the model the trace recorded (--image-rule) or the size of images the trace gives no size for (--image-size)",
			r.ID, len(r.Images), n, b.ruleName(), r.PromptTokens, r.Tools())
	}
	return nil
}

// split returns r with PromptTokens cut to what is left once its images are counted, and
// the images to send. A nil b, or a row without images, keeps the prompt as it is.
func (b *Builder) Split(r *trace.Request) (trace.Request, Sent, error) {
	out := *r
	if b == nil || len(r.Images) == 0 {
		return out, Sent{}, nil
	}
	if err := b.Check(r); err != nil {
		return out, Sent{}, err
	}
	s := Sent{Images: make([]wire.Image, len(r.Images)), Tokens: int32(b.Tokens(r))}
	for j, im := range r.Images {
		w, h := b.size(im)
		img, err := b.image(r.ID, j, w, h)
		if err != nil {
			return out, Sent{}, fmt.Errorf("request %d, image %d: %w", r.ID, j, err)
		}
		s.Images[j] = img
	}
	out.PromptTokens -= s.Tokens
	return out, s, nil
}

// image returns image j of request id: with probability Reuse (decided by the seed) a
// repeat of one of the last distinct images of its size, else a new one whose pixels
// are a function of the seed, the request and j.
func (b *Builder) image(id int64, j, w, h int) (wire.Image, error) {
	key := [2]int{w, h}
	x := mix(b.o.Seed ^ mix(uint64(id)<<16^uint64(j)))
	b.mu.Lock()
	recent := b.seen[key]
	if b.o.Reuse > 0 && len(recent) > 0 && float64(x>>11)/(1<<53) < b.o.Reuse {
		img := recent[mix(x)%uint64(len(recent))]
		b.mu.Unlock()
		return img, nil
	}
	b.mu.Unlock()
	raw, err := media.Encode(w, h, x, b.o.Format)
	if err != nil {
		return wire.Image{}, err
	}
	img := wire.Image{MIME: b.o.Format.MIME(), Base64: media.AppendBase64(make([]byte, 0, (len(raw)+2)/3*4), raw)}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.made++
	b.bytes += int64(len(img.Base64))
	if b.o.Reuse > 0 {
		if len(recent) < maxRecent {
			b.seen[key] = append(recent, img)
		} else {
			recent[b.made%maxRecent] = img
		}
	}
	return img, nil
}

// Made returns how many distinct images were encoded and their base64 bytes.
func (b *Builder) Made() (n, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.made, b.bytes
}

// ruleName names how images are counted: the rule, and the server's counts when measured.
func (b *Builder) ruleName() string {
	if len(b.o.Measured) > 0 {
		return b.o.Rule.Name() + " (with the sizes --calibrate measured)"
	}
	return b.o.Rule.Name()
}

// mix is SplitMix64's finaliser: a well-mixed 64 bits from any input.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
