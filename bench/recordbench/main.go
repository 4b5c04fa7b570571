//go:build linux

// Command recordbench measures what the recording proxy, `llmreplay record`, adds to
// streamed requests on loopback (docs/record.md, "Overhead"). Three processes: an upstream
// of exact timings (internal/vllmtest's vLLM-like server: a fixed time to the first token
// and a fixed gap between tokens), the proxy (`llmreplay record --listen 127.0.0.1:PORT
// --upstream URL -o DIR`, started anew for each of its runs and stopped by SIGTERM, as a
// deployment stops it) and this one, which replays a Poisson trace with package replay,
// the code `llmreplay replay` runs. The replayer runs in this process rather than as an
// `llmreplay replay` child, as in bench/replaybench: its CPU can then be read around
// replay.Run alone (a child's would hold its start, the preflight and the conversion of its
// journal, costs of a run that are not per token), and its figures come back as the
// summary `llmreplay replay` prints, with no file to parse. The two children are what must
// be processes: the proxy so that its CPU and memory are its own, the upstream so that its
// CPU is in no one else's.
//
// Runs alternate, direct to the upstream and through the proxy, in pairs (the first of a
// pair alternates too, so a drift of the machine's load falls on both paths alike). It
// prints, per path, the median over pairs of TTFT p50 and p99, the median over pairs of
// their difference (what the proxy adds), the proxy's CPU per streamed token and per
// request beside the replayer's, the proxy's peak RSS, and whether every request was ok on
// both paths; it exits non-zero when one was not.
//
//	go run ./bench/recordbench                       # 1,000 streamed requests/s, 5 pairs of 10 s runs
//	go run ./bench/recordbench --json > overhead.json
//	go run ./bench/recordbench --llmreplay /tmp/llmreplay --pairs 9 --output-tokens 100
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if os.Getenv(childEnv) != "" {
		err = serveUpstream(ctx, os.Args[1:], os.Stderr)
	} else {
		err = run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	}
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "recordbench:", err)
		os.Exit(1)
	}
}

const examples = `
Examples:
  go run ./bench/recordbench                      # 1,000 streamed requests/s, 5 pairs of 10 s runs
  go run ./bench/recordbench --json > overhead.json
  go run ./bench/recordbench --llmreplay /tmp/llmreplay --pairs 9 --output-tokens 100
  go run ./bench/recordbench --llmreplay ./standin --check-recording=false   # a stand-in proxy
  go build -o /tmp/recordbench ./bench/recordbench
  taskset -c 0 /tmp/recordbench --upstream-cpus 0 --proxy-cpus 1   # the proxy on a core of its own
`

func newFlagSet(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return fs
}

