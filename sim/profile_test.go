package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestBuiltinProfileFiles: every embedded profile reads strictly, is named by its file,
// validates, and is canonical: WriteProfileFile writes it back byte for byte, so the
// files show exactly what a written profile looks like.
func TestBuiltinProfileFiles(t *testing.T) {
	names := Profiles()
	if want := []string{"embed-0.6b-1gpu", "fixed", "moe-230b-8gpu", "tiny"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("Profiles() = %v, want %v", names, want)
	}
	dir := t.TempDir()
	for _, n := range names {
		data, err := builtinProfiles.ReadFile("profiles/" + n + ".json")
		if err != nil {
			t.Fatal(err)
		}
		p, err := BuiltinProfile(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if p.Name != n || p.Format != ProfileFormat || p.Version != ProfileVersion || p.Description == "" || p.Fit != nil {
			t.Errorf("%s: name %q, format %q, version %d, description %q, fit %v", n, p.Name, p.Format, p.Version, p.Description, p.Fit)
		}
		if err := p.Config.Validate(); err != nil {
			t.Errorf("%s: %v", n, err)
		}
		out := filepath.Join(dir, n+".json")
		if err := WriteProfileFile(out, p); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s: WriteProfileFile does not write the embedded file back:\n%s\nwant\n%s", n, got, data)
		}
		c, err := Profile(n)
		if err != nil || !reflect.DeepEqual(c, p.Config) {
			t.Errorf("Profile(%s) = %+v, %v; want the file's config", n, c, err)
		}
	}
	for _, bad := range []string{"huge", "", "../profiles/tiny", "tiny.json"} {
		if _, err := Profile(bad); err == nil || !strings.Contains(err.Error(), "unknown profile") || !strings.Contains(err.Error(), "tiny") {
			t.Errorf("Profile(%q): %v, want unknown profile and the list", bad, err)
		}
	}
}

// TestProfileFileRoundTrip: every field, the fit included, survives a write and a read,
// and the file is indented JSON ending in a newline with "<" as is.
func TestProfileFileRoundTrip(t *testing.T) {
	cfg, err := Profile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.KVAdmission, cfg.ReasoningShare, cfg.ReasoningUsage = KVOnDemand, 0.25, true
	cfg.AttentionPerPairNs, cfg.DecodePerSeq = 0.375, 123*time.Microsecond
	cfg.Faults.Stall, cfg.Faults.StallFor, cfg.Faults.StreamError = 0.5, 2*time.Second, 0.125
	p := ProfileFile{
		Format: ProfileFormat, Version: ProfileVersion, Name: "fitted",
		Description: "decode <1% off & fine",
		Config:      cfg,
		Fit: &FitReport{
			Tool:   "llmreplay dev",
			Runs:   []FitRun{{File: "c1.parquet", SHA256: "ab"}, {File: "c8.parquet", SHA256: "cd", Holdout: true}},
			Params: []FitParam{{Name: "decode_per_seq_ns", Value: 123000, StdErr: 400, Determined: true}, {Name: "max_batch", Value: 16, Advice: "add a point at higher concurrency"}},
			Errors: []FitError{{Run: "c8.parquet", Figure: "output_tok_s", Measured: 100, Predicted: 103, RelErr: 0.03}},
		},
	}
	path := filepath.Join(t.TempDir(), "fitted.json")
	if err := WriteProfileFile(path, p); err != nil {
		t.Fatal(err)
	}
	got, err := ReadProfileFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Fatalf("read back %+v\nwant %+v", got, p)
	}
	data, _ := os.ReadFile(path)
	if !bytes.HasSuffix(data, []byte("}\n")) || !bytes.Contains(data, []byte("\n  \"config\": {\n    \"model\"")) || !bytes.Contains(data, []byte("<1% off & fine")) {
		t.Errorf("not indented JSON with a final newline and text as is:\n%s", data)
	}
	// Format and version are filled in when left zero; an invalid profile is not written.
	p.Format, p.Version = "", 0
	if err := WriteProfileFile(path, p); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadProfileFile(path); err != nil || got.Format != ProfileFormat || got.Version != ProfileVersion {
		t.Errorf("zero format and version: read back %q %d, %v", got.Format, got.Version, err)
	}
	p.Config.MaxBatch = 0
	if err := WriteProfileFile(path, p); err == nil || !strings.Contains(err.Error(), "max_batch") {
		t.Errorf("invalid config written: %v", err)
	}
	if got, err := ReadProfileFile(path); err != nil || got.Config.MaxBatch != 16 {
		t.Errorf("the refused write touched the file: %+v, %v", got.Config, err)
	}
}

