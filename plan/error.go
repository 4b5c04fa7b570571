package plan

import (
	"math"

	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/twin"
)

// FigureError is the twin's error on one figure, as its fit measured it: the largest
// |rel_err| of that figure over the held-out runs, or over every run when none was held out
// (HeldOut false: the runs it was fitted on, which flatter it).
type FigureError struct {
	Figure  string  `json:"figure"` // one of twin.Figures
	MaxAbs  float64 `json:"max_abs_rel_err"`
	Runs    int     `json:"runs"`     // how many runs had the figure
	HeldOut bool    `json:"held_out"` // over held-out runs only
}

// TwinError states the error beside each of twin.Figures from a profile's fit; nil when the
// profile has no fit (a built-in or a hand-written file: its figures are the model's and
// its error is unknown). A figure no run had is left out.
func TwinError(f *sim.FitReport) []FigureError {
	if f == nil {
		return nil
	}
	held := map[string]bool{}
	for _, r := range f.Runs {
		held[r.File] = r.Holdout
	}
	anyHeld := false
	for _, e := range f.Errors {
		anyHeld = anyHeld || held[e.Run]
	}
	var out []FigureError
	for _, name := range twin.Figures {
		fe := FigureError{Figure: name, HeldOut: anyHeld}
		for _, e := range f.Errors {
			if e.Figure != name || (anyHeld && !held[e.Run]) || math.IsNaN(e.RelErr) {
				continue
			}
			fe.Runs++
			fe.MaxAbs = math.Max(fe.MaxAbs, math.Abs(e.RelErr))
		}
		if fe.Runs > 0 {
			out = append(out, fe)
		}
	}
	return out
}
