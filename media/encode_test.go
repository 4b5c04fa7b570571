package media

import (
	"bytes"
	"encoding/base64"
	"image"
	"testing"
)

// TestEncodeDecodesToSize checks Encode (a mosaic for all but the smallest sizes) and the
// painted path alike.
func TestEncodeDecodesToSize(t *testing.T) {
	for _, f := range []Format{PNG, JPEG} {
		for _, sz := range [][2]int{{1, 1}, {7, 3}, {64, 64}, {333, 129}, {1024, 768}} {
			for _, enc := range []func(int, int, uint64, Format) ([]byte, error){Encode, encodePainted} {
				testDecodesToSize(t, enc, sz, f)
			}
		}
	}
}

func testDecodesToSize(t *testing.T, enc func(int, int, uint64, Format) ([]byte, error), sz [2]int, f Format) {
	t.Helper()
	b, err := enc(sz[0], sz[1], 42, f)
	if err != nil {
		t.Fatalf("encode %v %s: %v", sz, f, err)
	}
	decodeSized(t, b, sz[0], sz[1], f)
}

func TestEncodeDeterministicAndDistinct(t *testing.T) {
	for _, f := range []Format{PNG, JPEG} {
		a, _ := Encode(256, 192, 7, f)
		b, _ := Encode(256, 192, 7, f)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the same seed gave different bytes", f)
		}
		// Distinct seeds give distinct pixels, down to one JPEG block (8x8, where the
		// codec's quantisation leaves the least of them).
		for _, side := range []int{8, 64} {
			seen := map[string]uint64{}
			for seed := range uint64(400) {
				b, err := Encode(side, side, seed, f)
				if err != nil {
					t.Fatal(err)
				}
				img, _, err := image.Decode(bytes.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				key := string(pixels(img))
				if prev, ok := seen[key]; ok {
					t.Fatalf("%s %dx%d: seeds %d and %d give the same pixels", f, side, side, prev, seed)
				}
				seen[key] = seed
			}
		}
	}
}

// pixels returns img's pixels as RGBA bytes, as a cache keyed on the decoded image sees it.
func pixels(img image.Image) []byte {
	r := img.Bounds()
	out := make([]byte, 0, 4*r.Dx()*r.Dy())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			cr, cg, cb, ca := img.At(x, y).RGBA()
			out = append(out, byte(cr>>8), byte(cg>>8), byte(cb>>8), byte(ca>>8))
		}
	}
	return out
}

// TestEncodeCostsAPhoto holds the content to a photograph's cost on the wire: a JPEG of
// 0.5 to 3 bits per pixel, a PNG of 8 to 16 (a photo's as a PNG), where a blank image
// would be a few hundred bytes.
func TestEncodeCostsAPhoto(t *testing.T) {
	for _, c := range []struct {
		f      Format
		lo, hi float64
	}{{JPEG, 0.5, 3}, {PNG, 8, 16}} {
		b, err := Encode(512, 512, 3, c.f)
		if err != nil {
			t.Fatal(err)
		}
		bpp := float64(8*len(b)) / (512 * 512)
		if bpp < c.lo || bpp > c.hi {
			t.Errorf("%s 512x512 is %.2f bits per pixel, want %g..%g", c.f, bpp, c.lo, c.hi)
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	for _, c := range []struct {
		w, h int
		f    Format
	}{{0, 10, PNG}, {10, -1, JPEG}, {MaxSide + 1, 1, PNG}, {10, 10, "gif"}} {
		if _, err := Encode(c.w, c.h, 1, c.f); err == nil {
			t.Errorf("Encode(%d, %d, %q) accepted", c.w, c.h, c.f)
		}
	}
}

func TestFormats(t *testing.T) {
	for in, want := range map[string]Format{"png": PNG, "jpeg": JPEG, "jpg": JPEG} {
		if f, err := ParseFormat(in); err != nil || f != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, f, err)
		}
	}
	if _, err := ParseFormat("webp"); err == nil {
		t.Error("ParseFormat(webp) accepted")
	}
	if PNG.MIME() != "image/png" || JPEG.MIME() != "image/jpeg" {
		t.Errorf("MIME: %s %s", PNG.MIME(), JPEG.MIME())
	}
}

func TestAppendBase64(t *testing.T) {
	src := []byte("\x00\xffimage bytes")
	got := AppendBase64([]byte("data:,"), src)
	want := "data:," + base64.StdEncoding.EncodeToString(src)
	if string(got) != want {
		t.Errorf("AppendBase64 = %q, want %q", got, want)
	}
}
