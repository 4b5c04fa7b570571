package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	_ "image/jpeg"
	_ "image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/media"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/trace"
)

// imageTrace writes a trace of n requests 20 ms apart with prompt tokens and, when
// withImages, request i's images: i%3 of them, sized by sizes in turn (0x0: unknown).
func imageTrace(t *testing.T, path string, n int, prompt int32, withImages bool, sizes []trace.Image) []trace.Request {
	t.Helper()
	w, err := trace.Create(path, trace.Meta{Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var reqs []trace.Request
	k := 0
	for i := range n {
		r := trace.Request{ID: int64(i), Arrival: time.Duration(i) * 20 * time.Millisecond, PromptTokens: prompt, OutputTokens: 4}
		if withImages {
			for range i % 3 {
				r.Images = append(r.Images, sizes[k%len(sizes)])
				k++
			}
			// A row's images are all sized or all unknown: a row takes one kind.
			if len(r.Images) > 0 && !r.Images[0].Known() {
				for j := range r.Images {
					r.Images[j] = trace.Image{}
				}
			} else {
				for j := range r.Images {
					if !r.Images[j].Known() {
						r.Images[j] = trace.Image{Width: 300, Height: 200}
					}
				}
			}
		}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return reqs
}

// sentImages is what a proxy in front of the engine saw: each request's images' sizes
// decoded from the bytes sent, by X-Request-Id's trace id.
type sentImages struct {
	mu    sync.Mutex
	sizes map[string][][2]int
	bad   []string
}

// imageProxy returns a proxy to base that decodes every image part of a chat, Messages or
// Responses body (data URLs and Anthropic's base64 sources) before passing it on.
func imageProxy(t *testing.T, base *url.URL, seen *sentImages) *url.URL {
	t.Helper()
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: base.Scheme, Host: base.Host})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		var v any
		if r.Method == http.MethodPost && json.Unmarshal(body, &v) == nil {
			id := r.Header.Get("X-Request-Id")
			var sizes [][2]int
			walkImages(v, func(data string) {
				raw, err := base64.StdEncoding.DecodeString(data)
				cfg, _, err2 := image.DecodeConfig(bytes.NewReader(raw))
				seen.mu.Lock()
				defer seen.mu.Unlock()
				if err != nil || err2 != nil {
					seen.bad = append(seen.bad, fmt.Sprintf("%s: %v %v", id, err, err2))
					return
				}
				sizes = append(sizes, [2]int{cfg.Width, cfg.Height})
			})
			seen.mu.Lock()
			seen.sizes[id[strings.LastIndexByte(id, '-')+1:]] = sizes
			seen.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/v1")
	return u
}

// walkImages calls f with the base64 of every image part in v: a data URL (chat's
// image_url.url, the Responses API's image_url) or a base64 source (Messages).
func walkImages(v any, f func(string)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && (k == "url" || k == "image_url") && strings.HasPrefix(s, "data:image/") {
				f(s[strings.Index(s, ",")+1:])
				continue
			}
			if k == "source" {
				if m, ok := e.(map[string]any); ok && m["type"] == "base64" {
					f(m["data"].(string))
					continue
				}
			}
			walkImages(e, f)
		}
	case []any:
		for _, e := range x {
			walkImages(e, f)
		}
	}
}

