package trace

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
)

var updateInfo = flag.Bool("update-info", false, "rewrite testdata/info-*.golden from the current trace info")

// TestInfoGoldenPlain pins what `trace info` prints, text and JSON, for traces without
// agent columns: the bundled Azure sample and a synthetic multi-turn trace with sessions
// and prefix blocks. The agent figures must leave these outputs byte for byte as they were.
func TestInfoGoldenPlain(t *testing.T) {
	turns, _ := ParseDist("uniform:1,6")
	chat := baseSpec()
	chat.Count, chat.Turns, chat.Sessions, chat.BlockTokens = 400, &turns, 8, 16
	for _, c := range []struct {
		name string
		open func() (*Reader, error)
	}{
		{"sample", OpenSample},
		{"chat", func() (*Reader, error) { return NewReader(bytes.NewReader(synthBytes(t, chat)), "chat") }},
	} {
		r, err := c.open()
		if err != nil {
			t.Fatal(err)
		}
		info, err := ComputeInfo(context.Background(), r, r.Meta())
		if err != nil {
			t.Fatal(err)
		}
		checkInfoGolden(t, info, c.name)
	}
}

// checkInfoGolden compares trace info's text and JSON of info with testdata/info-NAME.golden
// (-update-info rewrites it).
func checkInfoGolden(t *testing.T, info Info, name string) {
	t.Helper()
	var got bytes.Buffer
	if err := info.WriteText(&got, name); err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(&got)
	enc.SetIndent("", "  ")
	if err := enc.Encode(info); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "info-"+name+".golden")
	if *updateInfo {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./trace -run TestInfoGolden -update-info to write it)", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("trace info of %s changed:\n%s\nwant:\n%s", name, got.Bytes(), want)
	}
}

// imagesTrace is a trace of every image shape: 0..4 images a request, some sized and
// some 0x0, image_tokens on some rows. Its figures can be worked by hand: 240 of 300 rows
// send images (i%5 != 0), 600 images in all.
func imagesTrace() []Request {
	reqs := make([]Request, 300)
	for i := range reqs {
		r := Request{ID: int64(i), Arrival: time.Duration(i) * 100 * time.Millisecond, PromptTokens: int32(500 + i), OutputTokens: 10}
		n := i % 5
		if n > 0 {
			r.Images = make([]Image, n)
			if i%3 == 0 {
				for k := range r.Images {
					r.Images[k] = Image{Width: 1024, Height: int32(768 + 16*(i%4))}
				}
			}
			if i%2 == 0 {
				r.ImageTokens, r.HasImageTokens = int32(100*n), true
			}
		}
		reqs[i] = r
	}
	return reqs
}

// TestInfoGoldenImages pins the images lines of `trace info`, text and JSON, and checks
// figures worked by hand: 80 % of requests send images, 600 images, 2.5 a request.
func TestInfoGoldenImages(t *testing.T) {
	info, err := ComputeInfo(context.Background(), NewSliceSource(imagesTrace()), Meta{Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ii := info.Images
	if ii == nil || ii.WithImages != 240 || ii.Share != 0.8 || ii.Total != 600 || ii.PerRequest.Mean != 2.5 || ii.PerRequest.Max != 4 || ii.Width == nil || ii.Width.P50 != 1024 || ii.Sized != 200 || ii.Recorded != 120 {
		t.Fatalf("images info %+v", ii)
	}
	checkInfoGolden(t, info, "images")
}
