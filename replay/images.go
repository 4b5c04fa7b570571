package replay

import (
	"context"
	"fmt"
	"strconv"

	"github.com/llmreplay/llmreplay/replay/images"
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
	scan, err := p.open()
	if err != nil {
		return err
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
			return configErrorf("trace %s: %v", scan.Name(), err)
		}
	}
	if err := src.Err(); err != nil {
		return err
	}
	p.imgs = b
	p.imageFlags = map[string]string{"image-rule": o.Rule.Name(), "image-format": string(o.Format),
		"image-size":  fmt.Sprintf("%dx%d (images the trace gives no size for)", o.Width, o.Height),
		"image-reuse": strconv.FormatFloat(o.Reuse, 'g', -1, 64)}
	return nil
}