// TestImagesAgainstSim replays a trace whose rows send 0, 1 or 2 images (of known
// sizes, or of sizes the trace does not give) through each API that takes images, to the
// simulated engine behind a proxy that decodes every image sent. Each image must decode
// to the trace's size (--image-size for unknown ones); the records must say how many
// images went and what the rule counts them for; and the engine, which counts images by
// the same rule, must count each prompt as the trace's plus its chat template, as it does
// the same rows without images.
func TestImagesAgainstSim(t *testing.T) {
	dir := t.TempDir()
	sizes := []trace.Image{{Width: 640, Height: 480}, {Width: 1280, Height: 720}, {}, {Width: 97, Height: 1500}}
	withPath, withoutPath := filepath.Join(dir, "images.parquet"), filepath.Join(dir, "text.parquet")
	reqs := imageTrace(t, withPath, 12, 4000, true, sizes)
	imageTrace(t, withoutPath, 12, 4000, false, nil)
	cfg, err := sim.Profile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	running, err := sim.Start(context.Background(), "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { running.Close() })
	simURL, _ := url.Parse(running.BaseURL())
	rule, _ := media.LookupRule(media.DefaultRule)
	for _, api := range []string{"chat", "messages", "responses"} {
		t.Run(api, func(t *testing.T) {
			seen := &sentImages{sizes: map[string][][2]int{}}
			endpoint := imageProxy(t, simURL, seen)
			replayTo := func(tr, tag string, extra ...string) map[int64]results.Result {
				out := filepath.Join(dir, api+tag+".parquet")
				args := append([]string{"replay", "--trace", tr, "--endpoint", endpoint.String(), "--api", api, "-q", "-o", out, "--image-size", "800x600"}, extra...)
				if msg, err := runArgs(t, args...); err != nil {
					t.Fatalf("replay: %v %s", err, msg)
				}
				recs, _, err := results.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				byID := map[int64]results.Result{}
				for _, r := range recs {
					if r.Status != results.StatusOK {
						t.Errorf("%s: request %d: %s %q", tag, r.RequestID, r.Status, r.Error)
					}
					byID[r.RequestID] = r
				}
				return byID
			}
			base := replayTo(withoutPath, "-text")
			got := replayTo(withPath, "-images")
			if len(seen.bad) > 0 {
				t.Errorf("images that do not decode: %v", seen.bad)
			}
			for _, tr := range reqs {
				r := got[tr.ID]
				want := int64(0)
				var wantSizes [][2]int
				for _, im := range tr.Images {
					w, h := int(im.Width), int(im.Height)
					if !im.Known() {
						w, h = 800, 600
					}
					wantSizes = append(wantSizes, [2]int{w, h})
					want += int64(rule.Tokens(w, h))
				}
				if sent := seen.sizes[fmt.Sprint(tr.ID)]; fmt.Sprint(sent) != fmt.Sprint(wantSizes) {
					t.Errorf("request %d: images sent decode to %v, want %v", tr.ID, sent, wantSizes)
				}
				if len(tr.Images) == 0 {
					if r.Images != results.Null || r.ImageTokens != results.Null {
						t.Errorf("request %d without images: images %d, image_tokens %d; want null", tr.ID, r.Images, r.ImageTokens)
					}
				} else if r.Images != int32(len(tr.Images)) || int64(r.ImageTokens) != want {
					t.Errorf("request %d: images %d, image_tokens %d; want %d, %d", tr.ID, r.Images, r.ImageTokens, len(tr.Images), want)
				}
				template := base[tr.ID].PromptTokensServer - base[tr.ID].PromptTokens
				if r.PromptTokens != tr.PromptTokens || r.PromptTokensServer-r.PromptTokens != template {
					t.Errorf("request %d (%d images): the engine counted %d prompt tokens for the trace's %d; want the trace's + the template's %d, as without images",
						tr.ID, len(tr.Images), r.PromptTokensServer, r.PromptTokens, template)
				}
			}
		})
	}
}

// TestImagesRefusedOrDropped: a trace with images is refused before anything is sent by
// an API that takes none, and by a rule that leaves a row no text; --drop-images sends it
// as text; the in-process engine counts images by the replay's --image-rule.
func TestImagesRefusedOrDropped(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "images.parquet")
	imageTrace(t, tr, 6, 3000, true, []trace.Image{{Width: 512, Height: 512}})
	out := func(name string) string { return filepath.Join(dir, name+".parquet") }
	if _, err := runArgs(t, "replay", "--trace", tr, "--api", "completions", "-q", "-o", out("c")); err == nil || !strings.Contains(err.Error(), "--drop-images") {
		t.Errorf("completions with images: %v; want a refusal that names --drop-images", err)
	}
	if _, err := runArgs(t, "replay", "--trace", tr, "--api", "chat", "--image-rule", "fixed:3000", "-q", "-o", out("r")); err == nil || !strings.Contains(err.Error(), "request 1") {
		t.Errorf("a rule that leaves no text: %v; want a refusal naming request 1", err)
	}
	for _, name := range []string{"c", "r"} {
		if _, err := os.Stat(out(name)); !os.IsNotExist(err) {
			t.Errorf("a refused run left %s: %v", out(name), err)
		}
	}
	// Without images, the engine counts a prompt as the trace's plus its template (none on
	// completions' token ids); with them, by the replay's rule, the same.
	template := map[string]int32{}
	for _, c := range []struct {
		name, api string
		args      []string
	}{
		{"dropped", "completions", []string{"--drop-images"}},
		{"dropped-chat", "chat", []string{"--drop-images"}},
		{"fixed", "chat", []string{"--image-rule", "fixed:100"}},
	} {
		recs := replayInProcess(t, append([]string{"replay", "--trace", tr, "-q", "-o", out(c.name), "--api", c.api}, c.args...))
		for _, r := range recs {
			images := c.name == "fixed" && r.RequestID%3 != 0
			okImages := r.Images == results.Null && r.ImageTokens == results.Null
			if images {
				okImages = r.Images == int32(r.RequestID%3) && r.ImageTokens == 100*r.Images
			}
			if _, ok := template[c.api]; !ok {
				template[c.api] = r.PromptTokensServer - r.PromptTokens
			}
			if r.Status != results.StatusOK || !okImages || r.PromptTokensServer-r.PromptTokens != template[c.api] {
				t.Errorf("%s: request %d: %s, images %d counted %d, prompt %d served %d (template %d)", c.name, r.RequestID, r.Status, r.Images, r.ImageTokens, r.PromptTokens, r.PromptTokensServer, template[c.api])
			}
		}
	}
	if template["completions"] != 0 {
		t.Errorf("completions: the engine counted %d tokens beyond the trace's", template["completions"])
	}
}

