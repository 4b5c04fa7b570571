package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/sim"
)

// TestSecretsNeverWritten replays against a loopback simulated engine with a password in
// the endpoint URL, an API key (flag and environment) and a secret header, keeps the
// journal, analyses the result every way, sweeps two points and resumes the sweep, then
// greps every byte written (files, stdout, stderr) for the secrets.
func TestSecretsNeverWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four short replays")
	}
	const (
		password  = "pw-Zq81Secret"
		apiKey    = "sk-Kk19FlagKey"
		envKey    = "sk-Ee55EnvKey"
		headerVal = "hv-Hh27HeaderValue"
	)
	secrets := []string{password, apiKey, envKey, headerVal,
		base64.StdEncoding.EncodeToString([]byte("user:" + password))} // as basic auth
	cfg, err := sim.Profile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := sim.Start(ctx, "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	endpoint := strings.Replace(srv.BaseURL(), "http://", "http://user:"+password+"@", 1)
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	runOK := func(args ...string) {
		t.Helper()
		if err := run(ctx, args, &stdout, &stderr); err != nil {
			t.Fatalf("llmreplay %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
	}
	common := []string{"--endpoint", endpoint, "-H", "X-Secret: " + headerVal, "--limit", "6", "--prewarm", "2"}
	res := filepath.Join(dir, "r.parquet")
	runOK(append([]string{"replay", "--api-key", apiKey, "--keep-journal", "--calibrate", "--progress-interval", "5ms", "-o", res}, common...)...)
	t.Setenv("LLMREPLAY_API_KEY", envKey)
	runOK(append([]string{"replay", "--keep-journal", "-o", filepath.Join(dir, "r-env.parquet")}, common...)...)
	runOK("analyze", res, "--json")
	runOK("analyze", res, "--html", filepath.Join(dir, "report.html"), "--parquet", filepath.Join(dir, "summary"))
	sw := filepath.Join(dir, "sweep")
	sweepArgs := append([]string{"sweep", "--speedups", "40,80", "--cooldown", "0s", "--api-key", apiKey, "-o", sw}, common...)
	runOK(sweepArgs...)

	// A resume needs the withheld secrets again; with them it goes on.
	if err := run(ctx, []string{"sweep", "--resume", sw}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "give it again") {
		t.Errorf("resume without the withheld --endpoint: %v, want an error asking for it", err)
	} else {
		stderr.WriteString(err.Error())
	}
	runOK("sweep", "--resume", sw, "--endpoint", endpoint, "-H", "X-Secret: "+headerVal, "--json")

	written := map[string][]byte{"stdout": stdout.Bytes(), "stderr": stderr.Bytes()}
	files := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		written[path] = b
		files++
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"r.parquet.journal", "r-env.parquet.journal", "report.html", "sweep-state.json", "sweep.json", "sweep.parquet"} {
		found := false
		for p := range written {
			found = found || strings.HasSuffix(p, string(filepath.Separator)+want)
		}
		if !found {
			t.Errorf("no %s written: the test greps less than it should", want)
		}
	}
	for name, b := range written {
		for _, s := range secrets {
			if i := bytes.Index(b, []byte(s)); i >= 0 {
				t.Errorf("%s holds the secret %q: ...%s...", name, s, b[max(0, i-80):min(len(b), i+len(s)+20)])
			}
		}
	}
	if !strings.Contains(stdout.String(), "results: ") || files < 10 {
		t.Errorf("the runs wrote too little to be checked: %d files; stdout:\n%s", files, stdout.String())
	}
}
