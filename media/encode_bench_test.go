package media

import (
	"fmt"
	"image"
	"testing"
)

// BenchmarkEncode measures Encode at the sizes replays send most, beside the painted
// path (every pixel painted and coded by image/jpeg or image/png, what Encode did before
// the mosaics) in the same run; bytes/image is the file's size, bits/px its cost per
// pixel (a photo's JPEG is 0.5 to 3, its PNG 10 to 16). The mosaics' libraries are
// built before the timing (BenchmarkMosaicTiles and BenchmarkPNGPieces measure that,
// once per process).
func BenchmarkEncode(b *testing.B) {
	if _, err := loadTiles(); err != nil {
		b.Fatal(err)
	}
	if _, err := loadPNGPieces(); err != nil {
		b.Fatal(err)
	}
	paths := []struct {
		name string
		fn   func(int, int, uint64, Format) ([]byte, error)
	}{{"encode", Encode}, {"painted", encodePainted}}
	for _, side := range []int{512, 1024} {
		for _, f := range []Format{JPEG, PNG} {
			for _, p := range paths {
				b.Run(fmt.Sprintf("%dx%d/%s/%s", side, side, f, p.name), func(b *testing.B) {
					b.ReportAllocs()
					var n int
					seed := uint64(0)
					for b.Loop() {
						img, err := p.fn(side, side, seed, f)
						if err != nil {
							b.Fatal(err)
						}
						n = len(img)
						seed++
					}
					b.ReportMetric(float64(n), "bytes/image")
					b.ReportMetric(float64(8*n)/float64(side*side), "bits/px")
				})
			}
		}
	}
}

// BenchmarkMosaicTiles measures building the JPEG mosaic's tile library, which a
// process pays once, on its first JPEG.
func BenchmarkMosaicTiles(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := buildTiles(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPNGPieces measures building the PNG mosaic's pieces, which a process pays
// once, on its first PNG.
func BenchmarkPNGPieces(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := buildPNGPieces(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPaint measures the pixels alone, to tell the content's cost from the codec's.
func BenchmarkPaint(b *testing.B) {
	img := image.NewRGBA(image.Rect(0, 0, 1024, 1024))
	b.ReportAllocs()
	for b.Loop() {
		paint(img, 1, 4)
	}
}

// BenchmarkAppendBase64 measures the data URL's encoding of a 1024x1024 JPEG.
func BenchmarkAppendBase64(b *testing.B) {
	img, err := Encode(1024, 1024, 1, JPEG)
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, 0, 2*len(img))
	b.SetBytes(int64(len(img)))
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendBase64(dst[:0], img)
	}
}
