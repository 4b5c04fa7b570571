//go:build unix

// Package ollamatest starts a real inference engine for llmreplay's tests: Ollama, built by
// scripts/ollama from the Go module proxy, serving on loopback a tiny llama model that
// tinymodel (a module of its own in this folder) writes. The model is made so that what
// the engine does is known exactly (docs/engines.md): every builder word is one token, a
// prompt of n builder tokens is n+1 to the engine (BOS), and greedy decoding never stops
// before max_tokens and never repeats a token.
//
// A test calls Start; without $LLMREPLAY_OLLAMA (the binary's path; scripts/test sets it)
// the test is skipped, so the race-detector run of every package passes over the
// real-engine tests, and scripts/test runs them on their own. Under CI, a path that does
// not run fails the test instead.
package ollamatest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/tokenize"
)

// Model is the name the tiny model is created under; GET /v1/models lists it as
// "tiny:latest".
const Model = "tiny"

// Options shape one engine.
type Options struct {
	// Parallel is OLLAMA_NUM_PARALLEL: the sequences the engine decodes at once (its
	// slots); a request beyond them waits in Ollama's queue. Zero means 2.
	Parallel int
	// Context is OLLAMA_CONTEXT_LENGTH, each slot's context in tokens: a longer prompt is
	// truncated by Ollama, silently. Zero means 16384.
	Context int
	// Threads is the model's num_thread, the CPU threads of each decode step. Zero means
	// one: ggml's threads meet at a spinning barrier every step, and on a busy machine two
	// of them slowed the engine a hundredfold (closed loop, one request in flight: 7.05 req/s
	// alone, 0.08 with two CPU burners); one thread is also faster for this model (1,837
	// against 710 output tok/s). With two, the barrier's fixed cost a step is shared by the
	// sequences of a batch, as a GPU's launch costs are: TestOllamaLoad's knee.
	Threads int
	// Debug is OLLAMA_DEBUG: the runner logs its prompt cache's use of each request
	// (CacheLoads reads it), and much else.
	Debug bool
	// Template, when set, is the model's chat template instead of the messages' contents
	// end to end (a test of tools gives one that renders .Tools).
	Template string
}

// Server is one `ollama serve` on loopback with the tiny model created and loaded.
type Server struct {
	// BaseURL is the OpenAI-compatible base URL, http://127.0.0.1:PORT/v1.
	BaseURL string
	Options Options
	cmd     *exec.Cmd
	log     *syncBuffer
	done    chan struct{}
}

// Binary returns the path of the Ollama binary the tests use, $LLMREPLAY_OLLAMA, or "" when
// it is not set.
func Binary() string { return os.Getenv("LLMREPLAY_OLLAMA") }

// Start starts an engine for t and stops it when t ends. It skips t when
// $LLMREPLAY_OLLAMA is not set (scripts/ollama builds the binary and prints its path).
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("real-engine test: set LLMREPLAY_OLLAMA to an Ollama binary (LLMREPLAY_OLLAMA=$(scripts/ollama)); scripts/test does")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("LLMREPLAY_OLLAMA=%s: %v (scripts/ollama builds it)", bin, err)
	}
	if o.Parallel <= 0 {
		o.Parallel = 2
	}
	if o.Context == 0 {
		o.Context = 16384
	}
	if o.Threads == 0 {
		o.Threads = 1
	}
	gguf, err := tinyModel()
	if err != nil {
		t.Fatalf("the tiny model: %v", err)
	}
	s, err := start(bin, gguf, o, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("ollama serve's log (last 4 KiB):\n%s", tail(s.log.String(), 4096))
		}
	})
	return s
}

func start(bin, gguf string, o Options, dir string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	host := "127.0.0.1:" + strconv.Itoa(port)
	s := &Server{BaseURL: "http://" + host + "/v1", Options: o, log: &syncBuffer{}, done: make(chan struct{})}
	env := append(os.Environ(),
		"HOME="+dir,
		"OLLAMA_MODELS="+filepath.Join(dir, "models"),
		"OLLAMA_HOST="+host,
		"OLLAMA_NUM_PARALLEL="+strconv.Itoa(o.Parallel),
		"OLLAMA_CONTEXT_LENGTH="+strconv.Itoa(o.Context),
		"OLLAMA_MAX_LOADED_MODELS=1",
		"OLLAMA_KEEP_ALIVE=-1",
		"OLLAMA_NOPRUNE=1",
		// The queue must hold any test's load: a request beyond it gets 503 at once.
		"OLLAMA_MAX_QUEUE=4096",
	)
	if o.Debug {
		env = append(env, "OLLAMA_DEBUG=1")
	}
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env = env
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// Its own process group: Stop ends the runner subprocesses with it.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", bin, err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	fail := func(err error) (*Server, error) {
		s.Stop()
		return nil, fmt.Errorf("%w; ollama serve's log:\n%s", err, tail(s.log.String(), 4096))
	}
	if err := s.waitUp(30 * time.Second); err != nil {
		return fail(err)
	}
	mf := filepath.Join(dir, "Modelfile")
	// The template is the messages' contents, end to end: a chat's prompt is counted as
	// exactly its messages' text (plus BOS), as a completion's is.
	tmpl := o.Template
	if tmpl == "" {
		tmpl = "{{- range .Messages }}{{ .Content }}{{ end }}"
	}
	modelfile := "FROM " + gguf + "\nTEMPLATE \"\"\"" + tmpl + "\"\"\"\n" +
		"PARAMETER num_thread " + strconv.Itoa(o.Threads) + "\n"
	if err := os.WriteFile(mf, []byte(modelfile), 0o644); err != nil {
		return fail(err)
	}
	create := exec.Command(bin, "create", Model, "-f", mf)
	create.Env = env
	if out, err := create.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("ollama create: %v: %s", err, tail(string(out), 1024)))
	}
	// Load it now, so that a test's first request does not pay the load in its TTFT.
	if err := s.Complete(" the", 1); err != nil {
		return fail(fmt.Errorf("load the model: %w", err))
	}
	s.Completions(1) // its log line, so that a test's count starts after it
	return s, nil
}

