package media

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"image"
	"image/jpeg"
	"sync"
)

// The JPEG mosaic: Encode's fast path for JPEG. Go's image/jpeg costs about 20 to 50 ms
// a 1024x1024 image (BenchmarkEncode/.../painted), one or two of a replay client's cores
// at tens of multimodal requests a second, beside the dispatcher whose timing the
// results rest on; no encoder in a library avoids painting and transforming every
// pixel, so the mosaic is written here. It follows ITU-T T.81 (baseline sequential
// DCT, Huffman coded):
//
//   - With a restart interval (DRI, B.2.4.4) of one MCU, every MCU's entropy-coded
//     segment is coded from DC predictors of zero (F.1.1.5.1, F.2.1.3.1 reset them at
//     each RSTm), ends padded with 1-bits to a byte (F.1.2.3) and is followed by the
//     next RSTm marker, m counting 0..7 modulo 8 (B.2.1). So segments are independent
//     byte strings: any sequence of them is a valid scan.
//   - Go's encoder writes a 16x16 YCbCr image as one 4:2:0 MCU (four luma blocks, one
//     Cb, one Cr) coded from zero predictors and padded with 1-bits: exactly such a
//     segment, under a header (quantisation tables of JPEGQuality, the standard Huffman
//     tables of T.81 K.3) that is the same for every tile; the tiles are checked for it.
//
// So a library of mosaicTiles tiles is encoded once per process by Go's own encoder,
// and an image is the tiles' header with its size in SOF0 and a DRI of 1 added, then
// ceil(w/16) x ceil(h/16) segments chosen by the seed, separated by RST0..RST7 in turn,
// then EOI: copying bytes, not coding them. A decoder crops the right and bottom MCUs to
// the size (A.2.4).

// mosaicTiles is the size of the tile library: 1024, so that one index is 10 bits and a
// tile repeats once per 1024 MCUs on average (a 1024x1024 image has 4096).
const (
	mosaicBits  = 10
	mosaicTiles = 1 << mosaicBits
)

// mosaicKeyTiles is how many fully visible MCUs carry the seed itself (64 bits at 10 a
// tile): an image needs that many to be made by the mosaic.
const mosaicKeyTiles = (64 + mosaicBits - 1) / mosaicBits

// jpegTiles is the library: the header every tile shares, split where the size and the
// DRI go, and each tile's entropy-coded segment.
type jpegTiles struct {
	head []byte // SOI up to the SOF0's height field
	mid  []byte // from after SOF0's width to before SOS
	sos  []byte // the SOS segment
	seg  [mosaicTiles][]byte
}

// loadTiles returns the library, encoding it on first use (about 13 ms, once).
var loadTiles = sync.OnceValues(buildTiles)

// buildTiles paints one 512x512 picture of Encode's content (32x32 tiles of 16x16) with
// a fixed seed and encodes each tile alone with image/jpeg at JPEGQuality.
func buildTiles() (*jpegTiles, error) {
	const side = 16 << (mosaicBits / 2) // 32 tiles a side
	img := image.NewYCbCr(image.Rect(0, 0, side, side), image.YCbCrSubsampleRatio420)
	paintYCbCr(img, 0x243f6a8885a308d3)
	t := &jpegTiles{}
	var buf bytes.Buffer
	for i := range mosaicTiles {
		x, y := 16*(i%(side/16)), 16*(i/(side/16))
		buf.Reset()
		if err := jpeg.Encode(&buf, img.SubImage(image.Rect(x, y, x+16, y+16)), &jpeg.Options{Quality: JPEGQuality}); err != nil {
			return nil, fmt.Errorf("jpeg mosaic: encode tile %d: %w", i, err)
		}
		head, mid, sos, seg, err := splitJPEG(buf.Bytes())
		if err != nil {
			return nil, fmt.Errorf("jpeg mosaic: tile %d: %w", i, err)
		}
		if i == 0 {
			t.head, t.mid, t.sos = head, mid, sos
		} else if !bytes.Equal(head, t.head) || !bytes.Equal(mid, t.mid) || !bytes.Equal(sos, t.sos) {
			return nil, fmt.Errorf("jpeg mosaic: tile %d has other tables than tile 0 (image/jpeg changed its encoder?)", i)
		}
		t.seg[i] = bytes.Clone(seg)
	}
	return t, nil
}

