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
// must be distinct there, not only in their bytes).
//
// The content is made to cost on the wire what a photograph does, not the hundred bytes
// of a blank image: a smooth random field at two scales (a 64-pixel and a 16-pixel
// lattice of random values, bilinearly blended: the broad shapes and the texture of a
// scene) plus a per-pixel grain of +-8 levels (sensor noise). A JPEG is painted in the
// codec's own colour space (4:2:0 YCbCr: the luma so, the chroma a smooth lattice with a
// faint grain, as a photograph's colour varies slowly beside its light), so no pixel is
// converted; a PNG in RGB, every channel so.
//
// Painting and coding every pixel costs tens of milliseconds a megapixel, so all but the
// smallest images are mosaics of such content pre-encoded once per process: a JPEG of at
// least 7 whole 16x16 MCUs (mosaicFits) is pre-encoded MCUs between restart markers
// (mosaic.go), a PNG of at least 7 pieces of scanline (pngFits) is pre-deflated runs of
// Sub-filtered pixels (pngmosaic.go), each a few hundredths of the painted cost or less.
// A mosaic carries the seed itself (a bijection of it) in its first 7 tiles, which are
// pairwise distinct, so distinct seeds give distinct pixels by construction. An image
// too small for a mosaic is painted, every pixel's grain and colour drawn from the
// seed's stream: two seeds agreeing on all of them is a chance of about one in
// 2^(15 x pixels) for PNG; for JPEG, whose quantisation merges nearby values, the tests
// check 400 seeds down to one 8x8 block.
//
// At JPEGQuality a 1024x1024 JPEG is about 1.6 bits per pixel, inside a photo's usual
// 0.5 to 3; a PNG about 13, a photo's as a PNG (10 to 16). docs/replay.md ("Images")
// gives the measured sizes and times and the command that measures them.
func Encode(width, height int, seed uint64, f Format) ([]byte, error) {
	if width < 1 || height < 1 || width > MaxSide || height > MaxSide {
		return nil, fmt.Errorf("image size %dx%d: each side must be in [1, %d]", width, height, MaxSide)
	}
	if f != PNG && f != JPEG {
		return nil, fmt.Errorf("unknown image format %q (want png or jpeg)", f)
	}
	if f == JPEG && mosaicFits(width, height) {
		return encodeMosaic(width, height, seed)
	}
	if f == PNG && pngFits(width, height) {
		return encodePNGMosaic(width, height, seed)
	}
	return encodePainted(width, height, seed, f)
}

// encodePainted paints every pixel and encodes them with the standard library: the
// path of images too small for a mosaic (mosaicFits, pngFits).
func encodePainted(width, height int, seed uint64, f Format) ([]byte, error) {
	var buf bytes.Buffer
	if f == JPEG {
		img := image.NewYCbCr(image.Rect(0, 0, width, height), image.YCbCrSubsampleRatio420)
		paintYCbCr(img, seed)
		buf.Grow(width * height / 4)
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: JPEGQuality}); err != nil {
			return nil, fmt.Errorf("encode %dx%d jpeg: %w", width, height, err)
		}
		return buf.Bytes(), nil
	}
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	paint(img, seed, 4)
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

// lattice is a grid of random values (ch channels: a colour, or one plane's level)
// every 1<<shift pixels, blended bilinearly.
type lattice struct {
	shift int
	ch    int     // channels per point
	cols  int     // lattice points per row
	v     []int32 // ch values per point, rows of cols points
}

// newLattice draws the values of a lattice of ch channels covering width x height, each
// in [lo, lo+span).
func newLattice(s *uint64, width, height, shift, ch int, lo, span int32) lattice {
	cols, rows := width>>shift+2, height>>shift+2
	l := lattice{shift: shift, ch: ch, cols: cols, v: make([]int32, ch*cols*rows)}
	for i := range l.v {
		l.v[i] = lo + int32(splitmix64(s)%uint64(span))
	}
	return l
}

