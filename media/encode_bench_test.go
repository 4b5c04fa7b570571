package media

import (
	"fmt"
	"image"
	"testing"
)

// BenchmarkEncode measures Encode at the sizes replays send most; bytes/image is the
// file's size, bits/px its cost per pixel (a photo's JPEG is 0.5 to 3).
func BenchmarkEncode(b *testing.B) {
	for _, side := range []int{512, 1024} {
		for _, f := range []Format{JPEG, PNG} {
			b.Run(fmt.Sprintf("%dx%d/%s", side, side, f), func(b *testing.B) {
				b.ReportAllocs()
				var n int
				seed := uint64(0)
				for b.Loop() {
					img, err := Encode(side, side, seed, f)
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

// BenchmarkPaint measures the pixels alone, to tell the content's cost from the codec's.
func BenchmarkPaint(b *testing.B) {
	img := image.NewRGBA(image.Rect(0, 0, 1024, 1024))
	b.ReportAllocs()
	for b.Loop() {
		paint(img, 1)
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