// splitJPEG cuts a baseline JPEG of image/jpeg into the header before SOF0's height,
// the header from after SOF0's width to the SOS, the SOS segment, and the scan's
// entropy-coded data (between the SOS and EOI). It expects exactly what Go's encoder
// writes: SOI, marker segments with lengths (B.1.1.4), one SOS, EOI last.
func splitJPEG(b []byte) (head, mid, sos, scan []byte, err error) {
	if len(b) < 4 || b[0] != 0xff || b[1] != 0xd8 || b[len(b)-2] != 0xff || b[len(b)-1] != 0xd9 {
		return nil, nil, nil, nil, fmt.Errorf("not SOI ... EOI")
	}
	sof := -1
	for p := 2; p+4 <= len(b); {
		if b[p] != 0xff {
			return nil, nil, nil, nil, fmt.Errorf("no marker at byte %d", p)
		}
		n := int(binary.BigEndian.Uint16(b[p+2:]))
		switch b[p+1] {
		case 0xc0: // SOF0: length, precision, height, width, ...
			sof = p
		case 0xda: // SOS: the scan data follows its segment
			if sof < 0 {
				return nil, nil, nil, nil, fmt.Errorf("SOS before SOF0")
			}
			return b[:sof+5], b[sof+9 : p], b[p : p+2+n], b[p+2+n : len(b)-2], nil
		}
		p += 2 + n
	}
	return nil, nil, nil, nil, fmt.Errorf("no SOS")
}

// mosaicFits reports whether the mosaic makes an image of w x h: it needs
// mosaicKeyTiles fully visible MCUs to carry the seed, so that distinct seeds give
// distinct pixels by construction. Smaller images (under 112x16, 64x32, 48x48 and the
// like) are cheap for the library encoder.
func mosaicFits(w, h int) bool { return (w/16)*(h/16) >= mosaicKeyTiles }

// encodeMosaic writes the JPEG of w x h for seed. The tiles of the first
// mosaicKeyTiles fully visible MCUs (raster order) are the bits of mix(seed), a
// bijection of the seed, 10 a tile: distinct seeds give distinct tiles there, and the
// library's tiles decode to distinct pixels (TestMosaicTilesDistinct), so distinct seeds
// give distinct decoded pixels. Every other MCU's tile is drawn from the seed's stream.
func encodeMosaic(w, h int, seed uint64) ([]byte, error) {
	t, err := loadTiles()
	if err != nil {
		return nil, err
	}
	cols, rows := (w+15)/16, (h+15)/16
	fullCols, fullRows := w/16, h/16
	idx := make([]uint16, cols*rows)
	pick := newTilePicker(seed, 0xb7e151628aed2a6a)
	size := len(t.head) + 4 + len(t.mid) + 6 + len(t.sos) + 2*len(idx)
	for my := range rows {
		for mx := range cols {
			v := pick.next(mx < fullCols && my < fullRows)
			idx[my*cols+mx] = v
			size += len(t.seg[v])
		}
	}
	out := make([]byte, 0, size)
	out = append(out, t.head...)
	out = binary.BigEndian.AppendUint16(out, uint16(h))
	out = binary.BigEndian.AppendUint16(out, uint16(w))
	out = append(out, t.mid...)
	out = append(out, 0xff, 0xdd, 0, 4, 0, 1) // DRI: restart every MCU (B.2.4.4)
	out = append(out, t.sos...)
	for i, v := range idx {
		if i > 0 {
			out = append(out, 0xff, 0xd0+byte((i-1)&7)) // RST0..RST7 in turn
		}
		out = append(out, t.seg[v]...)
	}
	return append(out, 0xff, 0xd9), nil
}

// tilePicker chooses a mosaic's tiles: the first mosaicKeyTiles it is asked for with
// keyed set are the bits of mix64(seed), 10 a tile; the others come from the seed's
// stream, 6 tiles a draw.
type tilePicker struct {
	key     uint64
	keyLeft int
	s, r    uint64
	left    int
}

// newTilePicker starts the picker of seed; salt sets its stream apart from the others
// drawn from the seed.
func newTilePicker(seed, salt uint64) tilePicker {
	return tilePicker{key: mix64(seed), keyLeft: mosaicKeyTiles, s: seed ^ salt}
}

// next returns the next tile's index.
func (p *tilePicker) next(keyed bool) uint16 {
	if keyed && p.keyLeft > 0 {
		v := uint16(p.key & (mosaicTiles - 1))
		p.key >>= mosaicBits
		p.keyLeft--
		return v
	}
	if p.left == 0 {
		p.r, p.left = splitmix64(&p.s), 64/mosaicBits
	}
	v := uint16(p.r & (mosaicTiles - 1))
	p.r >>= mosaicBits
	p.left--
	return v
}

// mix64 is SplitMix64's step from x: a bijection of the 64-bit values (adding a
// constant, each xor-shift and each product by an odd number is invertible).
func mix64(x uint64) uint64 { return splitmix64(&x) }