// TestProfileFileRefusals: every way a file can be wrong is refused with the file's name
// and where in it.
func TestProfileFileRefusals(t *testing.T) {
	tiny, err := builtinProfiles.ReadFile("profiles/tiny.json")
	if err != nil {
		t.Fatal(err)
	}
	good := string(tiny)
	edit := func(old, new string) string {
		if !strings.Contains(good, old) {
			t.Fatalf("tiny.json lacks %q", old)
		}
		return strings.Replace(good, old, new, 1)
	}
	withFit := edit("\n  }\n}\n", "\n  },\n  \"fit\": {\"tool\": \"x\", \"runs\": [], \"params\": [{\"name\": \"max_batch\", \"value\": 1, \"std_err\": 0, \"determined\": true}, {\"name\": \"x\", \"value\": 1, \"std_err\": 0, \"determined\": true, \"stderr\": 2}], \"errors\": []}\n}\n")
	for _, c := range []struct {
		name, text, want string
	}{
		{"config unknown", edit(`"decode_per_seq_ns"`, `"decode_per_seq"`), `p.json: config: unknown field "decode_per_seq"`},
		{"faults unknown", edit(`"status_429"`, `"status_404"`), `p.json: config.faults: unknown field "status_404"`},
		{"top unknown", edit(`"name": "tiny"`, `"name": "tiny", "notes": "x"`), `p.json: unknown field "notes"`},
		{"fit unknown", withFit, `p.json: fit.params[1]: unknown field "stderr"`},
		{"format", edit(ProfileFormat, "llmreplay-results"), `p.json: format: "llmreplay-results" is not "llmreplay-sim-profile"`},
		{"no format", edit(`"format": "llmreplay-sim-profile",`, ""), `p.json: format: missing`},
		{"newer", edit(`"version": 2,`, `"version": 3, "new_thing": 1,`), "p.json: version: 3 is newer than this llmreplay reads (up to 2): upgrade llmreplay"},
		{"zero version", edit(`"version": 2,`, `"version": 0,`), "p.json: version: 0: versions start at 1"},
		{"no version", edit(`"version": 2,`, ""), "p.json: version: missing"},
		{"missing a version 2 key", edit(`"request_overhead_ns": 0,`, ""), `p.json: config: missing "request_overhead_ns"`},
		{"invalid config", edit(`"max_batch": 16`, `"max_batch": 0`), "p.json: config: max_batch: 0 < 1"},
		{"two problems", edit(`"max_batch": 16`, `"max_batch": 0, "seed": 1, "model": ""`), "p.json: config: model: empty\n{path}: config: max_batch: 0 < 1"},
		{"wrong type", edit(`"max_batch": 16`, `"max_batch": "16"`), "p.json: config.max_batch: a JSON string where an integer belongs"},
		{"syntax", edit(`"max_batch": 16,`, `"max_batch": 16,,`), "p.json: line 23: invalid character ','"},
		{"trailing", good + "{}\n", "p.json: line 52: more after the JSON value"},
		{"empty name", edit(`"name": "tiny"`, `"name": ""`), "p.json: name: empty"},
		{"request log", edit(`"seed": 1,`, `"seed": 1, "request_log": "r.jsonl",`), "p.json: config: request_log: a profile names no request log"},
		{"missing", edit(`"context_per_token_ns": 200,`, ""), `p.json: config: missing "context_per_token_ns": a profile file gives every parameter`},
		{"missing in faults", edit(`"stall_for_ns": 0,`, ""), `p.json: config.faults: missing "stall_for_ns"`},
		{"missing in fit", strings.Replace(strings.Replace(withFit, `, "stderr": 2`, "", 1), `"std_err": 0, `, "", 1), `p.json: fit.params[0]: missing "std_err"`},
		{"missing at the top", edit(`"name": "tiny",`, ""), `p.json: missing "name"`},
		{"empty file", "", "p.json: empty"},
		{"cut", good[:100], "p.json: cut short"},
	} {
		path := filepath.Join(t.TempDir(), "p.json")
		if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadProfileFile(path)
		if want := strings.ReplaceAll(c.want, "{path}", path); err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), path) {
			t.Errorf("%s: error %v, want it to start with the path and say %q", c.name, err, c.want)
		}
	}
	missing := filepath.Join(t.TempDir(), "nope.json")
	if _, err := ReadProfileFile(missing); err == nil || !strings.Contains(err.Error(), missing+" does not exist") {
		t.Errorf("missing file: %v", err)
	}
}

