package sim

// The profile file's types, as the shared contract fixes them. The profiles work owns this
// file; this copy is the minimum the fitter compiles against until that work is merged.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/llmreplay/llmreplay/internal/atomicfile"
)

// ProfileFormat and ProfileVersion identify a profile file.
const ProfileFormat = "llmreplay-sim-profile"
const ProfileVersion = 1

// ProfileFile is a profile file: a named sim.Config and, for a fitted one, its fit.
type ProfileFile struct {
	Format      string     `json:"format"`  // ProfileFormat
	Version     int        `json:"version"` // ProfileVersion
	Name        string     `json:"name"`
	Description string     `json:"description,omitempty"`
	Config      Config     `json:"config"`
	Fit         *FitReport `json:"fit,omitempty"` // nil: written by hand (the built-ins)
}

// FitReport is how a fitted profile was fitted: the runs, the parameters and the twin's
// error on each run.
type FitReport struct {
	Tool   string     `json:"tool"`   // "llmreplay VERSION"
	Runs   []FitRun   `json:"runs"`   // every results file read, fit or held out
	Params []FitParam `json:"params"` //
	Errors []FitError `json:"errors"` // the twin's error on each run, per figure
}

// FitRun is one results file a fit read.
type FitRun struct {
	File    string `json:"file"` // base name
	SHA256  string `json:"sha256"`
	Holdout bool   `json:"holdout"` // predicted, not fit on
}

// FitParam is one fitted parameter.
type FitParam struct {
	Name       string  `json:"name"`    // the Config field's json name, e.g. "decode_per_seq_ns"
	Value      float64 `json:"value"`   // as written in Config (ns for durations)
	StdErr     float64 `json:"std_err"` // one standard error; 0 when not determined
	Determined bool    `json:"determined"`
	Advice     string  `json:"advice,omitempty"` // when not determined: which run would determine it
}

// FitError is the twin's error on one figure of one run.
type FitError struct {
	Run       string  `json:"run"`    // FitRun.File
	Figure    string  `json:"figure"` // "output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms"
	Measured  float64 `json:"measured"`
	Predicted float64 `json:"predicted"`
	RelErr    float64 `json:"rel_err"` // (predicted - measured) / measured
}

// ReadProfileFile reads a profile file strictly: an unknown field, another format or
// version, or an invalid Config is an error naming the file.
func ReadProfileFile(path string) (ProfileFile, error) {
	var p ProfileFile
	b, err := os.ReadFile(path)
	if err != nil {
		return p, fmt.Errorf("sim: profile file: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&p); err != nil {
		return p, fmt.Errorf("sim: profile file %s: %w", path, err)
	}
	if p.Format != ProfileFormat || p.Version != ProfileVersion {
		return p, fmt.Errorf("sim: profile file %s: format %q version %d, want %q version %d", path, p.Format, p.Version, ProfileFormat, ProfileVersion)
	}
	if err := p.Config.Validate(); err != nil {
		return p, fmt.Errorf("sim: profile file %s: %w", path, err)
	}
	return p, nil
}

// WriteProfileFile writes p to path atomically as indented JSON ending in a newline.
func WriteProfileFile(path string, p ProfileFile) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("sim: profile file %s: %w", path, err)
	}
	return atomicfile.Write(path, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}
