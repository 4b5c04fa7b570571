package sim

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"reflect"
	"strings"

	"github.com/llmreplay/llmreplay/internal/atomicfile"
	"github.com/llmreplay/llmreplay/internal/strictjson"
)

// ProfileFormat and ProfileVersion identify a profile file.
const ProfileFormat = "llmreplay-sim-profile"

// ProfileVersion is the newest profile file version this build reads and the one it
// writes. A version adds fields; a reader refuses a newer file rather than drop what it
// does not know, since an engine missing a parameter would serve other numbers.
// Version 2 added config.request_overhead_ns; a version 1 file, which predates it, reads
// as an engine with none.
const ProfileVersion = 2

// addedIn is the version that added each config key after version 1: a file of an older
// version may lack it, and its zero is then that version's engine.
var addedIn = map[string]int{"request_overhead_ns": 2}

// ProfileFile is a profile file: a named sim.Config and, for a fitted one, its fit.
type ProfileFile struct {
	Format      string     `json:"format"`  // ProfileFormat
	Version     int        `json:"version"` // ProfileVersion
	Name        string     `json:"name"`
	Description string     `json:"description,omitempty"`
	Config      Config     `json:"config"`
	Fit         *FitReport `json:"fit,omitempty"` // nil: written by hand (the built-ins)
}

// FitReport is how a fitted profile's Config was obtained: the runs it was fit on (and
// those held out), each parameter with its uncertainty, and the twin's error per run.
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

// FitParam is one fitted parameter of Config.
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

// ReadProfileFile reads and checks the profile file at path: strict JSON (an unknown
// field is an error naming where it is), the format and a version this build reads, a
// valid Config. Every error names the file.
func ReadProfileFile(path string) (ProfileFile, error) {
	p, _, err := readProfileFile(path)
	return p, err
}

// readProfileFile is ReadProfileFile that also returns the hex SHA-256 of the bytes it
// decoded, so that a run can record exactly which file served it.
func readProfileFile(path string) (ProfileFile, string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ProfileFile{}, "", fmt.Errorf("sim: profile file %s does not exist: give the path of a file `llmreplay sim --save-profile` or `llmreplay sim fit` wrote (docs/sim.md, Profile files)", path)
	}
	if err != nil {
		return ProfileFile{}, "", fmt.Errorf("sim: profile file: %w", err)
	}
	p, err := DecodeProfile(path, data)
	sum := sha256.Sum256(data)
	return p, hex.EncodeToString(sum[:]), err
}

// DecodeProfile decodes and checks a profile file's bytes as ReadProfileFile does; name
// is the file's name for the errors.
func DecodeProfile(name string, data []byte) (ProfileFile, error) {
	// Format and version first, leniently: a newer version may well have fields this
	// build does not know, and "upgrade" is the useful answer then, not "unknown field".
	var head struct {
		Format  *string `json:"format"`
		Version *int    `json:"version"`
	}
	if err := strictjson.Decode(name, data, &head, false); err != nil {
		return ProfileFile{}, err
	}
	switch {
	case head.Format == nil:
		return ProfileFile{}, fmt.Errorf("%s: format: missing: a profile file says \"format\": %q (is this a profile file?)", name, ProfileFormat)
	case *head.Format != ProfileFormat:
		return ProfileFile{}, fmt.Errorf("%s: format: %q is not %q: not a profile file (docs/sim.md, Profile files)", name, *head.Format, ProfileFormat)
	case head.Version == nil:
		return ProfileFile{}, fmt.Errorf("%s: version: missing: want \"version\": %d", name, ProfileVersion)
	case *head.Version > ProfileVersion:
		return ProfileFile{}, fmt.Errorf("%s: version: %d is newer than this llmreplay reads (up to %d): upgrade llmreplay to serve it", name, *head.Version, ProfileVersion)
	case *head.Version < 1:
		return ProfileFile{}, fmt.Errorf("%s: version: %d: versions start at 1 (this llmreplay writes %d)", name, *head.Version, ProfileVersion)
	}

	var p ProfileFile
	if err := strictjson.Decode(name, data, &p, true); err != nil {
		return ProfileFile{}, err
	}
	if where, key, ok := strictjson.Missing(olderKeys(data, *head.Version), reflect.TypeFor[ProfileFile]()); ok {
		if where != "" {
			name += ": " + where
		}
		return ProfileFile{}, fmt.Errorf("%s: missing %q: a profile file gives every parameter, 0 where it is zero, so that none is zero by omission (llmreplay sim --save-profile writes a complete one)", name, key)
	}
	if p.Name == "" {
		return ProfileFile{}, fmt.Errorf("%s: name: empty: give the profile a name (it is shown in the banner and the run metadata)", name)
	}
	var errs []error
	for _, pr := range p.Config.problems() {
		errs = append(errs, fmt.Errorf("%s: config: %s: %s", name, pr.field, pr.what))
	}
	// The request log is where one server writes, not a property of an engine: a profile
	// that named one would make every replay served from it append to the same file.
	if p.Config.RequestLog != "" || p.Config.RequestLogWrites {
		errs = append(errs, fmt.Errorf("%s: config: request_log: a profile names no request log: remove request_log and request_log_writes (llmreplay sim --request-log FILE sets one)", name))
	}
	if len(errs) > 0 {
		return ProfileFile{}, errors.Join(errs...)
	}
	return p, nil
}

