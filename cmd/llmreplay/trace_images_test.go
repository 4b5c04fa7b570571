package main

import (
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// imagesInfo is the images part of trace info --json.
type imagesInfo struct {
	Images *struct {
		WithImages int64 `json:"with_images"`
		Total      int64 `json:"total"`
		Sized      int64 `json:"sized"`
		Recorded   int64 `json:"recorded"`
		Width      *struct {
			P50 float64 `json:"p50"`
		} `json:"width"`
		Height *struct {
			P50 float64 `json:"p50"`
		} `json:"height"`
	} `json:"images"`
	Meta struct {
		Generator string `json:"Generator"`
	} `json:"meta"`
}

func traceImagesInfo(t *testing.T, path string) imagesInfo {
	t.Helper()
	msg, err := runArgs(t, "trace", "info", "--json", path)
	if err != nil {
		t.Fatal(err)
	}
	var info imagesInfo
	if err := json.Unmarshal([]byte(msg), &info); err != nil {
		t.Fatalf("%v\n%s", err, msg)
	}
	return info
}

// TestTraceSynthImages: --images and the size flags put that many images of that size in
// every request, which trace info reports and the generator records; --image-rule none
// records no image_tokens; the image flags without --images, or with --turns, are usage
// errors.
func TestTraceSynthImages(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "images.parquet")
	if msg, err := runArgs(t, "trace", "synth", "--rate", "5", "--count", "40", "--images", "fixed:2", "--image-width", "fixed:640",
		"--image-height", "fixed:480", "--image-rule", "none", "-o", out); err != nil {
		t.Fatalf("synth: %v %s", err, msg)
	}
	info := traceImagesInfo(t, out)
	im := info.Images
	if im == nil || im.WithImages != 40 || im.Total != 80 || im.Sized != 80 || im.Recorded != 0 || im.Width.P50 != 640 || im.Height.P50 != 480 {
		t.Errorf("info: %+v", im)
	}
	if g := info.Meta.Generator; !strings.Contains(g, `"images":{"count":{"kind":"fixed","a":2}`) || strings.Contains(g, `"rule"`) {
		t.Errorf("generator %s does not record the images (and no rule)", g)
	}
	for _, c := range [][]string{
		{"--image-width", "fixed:64"},
		{"--images", "fixed:1", "--turns", "uniform:2,3"},
		{"--images", "fixed:1", "--image-height", "empirical:x.parquet"},
		{"--images", "many"},
	} {
		args := append([]string{"trace", "synth", "--rate", "5", "--count", "5", "-o", filepath.Join(dir, "bad.parquet")}, c...)
		if _, err := runArgs(t, args...); exitCode(err, io.Discard) != 2 {
			t.Errorf("%v: %v, want a usage error", c, err)
		}
	}
}

// TestTraceImportAzureLMM: the command imports the multimodal sample and trace info
// counts its images (107 in 31 requests, sizes unknown).
func TestTraceImportAzureLMM(t *testing.T) {
	out := filepath.Join(t.TempDir(), "lmm.parquet")
	in := filepath.Join("..", "..", "testdata", "traces", "AzureLMMInferenceTrace_multimodal.sample.csv")
	if msg, err := runArgs(t, "trace", "import", "--from", "azure-lmm", in, "-o", out); err != nil || !strings.Contains(msg, "(azure-lmm-2025)") {
		t.Fatalf("import: %v %s", err, msg)
	}
	im := traceImagesInfo(t, out).Images
	if im == nil || im.WithImages != 31 || im.Total != 107 || im.Sized != 0 || im.Width != nil {
		t.Errorf("info: %+v", im)
	}
	text, err := runArgs(t, "trace", "info", out)
	if err != nil || !strings.Contains(text, "images     64.6 % of requests send images (31 of 48; 107 images)") || !strings.Contains(text, "sizes unknown (0x0") {
		t.Errorf("info: %v\n%s", err, text)
	}
}
