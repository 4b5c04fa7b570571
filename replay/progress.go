package replay

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// ProgressOptions configure RenderProgress.
type ProgressOptions struct {
	Terminal bool          // draw a progress bar (stderr is a terminal); else plain lines
	Interval time.Duration // between plain lines; the bar redraws more often
	Total    int64         // requests the run will plan (0 = unknown)
	Span     time.Duration // the run's schedule length (last due time); 0 = unknown
	// Inputs is the inputs of every request of an embeddings or rerank run (--inputs), whose
	// rate is shown as inputs/s of requests done in place of output tok/s; 0 = generation.
	Inputs int
}

// RenderProgress shows p on w until ctx ends: a progress bar on a terminal, plain
// periodic lines otherwise. Each update shows elapsed vs schedule time, sent, in flight,
// done, errors, dropped, output tok/s (inputs/s of an embeddings or rerank run) over the
// last interval, and a warning as soon as
// the dispatcher has sent a request later than the lateness bound.
func RenderProgress(ctx context.Context, w io.Writer, p *Progress, o ProgressOptions) {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	tick := o.Interval
	var bar *progressbar.ProgressBar
	if o.Terminal {
		tick = 250 * time.Millisecond
		max := o.Total
		if max <= 0 {
			max = -1
		}
		bar = progressbar.NewOptions64(max,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetWidth(24),
			progressbar.OptionShowCount(),
			progressbar.OptionThrottle(200*time.Millisecond),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionUseANSICodes(true),
		)
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	var lastTok int64
	lastAt := time.Now()
	rate := 0.0
	lastLine := time.Time{}
	var lastLate int64
	for {
		select {
		case <-ctx.Done():
			if bar != nil {
				bar.Finish()
			}
			return
		case now := <-t.C:
			tok := p.OutputTokens.Load()
			if o.Inputs > 0 {
				tok = p.Done.Load() * int64(o.Inputs)
			}
			if dt := now.Sub(lastAt).Seconds(); dt >= 1 {
				rate = float64(tok-lastTok) / dt
				lastTok, lastAt = tok, now
			}
			start := p.StartUnixNS.Load()
			if start == 0 {
				continue
			}
			elapsed := time.Duration(time.Now().UnixNano() - start).Truncate(100 * time.Millisecond)
			sched := ""
			if o.Span > 0 {
				sched = " of " + o.Span.Truncate(100*time.Millisecond).String() + " schedule"
			}
			late := p.Late.Load()
			warn := ""
			if late > 0 {
				warn = fmt.Sprintf("  BEHIND SCHEDULE: %d sends late (last %.1f ms)", late, float64(p.LastLateNS.Load())/1e6)
			}
			unit := "tok/s"
			if o.Inputs > 0 {
				unit = "inputs/s"
			}
			msg := fmt.Sprintf("%s%s sent %d  in flight %d  done %d  errors %d  dropped %d  %.0f %s%s",
				elapsed, sched, p.Sent.Load(), p.InFlight.Load(), p.Done.Load(), p.Errors.Load(), p.Dropped.Load(), rate, unit, warn)
			if p.Stopping.Load() {
				msg += "  (stopping)"
			}
			if bar != nil {
				bar.Describe(msg)
				bar.Set64(p.Sent.Load() + p.Dropped.Load())
				continue
			}
			if now.Sub(lastLine) >= o.Interval || (late > lastLate && lastLate == 0) {
				fmt.Fprintln(w, "llmreplay:", msg)
				lastLine = now
			}
			lastLate = late
		}
	}
}
