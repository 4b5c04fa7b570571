package replay

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/llmreplay/llmreplay/replay/images"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// images decides how the run sends its trace's images: none when the trace has none or
// --drop-images; else the API must take images and the run be of independent requests
// (a conversation's history would have to carry its images), and a pass over the rows
// this run replays checks that every row's images leave text in its prompt, before
// anything is sent.
func (p *preparer) images(context.Context) error {
	if !p.src.HasValues(trace.ColImages) {
		return nil
	}
	cfg := p.cfg
	if cfg.DropImages {
		p.imageFlags = map[string]string{"images": "dropped (--drop-images): each row's prompt_tokens sent as text"}
		return nil
	}
	if k, ok := wire.Lookup(p.api); !ok || k.AppendUserMessage == nil {
		return configErrorf("trace %s has images and the %s API takes none: use --api chat, messages or responses, or --drop-images to send every prompt token as text", p.meta.TraceFile, p.api)
	}
	if p.sessMode != SessionsIndependent {
		return configErrorf("trace %s has images: a conversation's or an agent's turns with images are not replayed yet (their history would have to carry the images); use --sessions independent, or --drop-images", p.meta.TraceFile)
	}
	o, err := cfg.imageOptions()
	if err != nil {
		return err
	}
	b := images.New(o)
	p.imageSizes = map[[2]int]int64{}
	rows, err := p.checkImageRows(b, func(im trace.Image) { p.imageSizes[b.Size(im)]++ })
	if err != nil {
		return err
	}
	p.imgs = b
	if p.lookAhead, err = imageLookAhead(b, p.imageSizes, rows); err != nil {
		return err
	}
	p.imageFlags = map[string]string{"image-rule": o.Rule.Name(), "image-format": string(o.Format),
		"image-size":  fmt.Sprintf("%dx%d (images the trace gives no size for)", o.Width, o.Height),
		"image-reuse": strconv.FormatFloat(o.Reuse, 'g', -1, 64)}
	return nil
}

// checkImageRows passes over the rows this run will replay (its shard, duration and
// limit, through the run's planner) and returns how many there are, or the error of the
// first whose images b leaves no text; each image is given to seen.
func (p *preparer) checkImageRows(b *images.Builder, seen func(trace.Image)) (rows int64, err error) {
	cfg := p.cfg
	scan, err := p.open()
	if err != nil {
		return 0, err
	}
	defer scan.Close()
	var src trace.Source = scan
	if p.shard.Count > 1 {
		src = trace.NewShardSource(scan, p.shard)
	}
	pl := planner{speedup: p.speedup, duration: cfg.Duration, limit: cfg.Limit, warmup: cfg.Warmup,
		origin: p.originAt, hasOrigin: p.shard.Count > 1}
	for src.Next() {
		r := src.Request()
		if _, _, ok := pl.plan(r.Arrival); !ok {
			break
		}
		if err := b.Check(&r); err != nil {
			return rows, configErrorf("trace %s: %v", scan.Name(), err)
		}
		for _, im := range r.Images {
			seen(im)
		}
		rows++
	}
	return rows, src.Err()
}

// imageLookAheadBytes bounds the images the look-ahead holds: 64 MiB, so that a trace
// of many large images (a 1024x1024 PNG is 2.4 MB in base64) does not hold gigabytes in
// prepared bodies, while images of usual sizes keep the whole default look-ahead.
const imageLookAheadBytes = 64 << 20

// minImageLookAhead is the least look-ahead an image run keeps: the preparer must stay
// ahead of the schedule by more than one request's encoding.
const minImageLookAhead = 16

