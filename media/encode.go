package media

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"sync"
)

// Format is an image file format Encode writes.
type Format string

// The formats Encode writes.
const (
	PNG  Format = "png"
	JPEG Format = "jpeg"
)

// ParseFormat checks a format's name: "png", "jpeg" (or "jpg").
func ParseFormat(s string) (Format, error) {
	switch s {
	case "png":
		return PNG, nil
	case "jpeg", "jpg":
		return JPEG, nil
	}
	return "", fmt.Errorf("unknown image format %q (want png or jpeg)", s)
}

// MIME returns the format's media type, as data URLs and Anthropic's media_type say it.
func (f Format) MIME() string {
	if f == JPEG {
		return "image/jpeg"
	}
	return "image/png"
}

// MaxSide bounds each side of an image Encode makes: 16384 pixels, above any model's
// processor limit (they resize down long before) and a 768 MiB RGBA buffer at most.
const MaxSide = 16384

// JPEGQuality is the quality Encode's JPEGs are written at: 85, what photo tools and
// phone cameras commonly default to, so that the bytes per pixel are a photo's.
const JPEGQuality = 85

// Encode returns a PNG or JPEG of exactly width x height pixels, which the standard
// library's decoders (image/png, image/jpeg) accept. Its pixels are a deterministic
// function of seed, width and height, and distinct seeds give distinct pixels (an
// engine's multimodal cache keys on the decoded pixels, so a replay's distinct images
// must be distinct there, not only in their bytes): every pixel's grain and colour is
// drawn from the seed's stream, so two seeds agreeing on all of them is a chance of
// about one in 2^(15 x pixels) for PNG; for JPEG, whose quantisation merges nearby
// values, the tests check 400 seeds down to one 8x8 block.
//
// The content is made to cost on the wire what a photograph does, not the hundred bytes
// of a blank image: a smooth random colour field at two scales (a 64-pixel and a
// 16-pixel lattice of random colours, bilinearly blended: the broad shapes and the
// texture of a scene) plus a per-pixel grain of +-8 levels per channel (sensor noise).
// Written at JPEGQuality, a 1024x1024 image is about 1.2 bits per pixel, inside a
// photo's usual 0.5 to 3; as PNG (deflate at its fastest level) about 14 bits per
// pixel, a photo's as a PNG. docs/replay.md ("Images") gives
// the measured sizes and how to measure them.
func Encode(width, height int, seed uint64, f Format) ([]byte, error) {
	if width < 1 || height < 1 || width > MaxSide || height > MaxSide {
		return nil, fmt.Errorf("image size %dx%d: each side must be in [1, %d]", width, height, MaxSide)
	}
	if f != PNG && f != JPEG {
		return nil, fmt.Errorf("unknown image format %q (want png or jpeg)", f)
	}
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	paint(img, seed)
	var buf bytes.Buffer
	if f == JPEG {
		buf.Grow(width * height / 4)
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: JPEGQuality}); err != nil {
			return nil, fmt.Errorf("encode %dx%d jpeg: %w", width, height, err)
		}
		return buf.Bytes(), nil
	}
	buf.Grow(width * height * 2)
	if err := pngEncoder.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("encode %dx%d png: %w", width, height, err)
	}
	return buf.Bytes(), nil
}

// pngEncoder writes at deflate's fastest level and reuses its compressor's buffers
// across calls (png.EncoderBufferPool), which is most of a PNG's allocations.
var pngEncoder = &png.Encoder{CompressionLevel: png.BestSpeed, BufferPool: &pngPool{}}

type pngPool struct{ p sync.Pool }

func (p *pngPool) Get() *png.EncoderBuffer {
	b, _ := p.p.Get().(*png.EncoderBuffer)
	return b
}

func (p *pngPool) Put(b *png.EncoderBuffer) { p.p.Put(b) }

// AppendBase64 appends src in standard base64 (with padding), as data URLs and the
// Messages API's base64 sources carry an image.
func AppendBase64(dst, src []byte) []byte { return base64.StdEncoding.AppendEncode(dst, src) }

// splitmix64 advances *s and returns the next value of the SplitMix64 sequence: a seed
// of any value, even 0, gives a well-mixed stream.
func splitmix64(s *uint64) uint64 {
	*s += 0x9e3779b97f4a7c15
	z := *s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// lattice is a grid of random colours every 1<<shift pixels, blended bilinearly.
type lattice struct {
	shift int
	cols  int     // lattice points per row
	v     []int32 // 3 channels per point, rows of cols points
}

// newLattice draws the colours of a lattice covering width x height, each channel in
// [lo, lo+span).
func newLattice(s *uint64, width, height, shift int, lo, span int32) lattice {
	cols, rows := width>>shift+2, height>>shift+2
	l := lattice{shift: shift, cols: cols, v: make([]int32, 3*cols*rows)}
	for i := range l.v {
		l.v[i] = lo + int32(splitmix64(s)%uint64(span))
	}
	return l
}

// blendRow writes into row the lattice's colours at pixel row y, blended vertically,
// one value per lattice column and channel, in 8.8 fixed point.
func (l *lattice) blendRow(y int, row []int32) {
	gy, fy := y>>l.shift, int32(y&(1<<l.shift-1))
	top, bot := l.v[3*l.cols*gy:3*l.cols*(gy+1)], l.v[3*l.cols*(gy+1):3*l.cols*(gy+2)]
	for i := range row {
		row[i] = top[i]<<8 + (bot[i]-top[i])*fy<<8>>l.shift
	}
}

// addRow adds to acc (3 values a pixel, 8.8 fixed point) the lattice's colours along
// row, one blended row of lattice values (blendRow): a running sum per lattice cell, so
// a pixel costs three additions.
func (l *lattice) addRow(row, acc []int32) {
	cell := 1 << l.shift
	w := len(acc) / 3
	for g := 0; g*cell < w; g++ {
		n := min(cell, w-g*cell)
		for c := range 3 {
			a, b := row[3*g+c], row[3*g+3+c]
			v, d := a<<l.shift, b-a // v / cell is the value, in 8.8
			out := acc[3*g*cell+c:]
			for x := range n {
				out[3*x] += v >> l.shift
				v += d
			}
		}
	}
}

// paint fills img with the content Encode describes.
func paint(img *image.RGBA, seed uint64) {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	s := seed ^ 0x6a09e667f3bcc908 // the sequence of seed 0 is not the one of the lattice's draws
	coarse := newLattice(&s, w, h, 6, 0, 256)
	fine := newLattice(&s, w, h, 4, -24, 48)
	crow, frow := make([]int32, 3*coarse.cols), make([]int32, 3*fine.cols)
	acc := make([]int32, 3*w)
	noise := s
	for y := range h {
		coarse.blendRow(y, crow)
		fine.blendRow(y, frow)
		clear(acc)
		coarse.addRow(crow, acc)
		fine.addRow(frow, acc)
		pix := img.Pix[y*img.Stride : y*img.Stride+4*w]
		var r uint64
		for x := range w {
			if x&1 == 0 {
				r = splitmix64(&noise)
			}
			for c := range 3 {
				v := acc[3*x+c]>>8 + int32(r&15) - 8
				r >>= 5
				pix[4*x+c] = uint8(min(max(v, 0), 255))
			}
			pix[4*x+3] = 255
		}
	}
}