// TestImagesCalibrated: an engine that counts images otherwise than --image-rule
// (fixed:300 against the default qwen2-vl) makes every prompt with images miscounted;
// --calibrate measures the engine's count of each size the run sends and the run sends by
// it, so that the engine counts every prompt as the trace's, and the records say what
// the images were counted.
func TestImagesCalibrated(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "images.parquet")
	reqs := imageTrace(t, tr, 9, 5000, true, []trace.Image{{Width: 640, Height: 480}, {Width: 1024, Height: 1024}})
	cfg, err := sim.Profile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ImageRule = "fixed:300"
	running, err := sim.Start(context.Background(), "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { running.Close() })
	rule, _ := media.LookupRule(media.DefaultRule)
	for _, calibrate := range []bool{false, true} {
		out := filepath.Join(dir, fmt.Sprintf("cal-%v.parquet", calibrate))
		args := []string{"replay", "--trace", tr, "--endpoint", running.BaseURL(), "--api", "chat", "-q", "-o", out}
		if calibrate {
			args = append(args, "--calibrate")
		}
		if msg, err := runArgs(t, args...); err != nil {
			t.Fatalf("replay: %v %s", err, msg)
		}
		recs, meta, err := results.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if calibrate && !strings.Contains(meta.Flags["image-tokens"], "640x480 300 (rule ") {
			t.Errorf("run metadata image-tokens %q: want the measured 300 for 640x480 beside the rule's", meta.Flags["image-tokens"])
		}
		template := int32(-1) // uncalibrated: the engine's chat template, from a row without images
		for _, r := range recs {
			if len(reqs[r.RequestID].Images) == 0 {
				template = r.PromptTokensServer - r.PromptTokens
			}
		}
		for _, r := range recs {
			n := len(reqs[r.RequestID].Images)
			if n == 0 {
				continue
			}
			var ruled int32
			for _, im := range reqs[r.RequestID].Images {
				ruled += int32(rule.Tokens(int(im.Width), int(im.Height)))
			}
			wantImg, wantOff := ruled, int32(300*n)-ruled+template // uncalibrated: off by the rules' difference and the template
			if calibrate {
				wantImg, wantOff = int32(300*n), 0
			}
			off := r.PromptTokensServer - r.PromptTokens
			if r.Status != results.StatusOK || r.ImageTokens != wantImg || off != wantOff {
				t.Errorf("calibrate=%v: request %d (%d images): %s, image_tokens %d want %d, served %d for the trace's %d (off %d, want %d)",
					calibrate, r.RequestID, n, r.Status, r.ImageTokens, wantImg, r.PromptTokensServer, r.PromptTokens, off, wantOff)
			}
		}
	}
}

