package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"time"

	"github.com/spf13/pflag"

	"github.com/llmreplay/llmreplay/record"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/wire"
)

func init() {
	register(&command{
		name:    "record",
		summary: "stand in front of an endpoint as a proxy and record its traffic as a trace and production results",
		run:     runRecord,
	})
}

const recordExamples = `  # Record what clients send to a vLLM server on :8000 for an hour: point them at :8081
  llmreplay record --listen 127.0.0.1:8081 --upstream http://127.0.0.1:8000 -o rec/ --rotate 1h

  # Sessions named by the clients' own header, a tenth of them recorded
  llmreplay record --upstream http://10.0.0.5:8000 -o rec/ --session-header X-Session-Id --sample 0.1

  # No prefix blocks: the trace has no prefix_blocks, and prompts the server counts are
  # not tokenized (less CPU; a replay then cannot share prefixes as production did)
  llmreplay record --upstream http://127.0.0.1:8000 -o rec/ --block-tokens 0

  # Then: replay production's traffic against the next deployment, and compare
  # (--sessions dag: each conversation turn on its parent's context, as production's were;
  # --calibrate: the prompt lengths as the server counts them)
  llmreplay replay --trace rec/trace-0001.parquet --endpoint http://next:8000/v1 --sessions dag --calibrate -o next.parquet
  llmreplay compare rec/results-0001.parquet next.parquet`

type recordFlags struct {
	listen, upstream, out, sessionHeader, encoding string
	relay                                          string
	rotate, drain, sessionIdle, progress           time.Duration
	sample                                         float64
	blockTokens, workers, queue, cacheTokens       int
	maxBody                                        int64
}

func runRecord(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := recordFlags{listen: "127.0.0.1:8081", encoding: tokenize.CL100kBase, sample: 1, blockTokens: 64,
		drain: 30 * time.Second, sessionIdle: time.Hour, progress: 10 * time.Second, maxBody: 64 << 20, cacheTokens: 4 << 20, relay: "raw"}
	fs := newFlagSet("record", "llmreplay record --upstream URL -o FOLDER [flags]", recordExamples, stdout)
	fs.StringVar(&f.listen, "listen", f.listen, "address to listen on; loopback unless told otherwise (an address others can reach lets them reach the upstream through it)")
	fs.StringVar(&f.upstream, "upstream", f.upstream, "the one endpoint every request is forwarded to (http or https URL, without /v1: paths pass as the clients send them)")
	fs.StringVarP(&f.out, "output", "o", f.out, "folder for trace-NNNN.parquet and results-NNNN.parquet (created; must hold no recording)")
	fs.DurationVar(&f.rotate, "rotate", f.rotate, "start new files every this long of the recording, by arrival (e.g. 1h); 0: one pair of files")
	fs.Float64Var(&f.sample, "sample", f.sample, "share of sessions recorded, in (0, 1]: each session whole or not at all")
	fs.StringVar(&f.sessionHeader, "session-header", f.sessionHeader, "request header that names a session (e.g. X-Session-Id); without it, sessions come from the body's user field, or from a request extending an earlier one's messages")
	fs.StringVar(&f.encoding, "encoding", f.encoding, "tokenizer for prompt tokens the server does not report, and for the prefix blocks (cl100k_base or o200k_base)")
	fs.IntVar(&f.blockTokens, "block-tokens", f.blockTokens, "tokens per prefix block of the trace's prefix_blocks (16 matches vLLM's and SGLang's cache blocks; larger keeps the trace smaller for long contexts); 0: no prefix_blocks, and a prompt the server's usage counted is not tokenized (the recorder's largest CPU cost)")
	fs.DurationVar(&f.drain, "drain", f.drain, "on stop, how long requests in flight may take to finish before they are cut (recorded as canceled)")
	fs.DurationVar(&f.sessionIdle, "session-idle", f.sessionIdle, "a session unseen for this long is forgotten (a request continuing it later starts a new one)")
	fs.Int64Var(&f.maxBody, "max-body", f.maxBody, "largest request body recorded, in bytes; larger ones pass unrecorded")
	fs.IntVar(&f.workers, "workers", f.workers, "request parsers (tokenizing, hashing); 0: one per CPU")
	fs.IntVar(&f.queue, "queue", f.queue, "finished requests waiting for a parser; when full, a request passes unrecorded (counted); 0: 65536")
	fs.IntVar(&f.cacheTokens, "cache-tokens", f.cacheTokens, "tokens of messages kept tokenized, so an agent's growing context is tokenized once")
	fs.StringVar(&f.relay, "relay", f.relay, "how requests are relayed: raw (a hand-written HTTP/1.1 relay, one goroutine per connection, for GETs and POSTs in plain form; any other request's connection is handed to net/http's ReverseProxy) or nethttp (ReverseProxy for every request)")
	fs.DurationVar(&f.progress, "progress", f.progress, "print counts every this long; 0: never")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("record: unexpected argument %q", fs.Arg(0))
	}
	up, err := recordUpstream(f.upstream)
	if err != nil {
		return err
	}
	if f.relay != "nethttp" && f.relay != "raw" {
		return usagef("record: --relay %q: give nethttp or raw", f.relay)
	}
	if f.out == "" {
		return usagef("record: -o FOLDER is required")
	}
	if f.blockTokens < 0 {
		return usagef("record: --block-tokens %d is negative: give the tokens per prefix block, or 0 for none", f.blockTokens)
	}
	if f.sample <= 0 || f.sample > 1 {
		return usagef("record: --sample %v is not in (0, 1]", f.sample)
	}
	enc, err := tokenize.Get(f.encoding)
	if err != nil {
		return usagef("record: --encoding: %v", err)
	}
	if err := os.MkdirAll(f.out, 0o755); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if err := record.CheckDir(f.out); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("record: --listen: %w", err)
	}
	rec, err := record.NewRecorder(record.Options{
		Dir: f.out, Upstream: up, Rotate: f.rotate, Sample: f.sample, SessionHeader: f.sessionHeader,
		Encoding: enc, BlockTokens: f.blockTokens, CacheTokens: f.cacheTokens, Workers: f.workers, Queue: f.queue,
		SessionIdle: f.sessionIdle, ToolVersion: version, Flags: flagMap(fs), Log: stderr,
	})
	if err != nil {
		ln.Close()
		return err
	}
	var srv proxyServer = &http.Server{Handler: record.NewProxy(up, rec, record.ProxyOptions{MaxBody: f.maxBody}), ReadHeaderTimeout: time.Minute}
	if f.relay == "raw" {
		srv = record.NewRelay(up, rec, record.RelayOptions{ProxyOptions: record.ProxyOptions{MaxBody: f.maxBody}})
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if !isLoopback(ln.Addr()) {
		fmt.Fprintf(stderr, "record: warning: %s is not a loopback address: whoever reaches it reaches %s through it\n", ln.Addr(), wire.SafeEndpoint(up))
	}
	fmt.Fprintf(stderr, "record: listening on %s, forwarding to %s\n", ln.Addr(), wire.SafeEndpoint(up))
	serr := waitRecording(ctx, rec, served, f.progress, stderr)
	shutdown(ctx, srv, f.drain, stderr)
	counts, files, cerr := rec.Close()
	printRecordSummary(stderr, counts, files)
	return errors.Join(serr, cerr)
}

