package sweep

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/atomicfile/atomicfiletest"
	"github.com/llmreplay/llmreplay/replay"
)

// TestStateAtomic: the state is 0644 under the umask (it was 0600), is replaced whole, and
// a failed write keeps the previous state.
func TestStateAtomic(t *testing.T) {
	dir := t.TempDir()
	st := &State{Version: 1, Args: []string{"--speedups", "1,2"}, Started: time.Unix(0, 0).UTC()}
	for _, load := range []float64{1, 2} {
		st.Points = append(st.Points, Finished{Load: load, File: "x.parquet"})
		if err := st.Write(dir); err != nil {
			t.Fatal(err)
		}
		atomicfiletest.Check(t, filepath.Join(dir, StateFile))
		got, err := ReadState(dir)
		if err != nil || len(got.Points) != len(st.Points) {
			t.Fatalf("read back %+v, %v", got, err)
		}
	}
	path := filepath.Join(dir, StateFile)
	before, _ := os.ReadFile(path)
	st.Points = append(st.Points, Finished{Load: math.NaN(), File: "y.parquet"}) // JSON has no NaN
	if err := st.Write(dir); err == nil || !strings.Contains(err.Error(), "write "+path) {
		t.Fatalf("Write of a NaN load = %v, want an error naming the file", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatalf("a failed write changed the state: %q", after)
	}
	atomicfiletest.NoTemp(t, dir)

	for _, bad := range []string{"", "{", `{"version":2,"args":["--auto"]}`, `{"version":1}`} {
		os.WriteFile(path, []byte(bad), 0o644)
		if _, err := ReadState(dir); err == nil || !strings.Contains(err.Error(), "sweep: resume") {
			t.Errorf("ReadState of %q: %v, want a resume error", bad, err)
		}
	}
}

// TestStateWithholdsSecrets: every form of the secret flags is left out of the stored
// command line and named as withheld; an endpoint without credentials is kept.
func TestStateWithholdsSecrets(t *testing.T) {
	const pw, key, hv = "pw-Secret1", "sk-Secret2", "hv-Secret3"
	ep := "http://u:" + pw + "@127.0.0.1:9/v1"
	for _, tc := range []struct {
		args     []string
		cfg      func(*replay.Config)
		withheld string
		kept     string
	}{
		{[]string{"--speedups", "1", "--endpoint", ep, "-o", "d"}, func(c *replay.Config) { c.Endpoint = ep }, "endpoint", "--speedups 1 -o d"},
		{[]string{"--endpoint=" + ep, "--speedups", "1"}, func(c *replay.Config) { c.Endpoint = ep }, "endpoint", "--speedups 1"},
		{[]string{"-e" + ep, "--speedups", "1"}, func(c *replay.Config) { c.Endpoint = ep }, "endpoint", "--speedups 1"},
		{[]string{"-e", "http://127.0.0.1:9/v1", "--speedups", "1"}, func(c *replay.Config) { c.Endpoint = "http://127.0.0.1:9/v1" }, "", "-e http://127.0.0.1:9/v1 --speedups 1"},
		{[]string{"--api-key", key, "--speedups", "1"}, func(c *replay.Config) { c.APIKey = key }, "api-key", "--speedups 1"},
		{[]string{"--api-key=" + key, "-H", "X-S: " + hv, "--header=X-T: " + hv, "-HX-U: " + hv}, func(c *replay.Config) {
			c.APIKey, c.Headers = key, []string{"X-S: " + hv, "X-T: " + hv, "X-U: " + hv}
		}, "api-key,header", ""},
	} {
		c := &Config{Replay: replay.DefaultConfig(), Args: tc.args, Given: map[string]bool{"api-key": tc.cfg != nil}}
		tc.cfg(&c.Replay)
		st, err := newState(c)
		if err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		if got := strings.Join(st.Withheld, ","); got != tc.withheld {
			t.Errorf("%q: withheld %q, want %q", tc.args, got, tc.withheld)
		}
		if got := strings.Join(st.Args, " "); got != tc.kept {
			t.Errorf("%q: stored %q, want %q", tc.args, got, tc.kept)
		}
		for _, a := range st.Args {
			for _, s := range []string{pw, key, hv} {
				if strings.Contains(a, s) {
					t.Errorf("%q: stored %q", tc.args, a)
				}
			}
		}
	}
	// A form the scan does not know (flags bundled with -e) is refused, not stored.
	c := &Config{Replay: replay.DefaultConfig(), Args: []string{"-qe", ep}}
	c.Replay.Endpoint = ep
	if _, err := newState(c); !IsConfigError(err) {
		t.Errorf("%q: stored (%v)", c.Args, err)
	}
	// A --scrape URL with credentials would be stored.
	c = &Config{Replay: replay.DefaultConfig(), Args: []string{"--scrape", "http://u:pw@h:9/metrics"}}
	c.Replay.Scrape = []string{"http://u:pw@h:9/metrics"}
	if _, err := newState(c); !IsConfigError(err) || !strings.Contains(err.Error(), "--scrape http://h:9/metrics carries credentials") {
		t.Errorf("--scrape with credentials: %v", err)
	}
}

// TestResumeArgs: a resume parses the stored command line, with --json and the withheld
// secret flags added when given, and refuses any other flag.
func TestResumeArgs(t *testing.T) {
	dir := t.TempDir()
	st := &State{Version: 1, Args: []string{"--speedups", "1,2", "-o", dir}, Withheld: []string{"endpoint"}, Endpoint: "http://h:8000/v1"}
	if err := st.Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string // the command line to parse, or the error
	}{
		{[]string{"--speedups", "3"}, "--speedups 3"}, // no --resume: args as they are
		{[]string{"--resume", dir}, "--speedups 1,2 -o " + dir},
		{[]string{"--resume=" + dir, "--json"}, "--speedups 1,2 -o " + dir + " --json"},
		{[]string{"--json", "--resume", dir, "-e", "http://u:p@h:8000/v1", "-HX-K: v"}, "--speedups 1,2 -o " + dir + " --json -e http://u:p@h:8000/v1 -HX-K: v"},
		{[]string{"--resume", dir, "--limit", "5"}, "error: --resume takes no other flags than --json: the sweep continues with its own (--speedups 1,2 -o " + dir + ")"},
	} {
		got, args, err := ResumeArgs(tc.args)
		if strings.HasPrefix(tc.want, "error: ") {
			if !IsConfigError(err) || !strings.Contains(err.Error(), strings.TrimPrefix(tc.want, "error: ")) {
				t.Errorf("ResumeArgs(%q) = %v, want a ConfigError %q", tc.args, err, tc.want)
			}
			continue
		}
		if err != nil || strings.Join(args, " ") != tc.want {
			t.Errorf("ResumeArgs(%q) = %q, %v; want %q", tc.args, args, err, tc.want)
		}
		if resumed := strings.Contains(strings.Join(tc.args, " "), "--resume"); (got != nil) != resumed {
			t.Errorf("ResumeArgs(%q): state %v", tc.args, got)
		}
	}
	// Without withheld flags, a secret flag is another flag: refused.
	st.Withheld = nil
	if err := st.Write(dir); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ResumeArgs([]string{"--resume", dir, "--api-key", "k"}); !IsConfigError(err) {
		t.Errorf("a secret flag the state did not withhold: %v", err)
	}
	if _, _, err := ResumeArgs([]string{"--resume", t.TempDir()}); err == nil || IsConfigError(err) || !strings.Contains(err.Error(), StateFile) {
		t.Errorf("resume of an empty folder: %v, want an error naming the state file", err)
	}
}

// TestCheckWithheld: a resume must give again every secret flag its state withheld; the
// API key may come from the environment (Replay.APIKey without the flag).
func TestCheckWithheld(t *testing.T) {
	st := &State{Withheld: []string{"endpoint", "api-key", "header"}, Endpoint: "http://h:8000/v1"}
	c := &Config{Replay: replay.DefaultConfig(), Given: map[string]bool{}}
	var ce *ConfigError
	if err := st.checkWithheld(c); !errors.As(err, &ce) || !strings.Contains(err.Error(), "--endpoint (http://h:8000/v1, with its credentials) is not stored") {
		t.Errorf("nothing given: %v", err)
	}
	c.Given["endpoint"] = true
	if err := st.checkWithheld(c); err == nil || !strings.Contains(err.Error(), "--api-key is not stored") {
		t.Errorf("no key: %v", err)
	}
	c.Replay.APIKey = "from-the-environment"
	if err := st.checkWithheld(c); err == nil || !strings.Contains(err.Error(), "--header is not stored") {
		t.Errorf("no header: %v", err)
	}
	c.Given["header"] = true
	if err := st.checkWithheld(c); err != nil {
		t.Errorf("all given: %v", err)
	}
}
