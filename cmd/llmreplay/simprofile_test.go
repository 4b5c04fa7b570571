package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/llmreplay/llmreplay/sim"
)

// TestSimSaveProfile: --save-profile writes the configuration the command line makes (the
// profile with every model flag) as a profile file and serves nothing; a built-in saved
// without flags is its embedded file, byte for byte; a fit survives a copy and is dropped
// once a flag changes what it describes.
func TestSimSaveProfile(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	tinyPath := filepath.Join(dir, "tiny.json")
	if err := run(context.Background(), []string{"sim", "--profile", "tiny", "--save-profile", tinyPath}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	tiny, _ := sim.BuiltinProfile("tiny")
	want, _ := sim.EncodeProfile(tiny)
	if got, _ := os.ReadFile(tinyPath); !bytes.Equal(got, want) {
		t.Errorf("tiny saved without flags:\n%s\nwant the built-in's file\n%s", got, want)
	}
	if out.Len() != 0 || !strings.Contains(errb.String(), "wrote profile tiny to "+tinyPath) {
		t.Errorf("stdout %q, stderr %q: want nothing served and the file named", out.String(), errb.String())
	}

	mine := filepath.Join(dir, "mine.json")
	if msg, err := runArgs(t, "sim", "--profile", "tiny", "--max-batch", "8", "--step-base", "3ms", "--fault", "503=0.25",
		"--fault", "stall=0.5:2s", "--no-prefix-cache", "--model", "my model", "--save-profile", mine); err != nil {
		t.Fatalf("%v %s", err, msg)
	}
	p, err := sim.ReadProfileFile(mine)
	if err != nil {
		t.Fatal(err)
	}
	wantCfg := tiny.Config
	wantCfg.MaxBatch, wantCfg.StepBase, wantCfg.PrefixCache, wantCfg.Model = 8, 3*time.Millisecond, false, "my model"
	wantCfg.Faults.Status503, wantCfg.Faults.Stall, wantCfg.Faults.StallFor = 0.25, 0.5, 2*time.Second
	if p.Name != "mine" || !reflect.DeepEqual(p.Config, wantCfg) || p.Fit != nil {
		t.Errorf("saved %q %+v\nwant mine %+v", p.Name, p.Config, wantCfg)
	}
	for _, w := range []string{"From profile tiny with ", "--fault 503=0.25 --fault stall=0.5:2s", "--max-batch 8", `--model "my model"`, "--no-prefix-cache", "--step-base 3ms"} {
		if !strings.Contains(p.Description, w) {
			t.Errorf("description %q lacks %q", p.Description, w)
		}
	}

	// A fitted profile: copied as is, its fit kept; changed by a flag, its fit dropped.
	fitted := p
	fitted.Name, fitted.Fit = "fitted", &sim.FitReport{Tool: "llmreplay dev", Params: []sim.FitParam{{Name: "max_batch", Value: 8, Determined: true}}}
	fpath := filepath.Join(dir, "fitted.json")
	if err := sim.WriteProfileFile(fpath, fitted); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flags   []string
		wantFit bool
	}{{nil, true}, {[]string{"--max-batch", "4"}, false}} {
		cp := filepath.Join(dir, "copy.json")
		if msg, err := runArgs(t, append([]string{"sim", "--profile-file", fpath, "--save-profile", cp}, c.flags...)...); err != nil {
			t.Fatalf("%v %s", err, msg)
		}
		got, err := sim.ReadProfileFile(cp)
		if err != nil || (got.Fit != nil) != c.wantFit || strings.Contains(got.Description, "profile fitted from") == c.wantFit {
			t.Errorf("%v: fit %v, description %q (%v); want fit %v", c.flags, got.Fit, got.Description, err, c.wantFit)
		}
	}
}