// waitUp waits until the server answers GET /api/version.
func (s *Server) waitUp(d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("ollama serve exited: %v", s.cmd.ProcessState)
		default:
		}
		resp, err := http.Get(strings.TrimSuffix(s.BaseURL, "/v1") + "/api/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("ollama serve did not answer within %v", d)
}

// Complete sends one non-streaming completion of maxTokens tokens and checks it succeeded.
func (s *Server) Complete(prompt string, maxTokens int) error {
	body, _ := json.Marshal(map[string]any{"model": Model, "prompt": prompt, "max_tokens": maxTokens, "temperature": 0})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.BaseURL+"/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return fmt.Errorf("POST /v1/completions: %s: %s", resp.Status, tail(b.String(), 512))
	}
	return nil
}

// Stop ends the server and its runners, and waits for them.
func (s *Server) Stop() {
	if s.cmd.Process == nil {
		return
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// ginLine matches the access log line Ollama's HTTP server (gin) writes for each request:
// its status, the server-side duration and the route.
var ginLine = regexp.MustCompile(`\[GIN\] [0-9/]+ - [0-9:]+ \| (\d{3}) \|\s+([0-9.]+[a-zµ]+) \|\s+\S+ \| (\w+)\s+"([^"]+)"`)

// Request is one line of the server's access log.
type Request struct {
	Status   int
	Duration time.Duration // from the request's arrival to its response's end, as the server timed it
	Method   string
	Path     string
}

// Requests returns the requests the server's access log holds, in order: the engine's own
// timing of each, to check a client's end-to-end latency against.
func (s *Server) Requests() []Request {
	var out []Request
	for _, m := range ginLine.FindAllStringSubmatch(s.log.String(), -1) {
		st, _ := strconv.Atoi(m[1])
		d, err := time.ParseDuration(strings.Replace(m[2], "µ", "u", 1))
		if err != nil {
			continue
		}
		out = append(out, Request{Status: st, Duration: d, Method: m[3], Path: m[4]})
	}
	return out
}

// cacheLine matches the runner's debug line for a request's prompt cache: how many of the
// prompt's tokens it found in the slot's cache ("used") and must compute ("remaining").
var cacheLine = regexp.MustCompile(`msg="loading cache slot" id=\d+ cache=\d+ prompt=(\d+) used=(\d+) remaining=(\d+)`)

// CacheLoad is the runner's account of one request's prompt: its tokens, and how many of
// them the slot's cache already held.
type CacheLoad struct{ Prompt, Used int }

// CacheLoads returns the runner's prompt-cache use of each completion request so far, in
// order (Options.Debug must be set): the engine's own word on prefix caching.
func (s *Server) CacheLoads() []CacheLoad {
	var out []CacheLoad
	for _, m := range cacheLine.FindAllStringSubmatch(s.log.String(), -1) {
		p, _ := strconv.Atoi(m[1])
		u, _ := strconv.Atoi(m[2])
		out = append(out, CacheLoad{Prompt: p, Used: u})
	}
	return out
}

// Completions returns how many completion requests (POST .../completions, either API)
// the server's access log holds once it holds at least want of them, or after 10 s. Gin
// writes a request's line after its handler returns, which may be after the client has
// its answer (or has hung up); a little longer is waited for a late line beyond want.
func (s *Server) Completions(want int) int {
	count := func() int {
		n := 0
		for _, r := range s.Requests() {
			if r.Method == http.MethodPost && strings.HasSuffix(r.Path, "/completions") {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for count() < want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	return count()
}

var (
	modelOnce sync.Once
	modelPath string
	modelErr  error
)

// tinyModel returns the tiny model's GGUF, written by tinymodel's module (go run) over the
// builder's words into the user's cache, under a name that hashes both: a later test
// process reuses it, and a change of either writes a new one.
func tinyModel() (string, error) {
	modelOnce.Do(func() { modelPath, modelErr = writeTinyModel() })
	return modelPath, modelErr
}

func writeTinyModel() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot find the tinymodel source")
	}
	src := filepath.Join(filepath.Dir(file), "tinymodel")
	words := []byte(strings.Join(tokenize.Words(), "\n") + "\n")
	h := sha256.New()
	h.Write(words)
	for _, f := range []string{"main.go", "go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "llmreplay")
	out := filepath.Join(dir, fmt.Sprintf("tiny-%x.gguf", h.Sum(nil)[:8]))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	wf, err := os.CreateTemp(dir, "words-*.txt")
	if err != nil {
		return "", err
	}
	defer os.Remove(wf.Name())
	_, err = wf.Write(words)
	if cerr := wf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	// tinymodel writes out.tmp and renames it: two test processes writing at once agree.
	cmd := exec.Command("go", "run", ".", "-words", wf.Name(), "-o", out)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go run tinymodel: %v: %s", err, tail(string(b), 2048))
	}
	return out, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// syncBuffer is a bytes.Buffer the server's output and the test's reads share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
