package media

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"sync"
)

// The PNG mosaic: Encode's fast path for PNG, as the JPEG one (mosaic.go) and for the
// same reason: painting and deflating every pixel with image/png costs about 100 ms a
// 1024x1024 image (BenchmarkEncode/.../painted), and no library deflates without
// reading every byte. It follows the PNG specification (W3C, third edition) and RFC
// 1950/1951 (zlib, deflate):
//
//   - The image is 8-bit RGB; every scanline has filter type 1, Sub (PNG 9.2), whose
//     bytes are each the difference from the byte bpp=3 to its left: a run of a
//     scanline's filtered bytes is valid whatever precedes it, and decodes to its
//     source's pixels plus the running offset of what precedes it.
//   - A deflate stream is a sequence of blocks, each BFINAL=0 but the last (RFC 1951
//     3.2.3). compress/flate's Flush ends its block and appends an empty stored block,
//     which ends on a byte boundary (the zlib "sync flush"); a fresh compressor's output
//     refers to nothing before it. So runs compressed alone and flushed are byte strings
//     that concatenate into one valid deflate stream of the runs' bytes.
//   - The zlib trailer is the Adler-32 of the uncompressed bytes (RFC 1950 8.2), which
//     combines from the runs' own sums (adlerCombine); the IDAT's CRC-32 is computed over
//     the bytes written.
//
// So pieces of scanline (runs of 256, 128, 64, 32, 16 and 8 pixels, pngPieceTiles of
// each) are filtered and deflated once per process; a scanline of width w is its filter
// byte and the pieces that sum to w (w's binary digits from 8 up) and a tail of w mod 8
// pixels, the filter byte and tails written as stored blocks between the pieces.

// pngClasses are the pieces' widths in pixels, widest first.
var pngClasses = [...]int{256, 128, 64, 32, 16, 8}

// pngPieceTiles pieces of each width: 1024, 10 bits an index, as the JPEG's tiles.
const pngPieceTiles = mosaicTiles

// pngPiece is one run of filtered scanline bytes, deflated alone and flushed.
type pngPiece struct {
	seg   []byte // the deflate blocks, ending byte-aligned, none final
	adler uint32 // Adler-32 of the filtered bytes
	n     int    // how many filtered bytes (3 a pixel)
}

type pngLibrary struct {
	class [len(pngClasses)][pngPieceTiles]pngPiece
	tail  []byte // filtered bytes tails take their pixels from
}

// loadPNGPieces returns the library, deflating it on first use (about 50 ms, once).
var loadPNGPieces = sync.OnceValues(buildPNGPieces)

// buildPNGPieces paints a 256 x pngPieceTiles picture of Encode's content (paint) with
// a fixed seed; piece i of each width is the start of its row i, Sub-filtered with the
// row's first pixel taken as is (PNG's left of the first byte is 0), deflated at
// BestSpeed as the painted PNG is. The grain is +-4 levels, not the painted +-8: with
// Sub alone (the painted path's encoder picks each row's best filter) and every piece
// deflated alone, +-8 made 15.5 bits a pixel at 1024x1024 and over 16 at 333x129, the
// top of a photo's PNG; +-4 makes about 13, the painted path's 13.8 or so. A mosaic's
// piece after the first of a scanline decodes to its source plus the last pixel left of
// it (Sub adds up), modulo 256: the picture is streaks of that grain and colour, which
// decoders read like any other.
func buildPNGPieces() (*pngLibrary, error) {
	w := pngClasses[0]
	img := image.NewRGBA(image.Rect(0, 0, w, pngPieceTiles))
	paint(img, 0x13198a2e03707344, 3)
	lib := &pngLibrary{}
	var buf bytes.Buffer
	zw, err := flate.NewWriter(&buf, flate.BestSpeed)
	if err != nil {
		return nil, err
	}
	filtered := make([]byte, 3*w)
	for i := range pngPieceTiles {
		pix := img.Pix[i*img.Stride:]
		for x := range w {
			for c := range 3 {
				v := pix[4*x+c]
				if x > 0 {
					v -= pix[4*x-4+c]
				}
				filtered[3*x+c] = v
			}
		}
		if i == 0 {
			lib.tail = bytes.Clone(filtered[:3*pngClasses[len(pngClasses)-1]])
		}
		for k, cw := range pngClasses {
			raw := filtered[:3*cw]
			buf.Reset()
			zw.Reset(&buf)
			if _, err := zw.Write(raw); err != nil {
				return nil, err
			}
			if err := zw.Flush(); err != nil {
				return nil, err
			}
			lib.class[k][i] = pngPiece{seg: bytes.Clone(buf.Bytes()), adler: adlerUpdate(1, raw), n: len(raw)}
		}
	}
	return lib, nil
}

// pngFits reports whether the mosaic makes a PNG of w x h: it needs mosaicKeyTiles
// pieces to carry the seed, a piece being 8 pixels wide at least.
func pngFits(w, h int) bool { return pngPiecesPerRow(w)*h >= mosaicKeyTiles }

// pngPiecesPerRow counts the pieces of a scanline of w pixels.
func pngPiecesPerRow(w int) int {
	n := w / pngClasses[0]
	for _, cw := range pngClasses[1:] {
		if w&cw != 0 {
			n++
		}
	}
	return n
}