// TestAzureMultimodalSampleReplays imports the multimodal sample (written by us in the
// published schema of Azure's 2025 multimodal trace: counts of images, no sizes) and
// replays it through the chat API to the in-process engine (the fixed profile: some rows are
// longer than tiny's context): every request ok, with the
// trace's count of images, each counted by the rule at --image-size, and the engine
// counting every prompt as the trace's plus its template.
func TestAzureMultimodalSampleReplays(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "lmm.parquet")
	if msg, err := runArgs(t, "trace", "import", "--from", "azure-lmm", "-o", tr, filepath.Join(tracesDir(t), "AzureLMMInferenceTrace_multimodal.sample.csv")); err != nil {
		t.Fatalf("import: %v %s", err, msg)
	}
	rd, err := trace.Open(tr)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64]int32{}
	for rd.Next() {
		want[rd.Request().ID] = int32(len(rd.Request().Images))
	}
	rd.Close()
	// At the default 1024x1024 a qwen2-vl image is 1,371 tokens, more than some rows'
	// whole context (16 images in 8,157 tokens): the run must say so before sending.
	if _, err := runArgs(t, "replay", "--trace", tr, "--api", "chat", "-q", "-o", filepath.Join(dir, "refused.parquet")); err == nil || !strings.Contains(err.Error(), "--image-size") {
		t.Fatalf("replay at 1024x1024: %v; want a refusal naming --image-size", err)
	}
	rule, _ := media.LookupRule(media.DefaultRule)
	per := int32(rule.Tokens(448, 448))
	recs := replayInProcess(t, []string{"replay", "--trace", tr, "--api", "chat", "--image-size", "448x448", "--rate", "20", "--sim-profile", "fixed", "-q", "-o", filepath.Join(dir, "r.parquet")})
	if len(recs) != len(want) {
		t.Fatalf("%d records of %d rows", len(recs), len(want))
	}
	template := int32(-1)
	for _, r := range recs {
		if want[r.RequestID] == 0 {
			template = r.PromptTokensServer - r.PromptTokens
		}
	}
	for _, r := range recs {
		n := want[r.RequestID]
		okImages := r.Images == results.Null
		if n > 0 {
			okImages = r.Images == n && r.ImageTokens == n*per
		}
		if r.Status != results.StatusOK || !okImages || r.PromptTokensServer-r.PromptTokens != template {
			t.Errorf("request %d (%d images): %s %q, images %d counted %d (want %d each), served %d for %d (template %d)",
				r.RequestID, n, r.Status, r.Error, r.Images, r.ImageTokens, per, r.PromptTokensServer, r.PromptTokens, template)
		}
	}
}

// TestSynthImagesReplay: trace synth --images counts each image by the default rule into
// prompt_tokens and image_tokens, and the trace replays through chat with the engine
// counting every prompt as the trace's plus its template (what it counts beyond the same
// rows sent as text, --drop-images).
func TestSynthImagesReplay(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "s.parquet")
	if msg, err := runArgs(t, "trace", "synth", "--images", "fixed:2", "--image-width", "fixed:640", "--image-height", "fixed:480",
		"--prompt-tokens", "fixed:500", "--output-tokens", "fixed:4", "--arrival", "constant", "--rate", "20", "--count", "5", "--seed", "1", "-o", tr); err != nil {
		t.Fatalf("synth: %v %s", err, msg)
	}
	rule, _ := media.LookupRule(media.DefaultRule)
	per := int32(rule.Tokens(640, 480))
	rd, err := trace.Open(tr)
	if err != nil {
		t.Fatal(err)
	}
	for rd.Next() {
		r := rd.Request()
		if len(r.Images) != 2 || !r.HasImageTokens || r.ImageTokens != 2*per || r.PromptTokens != 500+2*per {
			t.Errorf("row %d: %d images, image_tokens %d (%v), prompt %d; want 2, %d, %d", r.ID, len(r.Images), r.ImageTokens, r.HasImageTokens, r.PromptTokens, 2*per, 500+2*per)
		}
	}
	rd.Close()
	// The engine's chat template: what it counts beyond a text prompt (the same rows as text).
	template := map[int64]int32{}
	for _, r := range replayInProcess(t, []string{"replay", "--trace", tr, "--api", "chat", "--drop-images", "-q", "-o", filepath.Join(dir, "text.parquet")}) {
		template[r.RequestID] = r.PromptTokensServer - r.PromptTokens
	}
	for _, r := range replayInProcess(t, []string{"replay", "--trace", tr, "--api", "chat", "-q", "-o", filepath.Join(dir, "r.parquet")}) {
		if r.Status != results.StatusOK || r.ImageTokens != 2*per || r.PromptTokensServer-r.PromptTokens != template[r.RequestID] {
			t.Errorf("request %d: %s, image_tokens %d, served %d for %d (template %d)", r.RequestID, r.Status, r.ImageTokens, r.PromptTokensServer, r.PromptTokens, template[r.RequestID])
		}
	}
}
