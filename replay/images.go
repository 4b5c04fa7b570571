package replay

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/llmreplay/llmreplay/media"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// Images (docs/replay.md, "Images"): a row's images are sent as real files of their
// size, in the API's image parts, and the prompt's text is what is left of prompt_tokens
// once the images are counted by the run's rule, so that the server's prompt is the
// trace's.

// DefaultImageSize is the size sent for an image whose size the trace does not give (the
// Azure multimodal trace gives counts only): 1024x1024, a phone photo downscaled the way
// chat clients upload them, and within every rule's resize bounds.
const DefaultImageSize = "1024x1024"

// ImageOptions say how a run sends its trace's images.
type ImageOptions struct {
	Rule   media.Rule   // how many prompt tokens the server counts one image for
	Format media.Format // the files' format
	// Width and Height are the size sent for an image the trace gives no size for.
	Width, Height int
	// Reuse is the share of images that repeat one already sent of the same size (0: every
	// image distinct), to exercise an engine's multimodal cache.
	Reuse float64
	Seed  uint64 // the run's seed: the images' pixels and which repeat
}

// ParseImageSize reads --image-size: WIDTHxHEIGHT, each side 1..media.MaxSide.
func ParseImageSize(s string) (w, h int, err error) {
	ws, hs, ok := strings.Cut(strings.ToLower(s), "x")
	w, err1 := strconv.Atoi(ws)
	h, err2 := strconv.Atoi(hs)
	if !ok || err1 != nil || err2 != nil || w < 1 || h < 1 || w > media.MaxSide || h > media.MaxSide {
		return 0, 0, fmt.Errorf("image size %q: want WIDTHxHEIGHT, each side 1..%d pixels (e.g. 1024x768)", s, media.MaxSide)
	}
	return w, h, nil
}

// maxRecentImages bounds the distinct images kept per size for --image-reuse to repeat: a
// repeat draws among the last 64 sent, enough for a cache to hit and little memory (64
// JPEGs of 1024x1024 in base64 are 13 MB).
const maxRecentImages = 64

// Images builds the images of requests. The preparer calls split in trace order, so a
// run's images and which of them repeat are a function of its seed and trace alone.
type Images struct {
	o     ImageOptions
	mu    sync.Mutex
	seen  map[[2]int][]wire.Image // size → the last distinct images made, for repeats
	made  int64                   // distinct images encoded
	bytes int64                   // their base64 bytes
}

// NewImages returns the image builder of o.
func NewImages(o ImageOptions) *Images {
	return &Images{o: o, seen: map[[2]int][]wire.Image{}}
}

// imageSplit is what split decides for one request.
type imageSplit struct {
	imgs   []wire.Image
	tokens int32 // the prompt tokens the server is expected to count for them
}

// bytes returns the bytes the images add to a body, their parts' framing included.
func (s imageSplit) bytes() int {
	n := 0
	for _, im := range s.imgs {
		n += len(im.Base64) + 96
	}
	return n
}

// size returns the size sent for im: its own, or the default.
func (b *Images) size(im trace.Image) (int, int) {
	if im.Known() {
		return int(im.Width), int(im.Height)
	}
	return b.o.Width, b.o.Height
}

// Tokens returns the prompt tokens r's images count for under the rule, at the sizes
// sent.
func (b *Images) Tokens(r *trace.Request) int64 {
	var n int64
	for _, im := range r.Images {
		w, h := b.size(im)
		n += int64(b.o.Rule.Tokens(w, h))
	}
	return n
}

// check returns the error of a row whose images leave no text: its prompt_tokens less
// its tools and its images' tokens under the rule must be at least one token.
func (b *Images) check(r *trace.Request) error {
	if len(r.Images) == 0 {
		return nil
	}
	n := b.Tokens(r)
	if int64(r.PromptTokens)-int64(r.Tools())-n < 1 {
		return fmt.Errorf("request %d: its %d images count for %d tokens under image rule %s, which leaves no text of its prompt_tokens %d (tool_tokens %d): choose the rule of the model the trace recorded (--image-rule) or the size of images the trace gives no size for (--image-size)",
			r.ID, len(r.Images), n, b.o.Rule.Name(), r.PromptTokens, r.Tools())
	}
	return nil
}