// config is the benchmark's flags.
type config struct {
	Rate           float64       `json:"rate_per_s"`
	Duration       time.Duration `json:"duration_ns"`
	Warmup         time.Duration `json:"warmup_ns"`
	Pairs          int           `json:"pairs"`
	OutputTokens   int           `json:"output_tokens"`
	PromptTokens   int           `json:"prompt_tokens"`
	TTFT           time.Duration `json:"upstream_ttft_ns"`
	ITL            time.Duration `json:"upstream_itl_ns"`
	Seed           uint64        `json:"seed"`
	LLMReplay      string        `json:"-"`
	ProxyArgs      string        `json:"proxy_args,omitempty"`
	CheckRecording bool          `json:"check_recording"`
	ProxyCPUs      string        `json:"proxy_cpus,omitempty"`
	UpstreamCPUs   string        `json:"upstream_cpus,omitempty"`
	JSON           bool          `json:"-"`
	Keep           bool          `json:"-"`
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := newFlagSet("recordbench", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: recordbench [flags]\n\nWhat `llmreplay record` adds to streamed requests on loopback: runs direct to an upstream\nof exact timings and through the proxy, alternating.\n\nFlags:")
		fs.PrintDefaults()
		fmt.Fprint(stderr, examples)
	}
	fs.Float64Var(&c.Rate, "rate", 1000, "offered rate, streamed requests/s (Poisson arrivals)")
	fs.DurationVar(&c.Duration, "duration", 10*time.Second, "schedule length of each measured run")
	fs.DurationVar(&c.Warmup, "warmup", time.Second, "before each measured run, replay this much of the same load unmeasured (the proxy's connections to the upstream opened, its heap grown); 0: none")
	fs.IntVar(&c.Pairs, "pairs", 5, "pairs of runs, one direct and one through the proxy each")
	fs.IntVar(&c.OutputTokens, "output-tokens", 16, "output tokens per request (one streamed chunk each); more makes the upstream, the proxy and the replayer share more CPU (a 2-core machine is saturated near 50 at 1,000 requests/s)")
	fs.IntVar(&c.PromptTokens, "prompt-tokens", 100, "prompt tokens per request")
	fs.DurationVar(&c.TTFT, "ttft", 20*time.Millisecond, "the upstream's time to the first token")
	fs.DurationVar(&c.ITL, "itl", 10*time.Millisecond, "the upstream's gap between tokens")
	fs.Uint64Var(&c.Seed, "seed", 1, "arrival seed")
	fs.StringVar(&c.LLMReplay, "llmreplay", "", "the binary run as `BIN record --listen 127.0.0.1:PORT --upstream URL -o DIR`; default: go build ./cmd/llmreplay of this module into a temporary folder")
	fs.StringVar(&c.ProxyArgs, "proxy-args", "", "more arguments for the proxy, split at spaces (e.g. \"--rotate 1h\")")
	fs.BoolVar(&c.CheckRecording, "check-recording", true, "after each proxy run, require trace-0001.parquet and results-0001.parquet in its folder, the results with a row for every request sent through it")
	fs.StringVar(&c.ProxyCPUs, "proxy-cpus", "", "run the proxy under `taskset -c LIST` (e.g. 1, with this program under taskset -c 0: the proxy on a core of its own, as on its own machine)")
	fs.StringVar(&c.UpstreamCPUs, "upstream-cpus", "", "run the upstream under `taskset -c LIST`")
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON")
	fs.BoolVar(&c.Keep, "keep", false, "keep the temporary folder (traces, results, the proxy's recordings) and print where it is")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	switch {
	case !(c.Rate > 0):
		return nil, fmt.Errorf("--rate %v: must be > 0", c.Rate)
	case c.Duration <= 0 || c.Warmup < 0:
		return nil, fmt.Errorf("--duration %v, --warmup %v: want a duration > 0 and a warm-up >= 0", c.Duration, c.Warmup)
	case c.Pairs < 1:
		return nil, fmt.Errorf("--pairs %d: must be >= 1", c.Pairs)
	case c.OutputTokens < 1 || c.PromptTokens < 1:
		return nil, fmt.Errorf("--output-tokens %d, --prompt-tokens %d: must be >= 1", c.OutputTokens, c.PromptTokens)
	case c.TTFT < 0 || c.ITL < 0:
		return nil, fmt.Errorf("--ttft %v, --itl %v: must be >= 0", c.TTFT, c.ITL)
	}
	return c, nil
}

// run is the benchmark: it returns an error when a request was not ok on either path, or
// when a proxy run's recording failed its check, after printing the report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "recordbench")
	if err != nil {
		return err
	}
	if c.Keep {
		fmt.Fprintln(stderr, "recordbench: keeping", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if c.LLMReplay == "" {
		if c.LLMReplay, err = buildLLMReplay(ctx, dir); err != nil {
			return err
		}
	}
	up, err := startUpstream(c.TTFT, c.ITL, c.UpstreamCPUs)
	if err != nil {
		return err
	}
	defer up.stop(10 * time.Second)
	upCPUs := cpusAllowed(strconv.Itoa(up.cmd.Process.Pid))
	b := &bench{c: c, dir: dir, upstream: up, log: stderr}
	runs, err := b.pairs(ctx)
	if err != nil {
		return err
	}
	rep := summarize(c, runs)
	rep.Proxy = strings.Join(b.proxyArgv("127.0.0.1:PORT", "DIR"), " ")
	rep.UpstreamCPUs, rep.ReplayerCPUs = upCPUs, cpusAllowed("self")
	if c.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.text(stdout)
	}
	return rep.failure()
}

// buildLLMReplay builds ./cmd/llmreplay of the module this is run in.
func buildLLMReplay(ctx context.Context, dir string) (string, error) {
	out := filepath.Join(dir, "llmreplay")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/llmreplay/llmreplay/cmd/llmreplay")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/llmreplay (run from the module's folder, or give --llmreplay BIN): %v\n%s", err, b)
	}
	return out, nil
}