// proxyServer is the recording proxy's server: net/http's, or the raw relay.
type proxyServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// recordUpstream checks --upstream: an absolute http or https URL.
func recordUpstream(s string) (*url.URL, error) {
	if s == "" {
		return nil, usagef("record: --upstream URL is required")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("record: --upstream %s is not an http or https URL with a host", wire.SafeURL(s))
	}
	return u, nil
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// waitRecording waits for the stop (or the server's failure), printing counts every
// progress.
func waitRecording(ctx context.Context, rec *record.Recorder, served <-chan error, progress time.Duration, w io.Writer) error {
	var tick <-chan time.Time
	if progress > 0 {
		t := time.NewTicker(progress)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-served:
			return fmt.Errorf("record: serve: %w", err)
		case <-tick:
			c := rec.Counts()
			fmt.Fprintf(w, "record: %d requests, %d recorded, %d passed unrecorded\n", c.Requests, c.Recorded, c.Passed+c.Dropped)
		}
	}
}

// shutdown stops accepting, gives the requests in flight --drain (less if a second
// signal comes), then cuts what remains.
func shutdown(ctx context.Context, srv proxyServer, drain time.Duration, w io.Writer) {
	sctx, cancel := context.WithTimeout(replay.HardContext(ctx), drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Fprintf(w, "record: requests still in flight after --drain %v are cut\n", drain)
		srv.Close()
	}
}

func printRecordSummary(w io.Writer, c record.Counts, files []string) {
	fmt.Fprintf(w, "record: %d requests, %d recorded", c.Requests, c.Recorded)
	if c.SampledOut > 0 {
		fmt.Fprintf(w, ", %d in sessions --sample left out", c.SampledOut)
	}
	if c.Dropped > 0 {
		fmt.Fprintf(w, ", %d not recorded because the recorder fell behind (raise --workers or --queue)", c.Dropped)
	}
	reasons := make([]string, 0, len(c.Skipped))
	for k := range c.Skipped {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	for _, k := range reasons {
		fmt.Fprintf(w, ", %d not recorded: %s", c.Skipped[k], k)
	}
	if c.Passed > 0 {
		fmt.Fprintf(w, "; %d requests to other paths passed unrecorded", c.Passed)
	}
	fmt.Fprintln(w)
	for _, f := range files {
		fmt.Fprintf(w, "record: wrote %s\n", f)
	}
}

// flagMap is every flag as given or defaulted, for the run metadata; the upstream in its
// safe form (no password, no query).
func flagMap(fs *pflag.FlagSet) map[string]string {
	m := map[string]string{}
	fs.VisitAll(func(fl *pflag.Flag) {
		switch fl.Name {
		case "help", "progress":
		case "upstream":
			m[fl.Name] = wire.SafeURL(fl.Value.String())
		default:
			m[fl.Name] = fl.Value.String()
		}
	})
	return m
}
