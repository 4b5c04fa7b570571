//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/llmreplay/llmreplay/internal/cputime"
	"github.com/llmreplay/llmreplay/internal/vllmtest"
)

// childEnv, set in a child's environment, makes this program (or the test binary, through
// TestMain) serve the upstream instead of running the benchmark: the upstream is a process
// of its own, so that neither its CPU nor its scheduling is in the replayer's.
const childEnv = "RECORDBENCH_UPSTREAM"

// listening matches the line a child prints once it accepts connections: the recording
// proxy's contract, `record: listening on HOST:PORT, forwarding to URL`, and the
// upstream's `upstream: listening on HOST:PORT`.
var listening = regexp.MustCompile(`listening on ([^\s,]+)`)

// child is a process of the benchmark's: the upstream or the recording proxy.
type child struct {
	name string
	cmd  *exec.Cmd
	addr string // HOST:PORT from its listening line
	tail *tail  // its last output lines, shown when it fails
	done chan struct{}
	err  error        // cmd.Wait's, once done is closed
	hwm  atomic.Int64 // the largest VmHWM read, bytes
}

// startChild starts cmd and waits (up to wait) for its listening line on stderr; stdout
// and the rest of stderr go to a tail kept for errors.
func startChild(name string, cmd *exec.Cmd, wait time.Duration) (*child, error) {
	c := &child{name: name, cmd: cmd, tail: &tail{}, done: make(chan struct{})}
	cmd.Stdout = c.tail
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", name, cmd.Path, err)
	}
	found := make(chan string, 1)
	copied := make(chan struct{})
	go func() { // read stderr to its end, so the child never blocks writing it
		defer close(copied)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			c.tail.line(sc.Text())
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	go func() {
		<-copied // Wait closes the pipe: read it all first
		c.err = cmd.Wait()
		close(c.done)
	}()
	go c.watchHWM()
	select {
	case c.addr = <-found:
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("%s exited before it printed its listening line (%v); its last output:\n%s", name, c.err, c.tail)
	case <-time.After(wait):
		c.kill()
		return nil, fmt.Errorf("%s printed no line matching %q within %v; its last output:\n%s", name, listening, wait, c.tail)
	}
}

// cpu is the child's CPU time so far (10 ms steps; cputime.Of).
func (c *child) cpu() time.Duration {
	d, err := cputime.Of(c.cmd.Process.Pid)
	if err != nil {
		return 0
	}
	return d
}

// stop sends SIGTERM and waits up to wait for the child to exit (the proxy writes its
// files then); past it, the child is killed and stop says so.
func (c *child) stop(wait time.Duration) error {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(wait):
		c.kill()
		return fmt.Errorf("%s did not exit within %v of SIGTERM: killed; its last output:\n%s", c.name, wait, c.tail)
	}
	if c.err != nil {
		return fmt.Errorf("%s exited with %v after SIGTERM; its last output:\n%s", c.name, c.err, c.tail)
	}
	return nil
}

func (c *child) kill() {
	c.cmd.Process.Kill()
	<-c.done
}

// usage is the exited child's CPU over its whole life (getrusage, µs resolution) and its
// peak RSS. The peak is not getrusage's ru_maxrss: Linux carries the parent's high-water
// mark into a child at exec (Go starts children with vfork, sharing this process's
// memory until the exec), so a child of this ~100 MB process would show ~100 MB whatever
// it used. It is the largest VmHWM (proc(5): the high-water mark of the child's own
// memory since its exec) read every hwmPeriod while the child lived: a later reading
// sees every earlier peak, so only one in the last period before the exit can be missed.
func (c *child) usage() (cpu time.Duration, peakRSS int64) {
	ru, ok := c.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, c.hwm.Load()
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), c.hwm.Load()
}

const hwmPeriod = 20 * time.Millisecond

// watchHWM reads the child's VmHWM every hwmPeriod until it exits.
func (c *child) watchHWM() {
	path := fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid)
	t := time.NewTicker(hwmPeriod)
	defer t.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			if v := vmHWM(b); v > c.hwm.Load() {
				c.hwm.Store(v)
			}
		}
		select {
		case <-c.done:
			return
		case <-t.C:
		}
	}
}

// vmHWM reads the VmHWM line of a /proc/PID/status ("VmHWM:\t  1234 kB"), in bytes; 0
// when there is none (a zombie has no memory left to count).
func vmHWM(status []byte) int64 {
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n * 1024
			}
		}
	}
	return 0
}

// tail keeps the last lines a child wrote.
type tail struct {
	mu    sync.Mutex
	lines []string
	part  []byte
}

const tailLines = 20

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.part = append(t.part, p...)
	for {
		i := strings.IndexByte(string(t.part), '\n')
		if i < 0 {
			break
		}
		t.add(string(t.part[:i]))
		t.part = t.part[i+1:]
	}
	t.mu.Unlock()
	return len(p), nil
}

func (t *tail) line(s string) {
	t.mu.Lock()
	t.add(s)
	t.mu.Unlock()
}

func (t *tail) add(s string) {
	if t.lines = append(t.lines, s); len(t.lines) > tailLines {
		t.lines = t.lines[1:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return "  (nothing)"
	}
	return "  " + strings.Join(t.lines, "\n  ")
}

// startUpstream starts this program again as the upstream (childEnv), on a loopback port
// of the kernel's choosing.
func startUpstream(ttft, itl time.Duration, cpus string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := command(cpus, []string{self, "-listen", "127.0.0.1:0", "-ttft", ttft.String(), "-itl", itl.String()})
	cmd.Env = append(os.Environ(), childEnv+"=1")
	return startChild("upstream", cmd, 10*time.Second)
}

// serveUpstream is the upstream process: internal/vllmtest's server, which streams like
// vLLM's /v1/completions with a fixed time to the first token and a fixed gap between
// tokens, each due at an absolute time from the request's arrival. It serves until
// SIGTERM or SIGINT.
func serveUpstream(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("recordbench upstream", stderr)
	addr := fs.String("listen", "127.0.0.1:0", "loopback address to serve on")
	ttft := fs.Duration("ttft", 20*time.Millisecond, "time to the first token")
	itl := fs.Duration("itl", 10*time.Millisecond, "gap between tokens")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: &vllmtest.Server{TTFT: *ttft, ITL: *itl}}
	fmt.Fprintf(stderr, "upstream: listening on %s\n", ln.Addr())
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// command runs argv, under `taskset -c cpus` when cpus is given: taskset execs argv, so
// the process's id, and with it its /proc figures, stay argv's.
func command(cpus string, argv []string) *exec.Cmd {
	if cpus != "" {
		argv = append([]string{"taskset", "-c", cpus}, argv...)
	}
	return exec.Command(argv[0], argv[1:]...)
}

// freePort returns a loopback address no one listens on at the moment (the proxy is given
// a port: the contract does not say it accepts port 0).
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