// encodePNGMosaic writes the PNG of w x h for seed. The first mosaicKeyTiles pieces are
// the bits of mix64(seed), 10 a piece; pieces of a width are pairwise distinct
// (TestPNGPiecesDistinct) and each scanline's unfiltering is a bijection of its filtered
// bytes, so distinct seeds give distinct decoded pixels. Other pieces and the tails are
// drawn from the seed's stream.
func encodePNGMosaic(w, h int, seed uint64) ([]byte, error) {
	lib, err := loadPNGPieces()
	if err != nil {
		return nil, err
	}
	// The classes of a scanline's pieces, in order.
	var row []int
	for range w / pngClasses[0] {
		row = append(row, 0)
	}
	for k, cw := range pngClasses[1:] {
		if w&cw != 0 {
			row = append(row, k+1)
		}
	}
	tail := 3 * (w % pngClasses[len(pngClasses)-1])
	idx := make([]uint16, len(row)*h)
	pick := newTilePicker(seed, 0xa4093822299f31d0)
	// The signature, IHDR, IEND, IDAT's framing, the zlib header and trailer, the final
	// empty block; a scanline's stored filter byte and tail.
	glue := 6
	if tail > 0 {
		glue += 5 + tail
	}
	size := 8 + 25 + 12 + 12 + 2 + 4 + 5 + h*glue
	for i := range idx {
		v := pick.next(true)
		idx[i] = v
		size += len(lib.class[row[i%len(row)]][v].seg)
	}
	out := make([]byte, 0, size)
	out = append(out, "\x89PNG\r\n\x1a\n"...)
	out = appendChunk(out, "IHDR", func(b []byte) []byte {
		b = binary.BigEndian.AppendUint32(b, uint32(w))
		b = binary.BigEndian.AppendUint32(b, uint32(h))
		return append(b, 8, 2, 0, 0, 0) // 8 bits, RGB, deflate, adaptive filters, no interlace
	})
	out = appendChunk(out, "IDAT", func(b []byte) []byte {
		b = append(b, 0x78, 0x01) // zlib: deflate, 32K window, fastest (RFC 1950 2.2)
		adler := uint32(1)
		var glue []byte
		for y := range h {
			glue = append(glue[:0], 1) // the scanline's filter type: Sub
			b, adler = appendStored(b, glue, false, adler)
			for j, k := range row {
				p := &lib.class[k][idx[y*len(row)+j]]
				b = append(b, p.seg...)
				adler = adlerCombine(adler, p.adler, p.n)
			}
			if tail > 0 {
				off := int(pick.next(false)) % (len(lib.tail) - tail + 1)
				b, adler = appendStored(b, lib.tail[off:off+tail], false, adler)
			}
		}
		b, _ = appendStored(b, nil, true, adler)
		return binary.BigEndian.AppendUint32(b, adler)
	})
	out = appendChunk(out, "IEND", func(b []byte) []byte { return b })
	if len(out) != size {
		return nil, fmt.Errorf("png mosaic %dx%d: wrote %d bytes, sized %d", w, h, len(out), size)
	}
	return out, nil
}

// appendChunk appends a PNG chunk (length, type, data, CRC-32 of type and data), its
// data appended by data.
func appendChunk(b []byte, typ string, data func([]byte) []byte) []byte {
	at := len(b)
	b = append(b, 0, 0, 0, 0)
	b = append(b, typ...)
	b = data(b)
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-8))
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b[at+4:]))
}

// appendStored appends a stored deflate block of p (RFC 1951 3.2.4), starting on a
// byte boundary, and returns the Adler-32 with p added.
func appendStored(b, p []byte, final bool, adler uint32) ([]byte, uint32) {
	var bfinal byte
	if final {
		bfinal = 1
	}
	b = append(b, bfinal, byte(len(p)), byte(len(p)>>8), ^byte(len(p)), ^byte(len(p)>>8))
	return append(b, p...), adlerUpdate(adler, p)
}

// adlerBase is Adler-32's modulus, the largest prime under 2^16 (RFC 1950 8.2).
const adlerBase = 65521

// adlerUpdate returns the Adler-32 adler with p appended; p is short (glue bytes), so
// the sums are reduced every byte.
func adlerUpdate(adler uint32, p []byte) uint32 {
	a, b := adler&0xffff, adler>>16
	for _, c := range p {
		a = (a + uint32(c)) % adlerBase
		b = (b + a) % adlerBase
	}
	return b<<16 | a
}

// adlerCombine returns the Adler-32 of x followed by y from their sums and y's length
// n. With a and b the sums (a starting at 1), y's bytes are added to a once, so
// a(xy) = a(x) + a(y) - 1; and each of y's n running values of a is a(x) - 1 more than
// it was in y alone, so b(xy) = b(x) + b(y) + n(a(x) - 1), all modulo adlerBase.
func adlerCombine(x, y uint32, n int) uint32 {
	ax, bx := uint64(x&0xffff), uint64(x>>16)
	ay, by := uint64(y&0xffff), uint64(y>>16)
	m := uint64(n) % adlerBase
	a := (ax + ay + adlerBase - 1) % adlerBase
	b := (bx + by + m*(ax+adlerBase-1)) % adlerBase
	return uint32(b<<16 | a)
}