// imageLookAhead returns the look-ahead (requests prepared ahead) that holds about
// imageLookAheadBytes of images: the mean bytes of a request's images, from one image of
// each of the 4 most frequent sizes encoded, over the rows the run replays; 0 (the
// default) when it fits.
func imageLookAhead(b *images.Builder, sizes map[[2]int]int64, rows int64) (int, error) {
	if rows == 0 {
		return 0, nil
	}
	keys := slices.SortedFunc(maps.Keys(sizes), func(x, y [2]int) int { return cmp.Compare(sizes[y], sizes[x]) })
	var bytes, n float64
	for _, k := range keys[:min(len(keys), 4)] {
		img, err := b.Probe(k[0], k[1])
		if err != nil {
			return 0, err
		}
		bytes += float64(len(img.Base64)) * float64(sizes[k])
		n += float64(sizes[k])
	}
	var total int64
	for _, c := range sizes {
		total += c
	}
	perRow := bytes / n * float64(total) / float64(rows) // mean image bytes of a row
	la := int(imageLookAheadBytes / max(perRow, 1))
	if la >= DefaultLookAhead {
		return 0, nil
	}
	return max(la, minImageLookAhead), nil
}

// maxProbedSizes bounds the image sizes --calibrate probes: the most frequent 8, one
// usage probe each, so a trace of many sizes does not send hundreds of probes; the
// others keep the rule's count.
const maxProbedSizes = 8

// calibrateImages, with --calibrate, asks the server what it counts an image of each of
// the run's most frequent sizes for (a usage probe with the image, less one without),
// says where that differs from the rule, and sends the run's images by the server's
// counts. A row the measured counts leave no text stops the run, before anything is sent.
func (p *preparer) calibrateImages(ctx context.Context) error {
	if !p.cfg.Calibrate || p.imgs == nil || len(p.imageSizes) == 0 {
		return nil
	}
	sizes := slices.SortedFunc(maps.Keys(p.imageSizes), func(a, b [2]int) int {
		return cmp.Or(cmp.Compare(p.imageSizes[b], p.imageSizes[a]), cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	sizes = sizes[:min(len(sizes), maxProbedSizes)]
	measured, err := CalibrateImages(ctx, p.probed(), p.builder, p.imgs, sizes)
	if err != nil {
		return err
	}
	var said []string
	for _, sz := range sizes {
		rule := p.imgs.SizeTokens(sz[0], sz[1])
		said = append(said, fmt.Sprintf("%dx%d %d (rule %d)", sz[0], sz[1], measured[sz], rule))
		if measured[sz] != rule {
			fmt.Fprintf(p.env.Log, "llmreplay: calibrated images: the server counts an image of %dx%d as %d prompt tokens, --image-rule %s says %d: the run sends by the server's count\n",
				sz[0], sz[1], measured[sz], p.cfg.imageRuleName(), rule)
		}
	}
	p.imgs.Measure(measured)
	p.imageFlags["image-tokens"] = "measured by --calibrate, per size: " + strings.Join(said, ", ")
	_, err = p.checkImageRows(p.imgs, func(trace.Image) {})
	return err
}

// CalibrateImages returns what the server at e counts one image of each size for: the
// prompt tokens of a usage probe of a short text with the image (b.Probe), less those of
// the text alone.
func CalibrateImages(ctx context.Context, e Endpoint, tb *tokenize.Builder, b *images.Builder, sizes [][2]int) (map[[2]int]int, error) {
	fail := func(format string, a ...any) (map[[2]int]int, error) {
		return nil, fmt.Errorf("%s: image tokens: %s", wire.SafeEndpoint(e.Base), fmt.Sprintf(format, a...))
	}
	pr := newProber(e)
	text, err := tb.AppendPrompt(nil, tokenize.PromptSpec{RequestID: toolRequestID + 2, Tokens: toolProbePrompt})
	if err != nil {
		return nil, err
	}
	without, _, err := pr.Count(ctx, wire.MethodUsage, string(text))
	if err != nil {
		return fail("the probe without an image: %v", err)
	}
	out := make(map[[2]int]int, len(sizes))
	for _, sz := range sizes {
		img, err := b.Probe(sz[0], sz[1])
		if err != nil {
			return nil, err
		}
		pr.Images = []wire.Image{img}
		with, _, err := pr.Count(ctx, wire.MethodUsage, string(text))
		if err != nil {
			return fail("the probe with an image of %dx%d: %v", sz[0], sz[1], err)
		}
		if with <= without {
			return fail("prompt tokens %d without an image, %d with one of %dx%d: the server does not count the images it is sent (is the model one that takes images?)", without, with, sz[0], sz[1])
		}
		out[sz] = with - without
	}
	return out, nil
}
