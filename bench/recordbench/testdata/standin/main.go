// Command standin stands in for `llmreplay record` in recordbench's tests, so that the
// harness runs before the real proxy exists and without building it: it takes the same
// command line (record --listen ADDR --upstream URL -o FOLDER), prints the same listening
// line once it accepts connections and stops on SIGTERM, but records nothing. It forwards
// with net/http/httputil.ReverseProxy, flushing each write as it passes (a stream's chunks
// are not held). --fail-every N answers every Nth request 502 without forwarding it, so a
// test sees the harness fail when a proxy loses requests (the replayer's preflight
// request, which must pass for a run to start, is never one of them). --relay copies the
// bytes both ways between each client connection and a connection of its own to the
// upstream, parsing nothing: the floor of any proxy in user space (its reads, writes and
// wake-ups), against which the cost of HTTP and of recording is measured.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "record" {
		fmt.Fprintln(os.Stderr, "usage: standin record --listen ADDR --upstream URL -o FOLDER [--fail-every N]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("record", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	upstream := fs.String("upstream", "", "upstream URL")
	fs.String("o", "", "recording folder (unused: the stand-in records nothing)")
	failEvery := fs.Int64("fail-every", 0, "answer every Nth request 502 without forwarding it (0: none)")
	relay := fs.Bool("relay", false, "copy bytes between each client connection and one to the upstream, no HTTP")
	fs.Parse(os.Args[2:])
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		fmt.Fprintf(os.Stderr, "standin: --upstream %q: want http://HOST:PORT\n", *upstream)
		os.Exit(2)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	// Keep a connection to the upstream for each stream in flight, as a proxy in front of
	// production must: the default of 2 idle ones would open one per request.
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}
	var n atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The replayer's preflight request always passes: a run refuses to start when it
		// fails, and the losses are meant to fall on the trace's requests.
		if r.Method == http.MethodPost && *failEvery > 0 && r.Header.Get("X-Request-Id") != "llmreplay-preflight" && n.Add(1)%*failEvery == 0 {
			http.Error(w, `{"error":{"message":"standin: dropped"}}`, http.StatusBadGateway)
			return
		}
		rp.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(1)
	}
	if *relay {
		serveRelay(ln, u.Host)
		return
	}
	srv := &http.Server{Handler: h}
	fmt.Fprintf(os.Stderr, "record: listening on %s, forwarding to %s\n", ln.Addr(), u)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(1)
	}
}

// serveRelay relays each connection ln accepts to upstream (HOST:PORT) until SIGTERM.
func serveRelay(ln net.Listener, upstream string) {
	fmt.Fprintf(os.Stderr, "record: listening on %s, relaying to %s\n", ln.Addr(), upstream)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed at SIGTERM
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				return
			}
			defer u.Close()
			go func() {
				io.Copy(u, c)
				u.(*net.TCPConn).CloseWrite() // the client's end of the request stream
			}()
			io.Copy(c, u)
		}()
	}
}
