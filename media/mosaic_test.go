package media

import (
	"bytes"
	"encoding/binary"
	"image"
	"testing"
)

// decodeSized decodes b with image.Decode (image/jpeg or image/png, which checks every
// chunk's CRC-32 and, reading the zlib stream to its end, the Adler-32) and checks that
// it is a file of format f and size w x h, as DecodeConfig reads it too.
func decodeSized(t testing.TB, b []byte, w, h int, f Format) image.Image {
	t.Helper()
	img, format, err := image.Decode(bytes.NewReader(b))
	if err != nil || format != string(f) {
		t.Fatalf("%dx%d %s does not decode: %q, %v", w, h, f, format, err)
	}
	if got := img.Bounds().Size(); got.X != w || got.Y != h {
		t.Fatalf("%dx%d %s decodes to %v", w, h, f, got)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil || format != string(f) || cfg.Width != w || cfg.Height != h {
		t.Fatalf("DecodeConfig of %dx%d %s = %+v %q %v", w, h, f, cfg, format, err)
	}
	return img
}

// decodeJPEG decodes a JPEG of w x h, which must be the 4:2:0 YCbCr Encode writes.
func decodeJPEG(t testing.TB, b []byte, w, h int) *image.YCbCr {
	t.Helper()
	img := decodeSized(t, b, w, h, JPEG)
	y, ok := img.(*image.YCbCr)
	if !ok || y.SubsampleRatio != image.YCbCrSubsampleRatio420 {
		t.Fatalf("%dx%d decodes to %T, want 4:2:0 YCbCr", w, h, img)
	}
	return y
}

// TestMosaicDecodesToSize covers the sizes around the mosaics' edges: the smallest they
// make; for JPEG sides that are not multiples of 16 (cropped MCUs) and one MCU wide or
// high, for PNG widths that take every run's width and a tail; and the 16384-pixel bound.
func TestMosaicDecodesToSize(t *testing.T) {
	for _, c := range []struct {
		f     Format
		fits  func(w, h int) bool
		sizes [][2]int
	}{
		{JPEG, mosaicFits, [][2]int{
			{112, 16}, {16, 112}, {48, 48}, {113, 17}, {127, 31}, {333, 129}, {1000, 17},
			{17, 1000}, {1023, 769}, {1024, 1024}, {MaxSide, 16}, {16, MaxSide}, {MaxSide, 33},
		}},
		{PNG, pngFits, [][2]int{
			{8, 7}, {9, 7}, {15, 7}, {56, 3}, {255, 3}, {257, 7}, {333, 129}, {511, 64},
			{1023, 769}, {1024, 1024}, {MaxSide, 1}, {MaxSide, 3}, {MaxSide - 1, 2},
		}},
	} {
		for _, sz := range c.sizes {
			if !c.fits(sz[0], sz[1]) {
				t.Fatalf("%v %s: the mosaic does not make it; the test means it to", sz, c.f)
			}
			b, err := Encode(sz[0], sz[1], uint64(sz[0]*sz[1]), c.f)
			if err != nil {
				t.Fatal(err)
			}
			if c.f == JPEG {
				decodeJPEG(t, b, sz[0], sz[1])
			} else {
				decodePNG(t, b, sz[0], sz[1])
			}
		}
	}
}

// TestMosaicHeader checks the header field by field: the painted path's tables (so
// the segments, coded under them, decode as coded), SOF0 of the size, a DRI of one
// MCU, and a restart marker between every two MCUs, RST0..RST7 in turn.
func TestMosaicHeader(t *testing.T) {
	const w, h = 200, 70 // 13 x 5 MCUs
	b, err := Encode(w, h, 9, JPEG)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := encodePainted(w, h, 9, JPEG)
	if err != nil {
		t.Fatal(err)
	}
	rh, rm, rs, _, err := splitJPEG(ref)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, rh) {
		t.Fatalf("the header up to SOF0's size differs from image/jpeg's")
	}
	if gh, gw := binary.BigEndian.Uint16(b[len(rh):]), binary.BigEndian.Uint16(b[len(rh)+2:]); gw != w || gh != h {
		t.Errorf("SOF0 says %dx%d, want %dx%d", gw, gh, w, h)
	}
	rest := b[len(rh)+4:]
	if !bytes.HasPrefix(rest, rm) {
		t.Fatalf("the tables after SOF0 differ from image/jpeg's")
	}
	rest = rest[len(rm):]
	if dri := []byte{0xff, 0xdd, 0, 4, 0, 1}; !bytes.HasPrefix(rest, dri) {
		t.Fatalf("no DRI of 1 before SOS: % x", rest[:6])
	}
	rest = rest[6:]
	if !bytes.HasPrefix(rest, rs) {
		t.Fatalf("the SOS differs from image/jpeg's")
	}
	scan := rest[len(rs):]
	var markers []byte
	for i := 0; i+1 < len(scan); i++ {
		if scan[i] == 0xff && scan[i+1] != 0 {
			markers = append(markers, scan[i+1])
			i++
		}
	}
	mcus := ((w + 15) / 16) * ((h + 15) / 16)
	if len(markers) != mcus {
		t.Fatalf("%d markers in the scan, want %d restarts and EOI", len(markers), mcus-1)
	}
	for i, m := range markers[:mcus-1] {
		if m != 0xd0+byte(i%8) {
			t.Fatalf("restart %d is marker %#x, want RST%d", i, m, i%8)
		}
	}
	if markers[mcus-1] != 0xd9 {
		t.Errorf("the scan ends with marker %#x, not EOI", markers[mcus-1])
	}
}