// TestSimProfileFile: --profile-file serves the file, the model flags override it, and
// what cannot be served is refused before anything starts, naming the file.
func TestSimProfileFile(t *testing.T) {
	dir := t.TempDir()
	tiny, _ := sim.BuiltinProfile("tiny")
	p := tiny
	p.Name, p.Config.MaxBatch, p.Config.Model = "edited", 5, "sim-edited"
	path := filepath.Join(dir, "edited.json")
	if err := sim.WriteProfileFile(path, p); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"sim", "--profile-file", path, "--step-base", "3ms", "--print-info"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var in sim.Info
	if err := json.Unmarshal(out.Bytes(), &in); err != nil {
		t.Fatal(err)
	}
	if in.Config.MaxBatch != 5 || in.Config.Model != "sim-edited" || in.Config.StepBase != 3*time.Millisecond || in.Config.DecodePerSeq != tiny.Config.DecodePerSeq {
		t.Errorf("served %+v: want the file's max_batch 5 and model, --step-base 3ms over it", in.Config)
	}

	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(strings.Replace(string(mustRead(t, path)), `"decode_per_seq_ns"`, `"decode_per_seq"`, 1)), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--profile-file", path, "--profile", "tiny"}, "--profile tiny and --profile-file " + path + " both name the engine's parameters: give one"},
		{[]string{"--profile-file", bad}, bad + `: config: unknown field "decode_per_seq"`},
		{[]string{"--profile-file", filepath.Join(dir, "none.json")}, "none.json does not exist"},
		{[]string{"--profile", "tiny", "--request-log", filepath.Join(dir, "r.jsonl"), "--save-profile", filepath.Join(dir, "x.json")}, "a profile names no request log"},
	} {
		err := run(context.Background(), append([]string{"sim", "--print-info"}, c.args...), io.Discard, io.Discard)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want a usage error saying %q", c.args, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.json")); err == nil {
		t.Error("a refused --save-profile wrote its file")
	}

	// Served: the banner names the file and the profile in it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sim", "--addr", "127.0.0.1:0", "--profile-file", path}, io.Discard, &errb)
	}()
	re := regexp.MustCompile(`serving sim-edited \(profile edited from ` + regexp.QuoteMeta(path) + `\) at http://127\.0\.0\.1:\d+/v1`)
	for deadline := time.Now().Add(10 * time.Second); !re.MatchString(errb.String()) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	if !re.MatchString(errb.String()) {
		t.Errorf("banner %q does not name the profile file", errb.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var help bytes.Buffer
	if err := run(context.Background(), []string{"sim", "--help"}, &help, io.Discard); !errors.Is(err, pflag.ErrHelp) {
		t.Fatal(err)
	}
	for _, w := range []string{"--profile-file FILE", "--save-profile mine.json", "llmreplay sim --profile-file fitted.json"} {
		if !strings.Contains(help.String(), w) {
			t.Errorf("--help lacks %q", w)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSimProfileDocExample keeps docs/sim.md's example profile file true: it is what the
// command the docs give beside it writes.
func TestSimProfileDocExample(t *testing.T) {
	doc := string(mustRead(t, "../../docs/sim.md"))
	_, sec, ok := strings.Cut(doc, "\n## Profile files\n")
	_, block, ok2 := strings.Cut(sec, "\n```json\n")
	block, _, ok3 := strings.Cut(block, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/sim.md has no Profile files section with a ```json example")
	}
	path := filepath.Join(t.TempDir(), "mine.json")
	args := []string{"sim", "--profile", "tiny", "--max-batch", "64", "--kv-cache-tokens", "131072", "--save-profile", path}
	cmd := "`llmreplay " + strings.Join(args[:len(args)-1], " ") + " mine.json`"
	if !strings.Contains(strings.Join(strings.Fields(sec), " "), cmd) { // the docs wrap lines
		t.Errorf("the section does not give the command %v", args)
	}
	if msg, err := runArgs(t, args...); err != nil {
		t.Fatalf("%v %s", err, msg)
	}
	if got := string(mustRead(t, path)); got != block {
		t.Errorf("docs/sim.md's example:\n%s\nthe command writes:\n%s", block, got)
	}
}