// split returns r with PromptTokens cut to what is left once its images are counted, and
// the images to send. A nil b, or a row without images, keeps the prompt as it is.
func (b *Images) split(r *trace.Request) (trace.Request, imageSplit, error) {
	out := *r
	if b == nil || len(r.Images) == 0 {
		return out, imageSplit{}, nil
	}
	if err := b.check(r); err != nil {
		return out, imageSplit{}, err
	}
	s := imageSplit{imgs: make([]wire.Image, len(r.Images)), tokens: int32(b.Tokens(r))}
	for j, im := range r.Images {
		w, h := b.size(im)
		img, err := b.image(r.ID, j, w, h)
		if err != nil {
			return out, imageSplit{}, fmt.Errorf("request %d, image %d: %w", r.ID, j, err)
		}
		s.imgs[j] = img
	}
	out.PromptTokens -= s.tokens
	return out, s, nil
}

// image returns image j of request id: with probability Reuse (decided by the seed) a
// repeat of one of the last distinct images of its size, else a new one whose pixels
// are a function of the seed, the request and j.
func (b *Images) image(id int64, j, w, h int) (wire.Image, error) {
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
		if len(recent) < maxRecentImages {
			b.seen[key] = append(recent, img)
		} else {
			recent[b.made%maxRecentImages] = img
		}
	}
	return img, nil
}

// Made returns how many distinct images were encoded and their base64 bytes.
func (b *Images) Made() (n, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.made, b.bytes
}

// mix is SplitMix64's finaliser: a well-mixed 64 bits from any input.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// images decides how the run sends its trace's images: none when the trace has none or
// --drop-images; else the API must take images and the run be of independent requests
// (a conversation's history would have to carry its images), and a pass over the rows
// this run replays checks that every row's images leave text in its prompt, before
// anything is sent.
func (p *preparer) images(context.Context) error {
	if !p.src.HasValues(trace.ColImages) {
		return nil
	}
	cfg := p.cfg
	if cfg.DropImages {
		p.imageFlags = map[string]string{"images": "dropped (--drop-images): each row's prompt_tokens sent as text"}
		return nil
	}
	if k, ok := wire.Lookup(p.api); !ok || k.AppendUserMessage == nil {
		return configErrorf("trace %s has images and the %s API takes none: use --api chat, messages or responses, or --drop-images to send every prompt token as text", p.meta.TraceFile, p.api)
	}
	if p.sessMode != SessionsIndependent {
		return configErrorf("trace %s has images: a conversation's or an agent's turns with images are not replayed yet (their history would have to carry the images); use --sessions independent, or --drop-images", p.meta.TraceFile)
	}
	o, err := cfg.imageOptions()
	if err != nil {
		return err
	}
	b := NewImages(o)
	scan, err := p.open()
	if err != nil {
		return err
	}
	defer scan.Close()
	var src trace.Source = scan
	if p.shard.Count > 1 {
		src = trace.NewShardSource(scan, p.shard)
	}
	pl := planner{speedup: p.speedup, duration: cfg.Duration, limit: cfg.Limit, warmup: cfg.Warmup,
		origin: p.originAt, hasOrigin: p.shard.Count > 1}
	for src.Next() {
		r := src.Request()
		if _, _, ok := pl.plan(r.Arrival); !ok {
			break
		}
		if err := b.check(&r); err != nil {
			return configErrorf("trace %s: %v", scan.Name(), err)
		}
	}
	if err := src.Err(); err != nil {
		return err
	}
	p.imgs = b
	p.imageFlags = map[string]string{"image-rule": o.Rule.Name(), "image-format": string(o.Format),
		"image-size":  fmt.Sprintf("%dx%d (images the trace gives no size for)", o.Width, o.Height),
		"image-reuse": strconv.FormatFloat(o.Reuse, 'g', -1, 64)}
	return nil
}
