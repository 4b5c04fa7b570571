package trace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
)

// SliceSpec selects a window of a trace and rescales its time. Requests are selected by
// their original arrival: Start <= arrival < Start+Duration (Duration 0: to the end),
// at most Limit of them (0: all). The kept requests are rebased so the first arrives
// at 0; then every gap longer than MaxIdle is cut to MaxIdle (0: no cap); then times are
// divided by Speedup, or, with Rate, by the speedup that makes the window's MeanRate
// ((count−1) / span, as Info reports) equal Rate. request_id and everything else is kept.
type SliceSpec struct {
	Start    time.Duration `json:"start_ns,omitempty"`
	Duration time.Duration `json:"duration_ns,omitempty"`
	Limit    int64         `json:"limit,omitempty"`
	MaxIdle  time.Duration `json:"max_idle_ns,omitempty"`
	Speedup  float64       `json:"speedup,omitempty"`
	Rate     float64       `json:"rate,omitempty"`
}

// Validate checks the spec.
func (s SliceSpec) Validate() error {
	switch {
	case s.Start < 0 || s.Duration < 0 || s.Limit < 0 || s.MaxIdle < 0:
		return errors.New("slice: start, duration, limit and max-idle must be >= 0")
	case s.Speedup != 0 && s.Rate != 0:
		return errors.New("slice: give --speedup or --rate, not both")
	case s.Speedup < 0 || math.IsInf(s.Speedup, 0) || math.IsNaN(s.Speedup):
		return errors.New("slice: speedup must be > 0")
	case s.Rate < 0 || math.IsInf(s.Rate, 0) || math.IsNaN(s.Rate):
		return errors.New("slice: rate must be > 0")
	}
	return nil
}

// slicer applies a SliceSpec to a stream, request by request.
type slicer struct {
	spec        SliceSpec
	speedup     float64
	n           int64
	first, prev int64 // original arrivals
	out         int64 // rebased and idle-capped arrival, before the speedup
}

// take returns the transformed request and whether it is kept; done reports that no
// later request can be kept.
func (s *slicer) take(r Request) (Request, bool, bool) {
	a := int64(r.Arrival)
	if a < int64(s.spec.Start) {
		return r, false, false
	}
	if (s.spec.Duration > 0 && a >= int64(s.spec.Start+s.spec.Duration)) || (s.spec.Limit > 0 && s.n >= s.spec.Limit) {
		return r, false, true
	}
	if s.n == 0 {
		s.first, s.prev = a, a
	}
	gap := a - s.prev
	if s.spec.MaxIdle > 0 && gap > int64(s.spec.MaxIdle) {
		gap = int64(s.spec.MaxIdle)
	}
	s.out += gap
	s.prev = a
	s.n++
	r.Arrival = time.Duration(s.out)
	if s.speedup != 1 {
		r.Arrival = time.Duration(math.Round(float64(s.out) / s.speedup))
	}
	return r, true, false
}

// SliceFile writes the slice of trace in described by spec to out. With Rate it reads
// the input twice (once to measure the window), so memory stays constant.
func SliceFile(ctx context.Context, in, out string, spec SliceSpec) (int64, error) {
	if err := spec.Validate(); err != nil {
		return 0, err
	}
	speedup := spec.Speedup
	if speedup == 0 {
		speedup = 1
	}
	if spec.Rate > 0 {
		r, err := Open(in)
		if err != nil {
			return 0, err
		}
		s := &slicer{spec: spec, speedup: 1}
		var last time.Duration
		for r.Next() {
			q, keep, done := s.take(r.Request())
			if done {
				break
			}
			if keep {
				last = q.Arrival
			}
		}
		err = r.Err()
		r.Close()
		if err != nil {
			return 0, err
		}
		if s.n < 2 || last <= 0 {
			return 0, fmt.Errorf("slice %s: the window holds %d requests over %s: no rate to rescale", in, s.n, last)
		}
		if speedup, err = SpeedupForRate(s.n, last, spec.Rate); err != nil {
			return 0, fmt.Errorf("slice %s: %w", in, err)
		}
	}
	r, err := Open(in)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	meta := r.Meta()
	var steps []json.RawMessage
	if meta.Transforms != "" {
		if err := json.Unmarshal([]byte(meta.Transforms), &steps); err != nil {
			return 0, fmt.Errorf("slice %s: %s: %v", in, MetaTransforms, err)
		}
	}
	step, _ := json.Marshal(struct {
		Op string `json:"op"`
		SliceSpec
		Applied float64 `json:"applied_speedup"`
	}{"slice", spec, speedup})
	steps = append(steps, step)
	tj, _ := json.Marshal(steps)
	meta.Transforms = string(tj)
	w, err := Create(out, meta)
	if err != nil {
		return 0, err
	}
	s := &slicer{spec: spec, speedup: speedup}
	for r.Next() {
		q, keep, done := s.take(r.Request())
		if done {
			break
		}
		if !keep {
			continue
		}
		if s.n == 1 && meta.StartUnixNS != 0 {
			// The new trace starts at its first kept request, in the source's wall clock.
			meta.StartUnixNS += s.first
			if err := w.SetMeta(meta); err != nil {
				w.Abort()
				return 0, err
			}
		}
		if err := w.Write(q); err != nil {
			w.Abort()
			return 0, err
		}
		if s.n%65536 == 0 {
			if err := ctx.Err(); err != nil {
				w.Abort()
				return 0, err
			}
		}
	}
	if err := r.Err(); err != nil {
		w.Abort()
		return 0, err
	}
	return s.n, w.Close()
}
