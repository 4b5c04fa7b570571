package sweep

import (
	"github.com/llmreplay/llmreplay/wire"

	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/internal/atomicfile"
	"github.com/llmreplay/llmreplay/replay"
)

// StateFile is the name of a sweep's state in its folder.
const StateFile = "sweep-state.json"

// State is DIR/sweep-state.json: the sweep's command line and its finished points, so
// that a resume continues with the same options and skips what is done. The command line
// is stored without its secrets: flags that may carry one (--api-key, --header, an
// --endpoint with userinfo or a query) are left out and named in Withheld, and a resume
// asks for them again (the API key may come from the environment instead).
type State struct {
	Version  int        `json:"version"`
	Args     []string   `json:"args"`
	Points   []Finished `json:"points"`
	Started  time.Time  `json:"started"`
	Withheld []string   `json:"withheld,omitempty"` // flag names, e.g. "endpoint"
	Endpoint string     `json:"endpoint,omitempty"` // a withheld --endpoint's safe form
}

// Finished is a finished point of a sweep.
type Finished struct {
	Load float64 `json:"load"`
	File string  `json:"file"` // relative to DIR
	// Repeats are a repeated point's files (sweep --repeat), relative to DIR, repeat 1
	// first; File is then the point's file without the repeat (point-01-rate-2.parquet).
	Repeats []string `json:"repeats,omitempty"`
}

// ReadState reads the state of the sweep in dir.
func ReadState(dir string) (*State, error) {
	path := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sweep: resume: %w", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("sweep: resume: %s: %w", path, err)
	}
	if st.Version != 1 || len(st.Args) == 0 {
		return nil, fmt.Errorf("sweep: resume: %s: not a version 1 sweep state", path)
	}
	return &st, nil
}

// Write replaces the state in dir, atomically: a sweep killed while it writes keeps the
// previous state.
func (st *State) Write(dir string) error {
	path := filepath.Join(dir, StateFile)
	err := atomicfile.Write(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	})
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ResumeArgs reads the state of the sweep a --resume DIR in args names and returns it with
// the command line to parse: the stored one, plus --json and the withheld secret flags
// when args give them. Without --resume it returns a nil state and args.
func ResumeArgs(args []string) (*State, []string, error) {
	var resumeDir string
	for i, a := range args {
		if a == "--resume" && i+1 < len(args) {
			resumeDir = args[i+1]
		} else if v, ok := strings.CutPrefix(a, "--resume="); ok {
			resumeDir = v
		}
	}
	if resumeDir == "" {
		return nil, args, nil
	}
	st, err := ReadState(resumeDir)
	if err != nil {
		return nil, nil, err
	}
	// The sweep continues with the options it was started with; only --json (how the
	// result is printed) and the flags it withheld may be added.
	var extra []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--resume":
			i++
		case strings.HasPrefix(a, "--resume="):
		case a == "--json":
			extra = append(extra, a)
		default:
			n := secretFlagTokens(args, i)
			if n == 0 || len(st.Withheld) == 0 {
				return nil, nil, configErrorf("sweep: --resume takes no other flags than --json: the sweep continues with its own (%s)", strings.Join(st.Args, " "))
			}
			extra = append(extra, args[i:i+n]...)
			i += n - 1
		}
	}
	return st, append(append([]string(nil), st.Args...), extra...), nil
}

// secretFlags are the flags whose values may be secrets: stored in the state only when
// the value is not one (an --endpoint without userinfo or query).
var secretFlags = map[string]string{"--endpoint": "endpoint", "-e": "endpoint", "--api-key": "api-key", "--header": "header", "-H": "header"}

// secretFlagTokens returns how many tokens of args, from i, are one secret flag with its
// value (--endpoint URL, --endpoint=URL, -eURL, -H 'N: v'...), or 0 when args[i] is not one.
func secretFlagTokens(args []string, i int) int {
	if _, ok := secretFlagName(args[i]); !ok {
		return 0
	}
	if _, bare := secretFlags[args[i]]; bare && i+1 < len(args) {
		return 2 // the flag, then its value
	}
	return 1
}

// secretFlagName returns the name of the secret flag token a starts (in any form).
func secretFlagName(a string) (string, bool) {
	if n, ok := secretFlags[a]; ok {
		return n, true
	}
	for form, n := range secretFlags {
		long := strings.HasPrefix(form, "--")
		if (long && strings.HasPrefix(a, form+"=")) || (!long && len(a) > 2 && strings.HasPrefix(a, form)) {
			return n, true
		}
	}
	return "", false
}

// newState starts the state of a new sweep, its command line without secrets.
func newState(c *Config) (*State, error) {
	args, cfg := c.Args, &c.Replay
	st := &State{Version: 1, Started: time.Now().UTC()}
	withheld := map[string]bool{}
	for i := 0; i < len(args); i++ {
		n := secretFlagTokens(args, i)
		if n == 0 {
			st.Args = append(st.Args, args[i])
			continue
		}
		name, _ := secretFlagName(args[i])
		if name == "endpoint" && !replay.HasSecret(cfg.Endpoint) {
			st.Args = append(st.Args, args[i:i+n]...)
		} else {
			withheld[name] = true
		}
		i += n - 1
	}
	for _, n := range []string{"endpoint", "api-key", "header"} {
		if withheld[n] {
			st.Withheld = append(st.Withheld, n)
		}
	}
	if withheld["endpoint"] {
		st.Endpoint = wire.SafeURL(cfg.Endpoint)
	}
	// A --scrape URL's credentials or query would be stored with the command line.
	for _, u := range cfg.Scrape {
		if replay.HasSecret(u) {
			return nil, configErrorf("sweep: --scrape %s carries credentials or a query, which %s would store: give the sweep a metrics URL without them", wire.SafeURL(u), StateFile)
		}
	}
	// Whatever form a secret took (-qeURL, say), it must not be stored.
	for _, a := range st.Args {
		if holdsSecret(a, cfg, c.Given["api-key"]) {
			return nil, configErrorf("sweep: cannot store the command line without its secrets: give --endpoint, --api-key and --header as separate flags")
		}
	}
	return st, nil
}

// holdsSecret reports whether a command-line token holds one of cfg's secrets: the
// endpoint's userinfo or query, a whole --header, the API key when a flag gave it.
func holdsSecret(a string, cfg *replay.Config, keyFromFlag bool) bool {
	if keyFromFlag && cfg.APIKey != "" && strings.Contains(a, cfg.APIKey) {
		return true
	}
	for _, h := range cfg.Headers {
		if h != "" && strings.HasSuffix(a, h) {
			return true
		}
	}
	if replay.HasSecret(cfg.Endpoint) && strings.Contains(a, cfg.Endpoint) {
		return true
	}
	if u, err := url.Parse(cfg.Endpoint); err == nil && u.User != nil {
		return strings.Contains(a, u.User.String())
	}
	return false
}

// checkWithheld makes a resume give again the secret flags the state left out.
func (st *State) checkWithheld(c *Config) error {
	for _, n := range st.Withheld {
		given := c.Given[n]
		if n == "api-key" {
			given = c.Replay.APIKey != "" // the flag, or $LLMREPLAY_API_KEY / $OPENAI_API_KEY
		}
		if given {
			continue
		}
		what := "--" + n
		if n == "endpoint" {
			what = fmt.Sprintf("--endpoint (%s, with its credentials)", st.Endpoint)
		}
		return configErrorf("sweep: --resume: this sweep's %s is not stored (it may hold a secret): give it again with --resume", what)
	}
	return nil
}