// tileIndex maps each library segment back to its tile.
func tileIndex(t *testing.T) map[string]int {
	lib, err := loadTiles()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for i, s := range lib.seg {
		m[string(s)] = i
	}
	return m
}

// TestMosaicCarriesSeed checks the construction distinctness rests on: the first
// mosaicKeyTiles fully visible MCUs are the tiles of mix64(seed), wherever the
// visible ones fall in raster order (a column of cropped MCUs on the right).
func TestMosaicCarriesSeed(t *testing.T) {
	index := tileIndex(t)
	for _, sz := range [][2]int{{112, 16}, {40, 100}, {1000, 40}, {17, 200}} {
		w, h := sz[0], sz[1]
		for seed := range uint64(20) {
			b, err := Encode(w, h, seed, JPEG)
			if err != nil {
				t.Fatal(err)
			}
			segs := scanSegments(t, b)
			cols := (w + 15) / 16
			var key uint64
			n := 0
			for i, s := range segs {
				if i%cols >= w/16 || i/cols >= h/16 || n == mosaicKeyTiles {
					continue
				}
				v, ok := index[string(s)]
				if !ok {
					t.Fatalf("%dx%d seed %d: MCU %d is no tile of the library", w, h, seed, i)
				}
				key |= uint64(v) << (mosaicBits * n)
				n++
			}
			if key != mix64(seed) {
				t.Errorf("%dx%d seed %d: the visible tiles say %#x, want mix64(seed) %#x", w, h, seed, key, mix64(seed))
			}
		}
	}
}

// scanSegments returns the entropy-coded segments of a mosaic, split at its markers.
func scanSegments(t *testing.T, b []byte) [][]byte {
	_, _, sos, _, err := splitJPEG(b)
	if err != nil {
		t.Fatal(err)
	}
	p := bytes.Index(b, sos) + len(sos)
	var segs [][]byte
	start := p
	for ; p+1 < len(b); p++ {
		if b[p] == 0xff && b[p+1] != 0 {
			segs = append(segs, b[start:p])
			p++
			start = p + 1
		}
	}
	return segs
}

// TestMosaicTilesDistinct checks that the library's tiles decode to pairwise distinct
// luma, which with TestMosaicCarriesSeed makes distinct seeds' images distinct in
// their decoded pixels; and that each is a valid one-MCU JPEG on its own.
func TestMosaicTilesDistinct(t *testing.T) {
	lib, err := loadTiles()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for i, s := range lib.seg {
		b := append([]byte{}, lib.head...)
		b = append(b, 0, 16, 0, 16)
		b = append(b, lib.mid...)
		b = append(b, lib.sos...)
		b = append(b, s...)
		b = append(b, 0xff, 0xd9)
		img := decodeJPEG(t, b, 16, 16)
		if j, ok := seen[string(img.Y)]; ok {
			t.Fatalf("tiles %d and %d decode to the same luma", j, i)
		}
		seen[string(img.Y)] = i
	}
}

// TestMosaicDistinctPixels checks decoded pixels over many seeds at the smallest size
// each mosaic makes, where the fewest tiles tell images apart.
func TestMosaicDistinctPixels(t *testing.T) {
	for _, c := range []struct {
		f    Format
		w, h int
	}{{JPEG, 112, 16}, {PNG, 8, 7}} {
		seen := map[string]uint64{}
		for seed := range uint64(3000) {
			b, err := Encode(c.w, c.h, seed, c.f)
			if err != nil {
				t.Fatal(err)
			}
			key := string(pixels(decodeSized(t, b, c.w, c.h, c.f)))
			if prev, ok := seen[key]; ok {
				t.Fatalf("%s %dx%d: seeds %d and %d give the same pixels", c.f, c.w, c.h, prev, seed)
			}
			seen[key] = seed
		}
	}
}