// olderKeys is data with the config keys added after version (addedIn) that it lacks set
// to zero, for the check that no other key is missing.
func olderKeys(data []byte, version int) []byte {
	var file map[string]json.RawMessage
	var cfg map[string]json.RawMessage
	if json.Unmarshal(data, &file) != nil || json.Unmarshal(file["config"], &cfg) != nil || cfg == nil {
		return data // not objects: the decode has said so
	}
	for key, v := range addedIn {
		if _, ok := cfg[key]; !ok && version < v {
			cfg[key] = json.RawMessage("0")
		}
	}
	file["config"], _ = json.Marshal(cfg)
	out, _ := json.Marshal(file)
	return out
}

// WriteProfileFile writes p to path atomically (internal/atomicfile): indented JSON
// ending in a newline, the form of the built-in profiles. A zero Format or Version is
// filled in; p is checked as ReadProfileFile checks it, so every file written reads back.
func WriteProfileFile(path string, p ProfileFile) error {
	data, err := EncodeProfile(p)
	if err != nil {
		return fmt.Errorf("sim: write profile %s: %w", path, err)
	}
	if _, err := DecodeProfile(path, data); err != nil {
		return fmt.Errorf("sim: write profile: %w", err)
	}
	f, err := atomicfile.Create(path)
	if err != nil {
		return fmt.Errorf("sim: write profile: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return fmt.Errorf("sim: write profile %s: %w", path, err)
	}
	if err := f.Commit(); err != nil {
		return fmt.Errorf("sim: write profile %s: %w", path, err)
	}
	return nil
}

// EncodeProfile is the bytes WriteProfileFile writes: two-space indented JSON, text as
// is (no \u003c for "<": descriptions are read by people), a final newline.
func EncodeProfile(p ProfileFile) ([]byte, error) {
	if p.Format == "" {
		p.Format = ProfileFormat
	}
	if p.Version == 0 {
		p.Version = ProfileVersion
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(p); err != nil { // Encode ends the value with a newline
		return nil, err
	}
	return b.Bytes(), nil
}

// builtinProfiles are the built-in profiles, one canonical profile file each
// (profiles/NAME.json, as WriteProfileFile writes it), so that they document the format
// and `llmreplay sim --profile NAME --save-profile FILE` starts a custom one from them.
//
//go:embed profiles/*.json
var builtinProfiles embed.FS

// Profiles lists the names Profile accepts.
func Profiles() []string {
	ents, _ := builtinProfiles.ReadDir("profiles") // sorted by name
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	return names
}

// BuiltinProfile returns the built-in profile file of that name (Profiles lists them).
func BuiltinProfile(name string) (ProfileFile, error) {
	file := path.Join("profiles", name+".json")
	data, err := builtinProfiles.ReadFile(file)
	if name == "" || strings.ContainsAny(name, `/\`) || err != nil {
		return ProfileFile{}, fmt.Errorf("sim: unknown profile %q (want one of %s)", name, strings.Join(Profiles(), ", "))
	}
	return DecodeProfile(file, data)
}

// Profile returns the named built-in parameter set: "tiny", "moe-230b-8gpu",
// "embed-0.6b-1gpu" or "fixed" (docs/sim.md, Profiles, gives each one's reasoning).
func Profile(name string) (Config, error) {
	p, err := BuiltinProfile(name)
	return p.Config, err
}

// LoadProfile returns the profile a command line names: the built-in of that name, else
// the profile file at that path (a path that is a built-in's name is read as the file
// with ./ before it). sum is the hex SHA-256 of the file's bytes, "" for a built-in.
func LoadProfile(nameOrPath string) (p ProfileFile, sum string, err error) {
	for _, n := range Profiles() {
		if n == nameOrPath {
			p, err = BuiltinProfile(n)
			return p, "", err
		}
	}
	if _, serr := os.Stat(nameOrPath); errors.Is(serr, fs.ErrNotExist) && !strings.ContainsAny(nameOrPath, `/\.`) {
		return ProfileFile{}, "", fmt.Errorf("sim: profile %q is no built-in (%s) and no file", nameOrPath, strings.Join(Profiles(), ", "))
	}
	return readProfileFile(nameOrPath)
}