// TestLoadProfile: a built-in's name is the built-in (no sum); anything else is a file,
// whose bytes' SHA-256 comes back; a bare word that is neither says both.
func TestLoadProfile(t *testing.T) {
	p, sum, err := LoadProfile("tiny")
	if err != nil || p.Name != "tiny" || sum != "" {
		t.Fatalf("LoadProfile(tiny) = %q %q %v", p.Name, sum, err)
	}
	path := filepath.Join(t.TempDir(), "t.json")
	p.Name = "mine"
	if err := WriteProfileFile(path, p); err != nil {
		t.Fatal(err)
	}
	got, sum, err := LoadProfile(path)
	// sha256 of the file written from tiny renamed "mine": any change to the bytes or
	// to the hash shows here.
	data, _ := os.ReadFile(path)
	if err != nil || got.Name != "mine" || len(sum) != 64 || sum != sha256Hex(data) {
		t.Errorf("LoadProfile(file) = %q %q %v", got.Name, sum, err)
	}
	if _, _, err := LoadProfile("huge"); err == nil || !strings.Contains(err.Error(), `profile "huge" is no built-in (embed-0.6b-1gpu, fixed, moe-230b-8gpu, tiny) and no file`) {
		t.Errorf("LoadProfile(huge): %v", err)
	}
	if _, _, err := LoadProfile("huge.json"); err == nil || !strings.Contains(err.Error(), "huge.json does not exist") {
		t.Errorf("LoadProfile(huge.json): %v", err)
	}
}

func sha256Hex(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// TestProfileVersion1: a version 1 file, written before request_overhead_ns existed,
// reads as the same engine with no overhead; any other key it lacks is still refused,
// and a version 2 file must give the new key (TestProfileFileRefusals).
func TestProfileVersion1(t *testing.T) {
	tiny, err := builtinProfiles.ReadFile("profiles/tiny.json")
	if err != nil {
		t.Fatal(err)
	}
	v1 := strings.Replace(strings.Replace(string(tiny), `"version": 2,`, `"version": 1,`, 1), "\n    \"request_overhead_ns\": 0,", "", 1)
	if v1 == string(tiny) || strings.Contains(v1, "request_overhead") {
		t.Fatal("tiny.json is not in the form this test edits")
	}
	p, err := DecodeProfile("v1.json", []byte(v1))
	want, _ := Profile("tiny")
	if err != nil || p.Config != want || p.Config.RequestOverhead != 0 {
		t.Errorf("version 1 file: %v, config %+v", err, p.Config)
	}
	noBase := strings.Replace(v1, "\n    \"step_base_ns\": 1000000,", "", 1)
	if _, err := DecodeProfile("v1.json", []byte(noBase)); err == nil || !strings.Contains(err.Error(), `v1.json: config: missing "step_base_ns"`) {
		t.Errorf("version 1 file without step_base_ns: %v", err)
	}
}
