package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"

	"github.com/spf13/pflag"

	"github.com/llmreplay/llmreplay/replay"
)

func TestRunDispatch(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out, &errb); err != nil {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(out.String(), "Commands:") {
		t.Errorf("--help output lacks the command list:\n%s", out.String())
	}
	err := run(context.Background(), []string{"no-such-command"}, &out, &errb)
	var ue *usageError
	if !errors.As(err, &ue) {
		t.Fatalf("unknown command: got %v, want a usage error", err)
	}
	if code := exitCode(err, io.Discard); code != 2 {
		t.Errorf("unknown command exit code = %d, want 2", code)
	}
	if code := exitCode(&exitError{code: 3, err: errors.New("client-limited")}, io.Discard); code != 3 {
		t.Errorf("exitError code = %d, want 3", code)
	}
	if code := exitCode(pflag.ErrHelp, io.Discard); code != 0 {
		t.Errorf("ErrHelp exit code = %d, want 0", code)
	}
}

func TestFlagSetHelpPrintsExamplesOnce(t *testing.T) {
	var out bytes.Buffer
	fs := newFlagSet("demo", "llmreplay demo [flags]", "  llmreplay demo --n 3", &out)
	fs.Int("n", 1, "how many")
	err := parseFlags(fs, []string{"--help"})
	if !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("--help: got %v, want pflag.ErrHelp", err)
	}
	if got := strings.Count(out.String(), "Examples:"); got != 1 {
		t.Errorf("usage printed %d times, want 1:\n%s", got, out.String())
	}
	err = parseFlags(fs, []string{"--bogus"})
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("unknown flag: got %v, want a usage error naming it", err)
	}
}

// The one signal handler: the first signal cancels the graceful context only, the second
// the hard one, later ones are ignored.
func TestStopOnSignals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop, abort := replay.WithStop(context.Background())
		defer abort()
		hard := replay.HardContext(ctx)
		sigs := make(chan os.Signal, 2)
		done := make(chan struct{})
		go func() { defer close(done); stopOnSignals(sigs, stop, abort) }()
		synctest.Wait()
		if ctx.Err() != nil || hard.Err() != nil {
			t.Fatal("stopped before any signal")
		}
		sigs <- os.Interrupt
		synctest.Wait()
		if ctx.Err() == nil || hard.Err() != nil {
			t.Fatalf("after one signal: graceful %v, hard %v; want canceled, not", ctx.Err(), hard.Err())
		}
		sigs <- syscall.SIGTERM
		<-done
		if hard.Err() == nil {
			t.Fatal("after two signals the hard context is not canceled")
		}
		sigs <- os.Interrupt // ignored, and does not block
	})
}
