// Command llmreplay replays LLM request traces open-loop against OpenAI-compatible endpoints
// and measures what they sustain. See README.md and docs/.
//
// main only turns run's error into an exit status; every subcommand lives in its own file
// with a testable run function and registers itself in an init func.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/llmreplay/llmreplay/replay"
)

// version is set at build time with -ldflags "-X main.version=..."
var version = "dev"

// command is one subcommand. run gets the arguments after the subcommand's name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]*command{}

// register adds a subcommand; each subcommand file calls it from init.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("llmreplay: subcommand registered twice: " + c.name)
	}
	commands[c.name] = c
}

// usageError is a mistake in the command line: exit status 2, as flag parsers do.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// exitError carries a specific exit status (for example replay --strict on a
// client-limited run) together with the message to print.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	// The process's one signal handler. Every subcommand gets the graceful context of the
	// stop model (replay.WithStop), which carries the hard one.
	ctx, stop, abort := replay.WithStop(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go stopOnSignals(sigs, stop, abort)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	signal.Stop(sigs)
	abort()
	os.Exit(exitCode(err, os.Stderr))
}

// stopOnSignals calls stop at the first signal on sigs (the graceful stop: a replay sends
// no more requests and gives those in flight --grace) and abort at the second (they are
// canceled at once). Later signals are ignored, so that a run still writes its results.
func stopOnSignals(sigs <-chan os.Signal, stop, abort func()) {
	<-sigs
	stop()
	<-sigs
	abort()
}

// exitCode prints err (if any) and maps it to the process exit status:
// 0 success or --help, 2 usage error, exitError's code, 1 anything else.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "llmreplay:", err)
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, "Run 'llmreplay --help' or 'llmreplay COMMAND --help' for usage.")
		return 2
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// run dispatches to a subcommand.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr)
		return usagef("no command given")
	}
	switch args[0] {
	case "-h", "--help", "help":
		printUsage(stdout)
		return nil
	case "--version", "version":
		fmt.Fprintln(stdout, "llmreplay", version)
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		return usagef("unknown command %q", args[0])
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `llmreplay replays LLM request traces open-loop against OpenAI-compatible endpoints
and measures what they sustain: tok/s, TTFT, TPOT, ITL, end-to-end latency, goodput.

Usage:
  llmreplay COMMAND [flags]

Commands:
`)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, `
Run 'llmreplay COMMAND --help' for a command's flags and examples.
`)
}

// newFlagSet makes a GNU-style flag set whose --help prints usage, the flags and examples
// to stdout (pflag returns ErrHelp, which exits 0). Parse errors are usage errors.
func newFlagSet(name, usage, examples string, stdout io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(io.Discard) // errors are returned and printed once, by main
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage:\n  %s\n\nFlags:\n%s", usage, fs.FlagUsages())
		if examples != "" {
			fmt.Fprintf(stdout, "\nExamples:\n%s\n", strings.TrimRight(examples, "\n"))
		}
	}
	return fs
}

// parseFlags parses args into fs, turning pflag's errors into usage errors.
// For -h/--help pflag has printed the usage already and parseFlags returns pflag.ErrHelp.
func parseFlags(fs *pflag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		return usagef("%s: %v", fs.Name(), err)
	}
	return nil
}