// blendRow writes into row the lattice's values at pixel row y, blended vertically,
// one value per lattice column and channel, in 8.8 fixed point.
func (l *lattice) blendRow(y int, row []int32) {
	gy, fy := y>>l.shift, int32(y&(1<<l.shift-1))
	n := l.ch * l.cols
	top, bot := l.v[n*gy:n*(gy+1)], l.v[n*(gy+1):n*(gy+2)]
	for i := range row {
		row[i] = top[i]<<8 + (bot[i]-top[i])*fy<<8>>l.shift
	}
}

// addRow adds to acc (ch values a pixel, 8.8 fixed point) the lattice's values along
// row, one blended row of lattice values (blendRow): a running sum per lattice cell, so
// a pixel costs one addition a channel.
func (l *lattice) addRow(row, acc []int32) {
	cell, ch := 1<<l.shift, l.ch
	w := len(acc) / ch
	for g := 0; g*cell < w; g++ {
		n := min(cell, w-g*cell)
		for c := range ch {
			a, b := row[ch*g+c], row[ch*g+ch+c]
			v, d := a<<l.shift, b-a // v / cell is the value, in 8.8
			out := acc[ch*g*cell+c:]
			for x := range n {
				out[ch*x] += v >> l.shift
				v += d
			}
		}
	}
}

// paint fills img with the content Encode describes, for PNG, with a grain of grain
// bits (4: +-8 levels).
func paint(img *image.RGBA, seed uint64, grain uint) {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	s := seed ^ 0x6a09e667f3bcc908 // the sequence of seed 0 is not the one of the lattice's draws
	coarse := newLattice(&s, w, h, 6, 3, 0, 256)
	fine := newLattice(&s, w, h, 4, 3, -24, 48)
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
				v := acc[3*x+c]>>8 + int32(r&(1<<grain-1)) - 1<<grain/2
				r >>= 5
				pix[4*x+c] = uint8(min(max(v, 0), 255))
			}
			pix[4*x+3] = 255
		}
	}
}

// paintYCbCr fills img (4:2:0) with the same kind of content for JPEG, in the codec's
// own colour space, so that no pixel is converted: the luma as paint's channels (a
// 64-pixel and a 16-pixel lattice and the grain), the chroma a smooth 64-pixel lattice
// with a faint grain, as a photograph's colour varies slowly beside its light.
func paintYCbCr(img *image.YCbCr, seed uint64) {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	cw, chh := (w+1)/2, (h+1)/2
	s := seed ^ 0x6a09e667f3bcc908
	coarse := newLattice(&s, w, h, 6, 1, 16, 220)
	fine := newLattice(&s, w, h, 4, 1, -24, 48)
	chroma := newLattice(&s, cw, chh, 5, 2, 88, 80)
	crow, frow, hrow := make([]int32, coarse.cols), make([]int32, fine.cols), make([]int32, 2*chroma.cols)
	acc, cacc := make([]int32, w), make([]int32, 2*cw)
	noise := s
	for y := range h {
		coarse.blendRow(y, crow)
		fine.blendRow(y, frow)
		clear(acc)
		coarse.addRow(crow, acc)
		fine.addRow(frow, acc)
		pix := img.Y[y*img.YStride : y*img.YStride+w]
		var r uint64
		for x := range w {
			if x&7 == 0 {
				r = splitmix64(&noise)
			}
			v := acc[x]>>8 + int32(r&15) - 8
			r >>= 8
			pix[x] = uint8(min(max(v, 0), 255))
		}
	}
	for y := range chh {
		chroma.blendRow(y, hrow)
		clear(cacc)
		chroma.addRow(hrow, cacc)
		cb, cr := img.Cb[y*img.CStride:y*img.CStride+cw], img.Cr[y*img.CStride:y*img.CStride+cw]
		var r uint64
		for x := range cw {
			if x&7 == 0 {
				r = splitmix64(&noise)
			}
			cb[x] = uint8(min(max(cacc[2*x]>>8+int32(r&3)-2, 0), 255))
			cr[x] = uint8(min(max(cacc[2*x+1]>>8+int32(r>>2&3)-2, 0), 255))
			r >>= 8
		}
	}
}
