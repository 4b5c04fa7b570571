// Package browsertest opens the HTML pages in headless Chromium for the tests of the
// packages that write them (analysis's run and compare pages, sweep's page): a page's own
// render check must pass and the console must stay silent.
package browsertest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Chromium finds a headless-capable Chromium: $LLMREPLAY_CHROMIUM, else chromium,
// chromium-browser or google-chrome on PATH. Missing: skip locally, fail under CI
// (scripts/test installs Debian's chromium there).
func Chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LLMREPLAY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("the HTML report test needs chromium (scripts/test installs it under CI)")
	}
	t.Skip("chromium not found: skipping the browser test")
	return ""
}

// Headless runs bin headless with the extra arguments (--dump-dom URL, --screenshot=...)
// and returns what it printed; a failure to run fails the test.
func Headless(t *testing.T, bin string, extra ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--no-first-run", "--disable-component-update", "--disable-sync", "--user-data-dir=" + t.TempDir(),
		"--enable-logging=stderr", "--v=0"}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", bin, args, err, errb.String())
	}
	return out.String(), errb.String()
}

var renderMarker = regexp.MustCompile(`id="render-check" data-rendered="(\d+)" data-plots="(\d+)">([^<]*)`)

// RenderCheck opens the page file in bin and checks that the page's script ran and drew
// every one of its plots, want of them, with no console message; it returns the page's
// DOM after the script ran.
func RenderCheck(t *testing.T, bin, page string, want int) string {
	t.Helper()
	dom, stderr := Headless(t, bin, "--dump-dom", "file://"+page)
	m := renderMarker.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("render marker not set: the page's script did not run\n%s", stderr)
	}
	if n := strconv.Itoa(want); m[1] != m[2] || m[2] != n {
		t.Errorf("render check: %s (want all %s plots)", m[3], n)
	}
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, ":CONSOLE") {
			t.Errorf("console message: %s", line)
		}
	}
	return dom
}

// Screenshot keeps a screenshot of the page at $LLMREPLAY_SCREENSHOT (a .png path), when
// set, window wide by high pixels: a page to look at.
func Screenshot(t *testing.T, bin, page string, wide, high int) {
	t.Helper()
	if shot := os.Getenv("LLMREPLAY_SCREENSHOT"); shot != "" {
		abs, _ := filepath.Abs(shot)
		Headless(t, bin, "--window-size="+strconv.Itoa(wide)+","+strconv.Itoa(high), "--screenshot="+abs, "file://"+page)
	}
}
