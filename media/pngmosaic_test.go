package media

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"encoding/binary"
	"hash/adler32"
	"image"
	"io"
	"math/rand/v2"
	"testing"
)

// decodePNG decodes a PNG of w x h, which must be the 8-bit RGB Encode writes.
func decodePNG(t testing.TB, b []byte, w, h int) *image.RGBA {
	t.Helper()
	img := decodeSized(t, b, w, h, PNG)
	rgba, ok := img.(*image.RGBA)
	if !ok {
		t.Fatalf("%dx%d png decodes to %T, want 8-bit RGB", w, h, img)
	}
	return rgba
}

// FuzzEncode checks that any size, seed and format decodes to its size, whichever path
// makes it.
func FuzzEncode(f *testing.F) {
	for _, c := range [][3]uint64{{1, 1, 0}, {7, 3, 1}, {112, 16, 2}, {111, 16, 3}, {130, 66, 4}, {641, 480, 5}, {8, 7, 6}, {263, 2, 7}} {
		f.Add(c[0], c[1], c[2], false)
		f.Add(c[0], c[1], c[2], true)
	}
	f.Fuzz(func(t *testing.T, w, h, seed uint64, asPNG bool) {
		wi, hi := int(w%1200)+1, int(h%1200)+1
		if asPNG {
			b, err := Encode(wi, hi, seed, PNG)
			if err != nil {
				t.Fatal(err)
			}
			decodePNG(t, b, wi, hi)
			return
		}
		b, err := Encode(wi, hi, seed, JPEG)
		if err != nil {
			t.Fatal(err)
		}
		decodeJPEG(t, b, wi, hi)
	})
}

// TestPNGMosaicStructure checks the file chunk by chunk: the signature, IHDR's fields
// (8-bit RGB, no interlace), one IDAT holding a zlib stream whose Adler-32 compress/zlib
// accepts, scanlines all of filter type Sub, and IEND.
func TestPNGMosaicStructure(t *testing.T) {
	const w, h = 300, 20 // 256 + 32 + 8 + a tail of 4 pixels
	b, err := Encode(w, h, 5, PNG)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[:8]) != "\x89PNG\r\n\x1a\n" {
		t.Fatalf("signature % x", b[:8])
	}
	var types []string
	var idat []byte
	for p := 8; p < len(b); {
		n := int(binary.BigEndian.Uint32(b[p:]))
		typ, data := string(b[p+4:p+8]), b[p+8:p+8+n]
		types = append(types, typ)
		switch typ {
		case "IHDR":
			want := []byte{0, 0, 1, 44, 0, 0, 0, 20, 8, 2, 0, 0, 0}
			if !bytes.Equal(data, want) {
				t.Errorf("IHDR % x, want % x", data, want)
			}
		case "IDAT":
			idat = append(idat, data...)
		}
		p += 12 + n
	}
	if len(types) != 3 || types[0] != "IHDR" || types[1] != "IDAT" || types[2] != "IEND" {
		t.Fatalf("chunks %v, want IHDR, IDAT, IEND", types)
	}
	zr, err := zlib.NewReader(bytes.NewReader(idat))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("the zlib stream: %v", err)
	}
	if len(raw) != h*(1+3*w) {
		t.Fatalf("%d bytes of scanlines, want %d", len(raw), h*(1+3*w))
	}
	for y := range h {
		if f := raw[y*(1+3*w)]; f != 1 {
			t.Errorf("scanline %d has filter type %d, want 1 (Sub)", y, f)
		}
	}
}

// TestAdlerCombine checks adlerCombine and adlerUpdate against hash/adler32 over splits
// of random bytes, lengths over the modulus included.
func TestAdlerCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 200000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for _, c := range [][2]int{{0, 0}, {0, 5}, {5, 5}, {1, 2}, {100, 70000}, {70000, 131042}, {3, 200000}} {
		x, y := buf[:c[0]], buf[c[0]:c[1]]
		got := adlerCombine(adler32.Checksum(x), adler32.Checksum(y), len(y))
		if want := adler32.Checksum(buf[:c[1]]); got != want {
			t.Errorf("combine at %v = %#x, want %#x", c, got, want)
		}
		if c[1] < 6000 {
			if got, want := adlerUpdate(adler32.Checksum(x), y), adler32.Checksum(buf[:c[1]]); got != want {
				t.Errorf("update at %v = %#x, want %#x", c, got, want)
			}
		}
	}
}

// inflatePiece returns the filtered bytes a library piece deflates to.
func inflatePiece(t *testing.T, seg []byte) []byte {
	t.Helper()
	final := append(bytes.Clone(seg), 1, 0, 0, 0xff, 0xff) // an empty final stored block
	raw, err := io.ReadAll(flate.NewReader(bytes.NewReader(final)))
	if err != nil {
		t.Fatalf("a piece does not inflate: %v", err)
	}
	return raw
}

// TestPNGPiecesDistinct checks that pieces of a width inflate to pairwise distinct
// bytes of that width, with the sums the mosaic combines.
func TestPNGPiecesDistinct(t *testing.T) {
	lib, err := loadPNGPieces()
	if err != nil {
		t.Fatal(err)
	}
	for k, cw := range pngClasses {
		seen := map[string]int{}
		for i, p := range lib.class[k] {
			raw := inflatePiece(t, p.seg)
			if len(raw) != 3*cw || p.n != len(raw) || p.adler != adler32.Checksum(raw) {
				t.Fatalf("piece %d of %d px: %d bytes (n %d), adler %#x", i, cw, len(raw), p.n, p.adler)
			}
			if j, ok := seen[string(raw)]; ok {
				t.Fatalf("pieces %d and %d of %d px are the same", j, i, cw)
			}
			seen[string(raw)] = i
		}
	}
}

// TestPNGMosaicCarriesSeed checks the construction distinctness rests on: the first
// mosaicKeyTiles pieces, in scanline order, are those of mix64(seed).
func TestPNGMosaicCarriesSeed(t *testing.T) {
	lib, err := loadPNGPieces()
	if err != nil {
		t.Fatal(err)
	}
	for _, sz := range [][2]int{{8, 7}, {300, 3}, {600, 2}, {45, 4}} {
		w, h := sz[0], sz[1]
		var row []int // the pieces' classes
		for range w / 256 {
			row = append(row, 0)
		}
		for k, cw := range pngClasses[1:] {
			if w&cw != 0 {
				row = append(row, k+1)
			}
		}
		for seed := range uint64(10) {
			b, err := Encode(w, h, seed, PNG)
			if err != nil {
				t.Fatal(err)
			}
			decodePNG(t, b, w, h)
			raw := scanlines(t, b)
			key := mix64(seed)
			for i := range mosaicKeyTiles {
				y, j := i/len(row), i%len(row)
				x := 0
				for _, k := range row[:j] {
					x += pngClasses[k]
				}
				v := key >> (mosaicBits * i) & (pngPieceTiles - 1)
				want := inflatePiece(t, lib.class[row[j]][v].seg)
				at := y*(1+3*w) + 1 + 3*x
				if got := raw[at : at+len(want)]; !bytes.Equal(got, want) {
					t.Fatalf("%dx%d seed %d: piece %d is not tile %d of its width", w, h, seed, i, v)
				}
			}
		}
	}
}

// scanlines returns the filtered scanlines of a PNG of one IDAT.
func scanlines(t *testing.T, b []byte) []byte {
	t.Helper()
	p := 8 + 25
	n := int(binary.BigEndian.Uint32(b[p:]))
	zr, err := zlib.NewReader(bytes.NewReader(b[p+8 : p+8+n]))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
