package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/internal/duckdbtest"
	"github.com/llmreplay/llmreplay/stats"
)

// imagesRun is a run of generations where every third request sends 1 to 3 images of 256
// tokens each (their prompt 100 text tokens plus those) and waits 60 ms more for its first
// token, an encoder's cost; request 7's image tokens are unknown (a rule-less run).
func imagesRun() []row {
	rng := rand.New(rand.NewPCG(3, 3))
	var rows []row
	for i := range 300 {
		ttft := int64(80*math.Exp(0.3*rng.NormFloat64())) * ms_
		r := row{}
		if i%3 == 0 {
			n := int32(1 + (i/3)%3)
			r = okRow(int64(i), int64(i)*50*ms_, ttft+60*ms_, ttft+80*ms_, ttft+100*ms_)
			r.images, r.prompt, r.promptServer = p32(n), 100+256*n, p32(100+256*n)
			if i != 7*3 {
				r.imageTokens = p32(256 * n)
			}
		} else {
			r = okRow(int64(i), int64(i)*50*ms_, ttft, ttft+20*ms_, ttft+40*ms_)
			r.promptServer = p32(100)
		}
		rows = append(rows, r)
	}
	return rows
}

func imagesReport(t *testing.T) (*Report, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "images.parquet")
	writeResults(t, path, testRun(), imagesRun())
	d, err := Load(context.Background(), decode.LoadOptions{}, path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze(d, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	return r, path
}

// TestImageFigures: a run that sent images says how many requests did, how many images,
// their tokens' share of the prompt and TTFT with and without images, each recomputed here
// from the rows, in text, JSON, summary.parquet and HTML; a run without images shows none
// of it (the goldens of the other tests hold them byte for byte).
func TestImageFigures(t *testing.T) {
	r, _ := imagesReport(t)
	g := r.Images
	if g == nil {
		t.Fatal("no image figures for a run that sent images")
	}
	var reqs, imgs, imgTok, prompt int64
	var with, without []float64
	for i, x := range imagesRun() {
		ttft := float64(*x.first-*x.sent) / 1e6
		if x.images == nil {
			without, prompt = append(without, ttft), prompt+100
			continue
		}
		reqs, imgs, with = reqs+1, imgs+int64(*x.images), append(with, ttft)
		if i != 21 {
			imgTok, prompt = imgTok+int64(*x.imageTokens), prompt+int64(*x.promptServer)
		}
	}
	share := 100 * float64(imgTok) / float64(prompt)
	if g.Requests != reqs || g.Images != imgs || !sameFloat(g.PerRequest, float64(imgs)/float64(reqs)) || !sameFloat(g.TokenShare, share) {
		t.Errorf("images %+v; want %d requests, %d images, share %v%%", g, reqs, imgs, share)
	}
	if g.TTFTWith != stats.Summarize(with) || g.TTFTWithout != stats.Summarize(without) || !(g.TTFTWith.P50 > g.TTFTWithout.P50+40) {
		t.Errorf("TTFT with images %+v, without %+v", g.TTFTWith, g.TTFTWithout)
	}
	var text, js, page bytes.Buffer
	r.WriteText(&text)
	for _, s := range []string{"\nImages (ok requests)\n", "\n  requests with images", "\n  TTFT, with images ", "\n  TTFT, without images "} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text lacks %q:\n%s", s, text.String())
		}
	}
	r.WriteJSON(&js)
	var doc struct {
		Images struct {
			Requests int64   `json:"requests"`
			Share    float64 `json:"image_token_share_pct"`
			With     struct {
				P99 float64 `json:"p99"`
			} `json:"ttft_with_images_ms"`
		} `json:"images"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil || doc.Images.Requests != reqs || doc.Images.Share != g.TokenShare || doc.Images.With.P99 != g.TTFTWith.P99 {
		t.Errorf("JSON images %+v (%v)", doc.Images, err)
	}
	dir := t.TempDir()
	if err := WriteParquetDir(dir, r); err != nil {
		t.Fatal(err)
	}
	sum := readSummary(t, filepath.Join(dir, "summary.parquet"), 0)
	if sum["image_requests"] != reqs || sum["ttft_no_images_ms_p50"] != g.TTFTWithout.P50 {
		t.Errorf("summary image_requests %v, ttft_no_images_ms_p50 %v", sum["image_requests"], sum["ttft_no_images_ms_p50"])
	}
	r.WriteHTML(&page)
	for _, s := range []string{"<tr><th>requests with images</th>", "<td>TTFT, with images</td>"} {
		if !strings.Contains(page.String(), s) {
			t.Errorf("page lacks %q", s)
		}
	}

	plain, _ := mixedReport(t)
	text.Reset()
	js.Reset()
	plain.WriteText(&text)
	plain.WriteJSON(&js)
	if plain.Images != nil || strings.Contains(text.String()+js.String(), "images") {
		t.Errorf("a run without images mentions them")
	}
}

// TestImageFiguresDuckDB: DuckDB recomputes the image figures from the results file.
func TestImageFiguresDuckDB(t *testing.T) {
	r, path := imagesReport(t)
	g := r.Images
	q := duckdbtest.Query(t, `SELECT count(*) FILTER (images > 0) AS reqs, sum(images) / count(*) FILTER (images > 0) AS per,
		100 * sum(image_tokens) / sum(coalesce(prompt_tokens_server, prompt_tokens)) FILTER (images IS NULL OR image_tokens IS NOT NULL) AS share,
		quantile_cont((first_token_ns - sent_ns) / 1e6, 0.5) FILTER (images > 0) AS w50,
		quantile_cont((first_token_ns - sent_ns) / 1e6, 0.99) FILTER (images > 0) AS w99,
		quantile_cont((first_token_ns - sent_ns) / 1e6, 0.5) FILTER (images IS NULL) AS o50,
		quantile_cont((first_token_ns - sent_ns) / 1e6, 0.99) FILTER (images IS NULL) AS o99
		FROM '`+path+`' WHERE status = 'ok'`)
	for k, want := range map[string]float64{"reqs": float64(g.Requests), "per": g.PerRequest, "share": g.TokenShare,
		"w50": g.TTFTWith.P50, "w99": g.TTFTWith.P99, "o50": g.TTFTWithout.P50, "o99": g.TTFTWithout.P99} {
		got, err := strconv.ParseFloat(toString(q[0][k]), 64)
		if err != nil || !sameFloat(got, want) {
			t.Errorf("%s: DuckDB %v, analyze %.12g", k, q[0][k], want)
		}
	}
}
