// Command agentbench is bench/agents-memory.sh's helper: it writes an agent trace of long
// contexts (-trace), or serves as a loopback endpoint that reads every body and answers
// each chat request at once with a short stream (-serve), so that the replayer's memory,
// not an engine's, is what the script measures.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/trace"
)

func main() {
	path := flag.String("trace", "", "write an agent trace to `PATH`")
	sessions := flag.Int("sessions", 1000, "agent sessions, started over -ramp")
	ramp := flag.Duration("ramp", 2*time.Second, "the sessions' first calls spread over this span")
	calls := flag.Int("calls", 4, "calls per session, a chain")
	first := flag.Int("first", 96000, "the first call's prompt tokens")
	add := flag.Int("add", 1000, "tokens each later call appends (tool output)")
	out := flag.Int("out", 200, "output tokens per call")
	gap := flag.Duration("gap", 10*time.Second, "tool time between a call's end and the next")
	serve := flag.String("serve", "", "serve the sink on loopback `ADDR` (127.0.0.1:PORT) and print its URL")
	flag.Parse()
	switch {
	case *path != "":
		if err := writeTrace(*path, *sessions, *calls, *first, *add, *out, *ramp, *gap); err != nil {
			log.Fatal(err)
		}
	case *serve != "":
		if !strings.HasPrefix(*serve, "127.0.0.1:") && !strings.HasPrefix(*serve, "[::1]:") {
			log.Fatal("agentbench: -serve listens on loopback only (127.0.0.1:PORT)")
		}
		sink(*serve)
	default:
		flag.Usage()
		os.Exit(2)
	}
}

func writeTrace(path string, sessions, calls, first, add, out int, ramp, gap time.Duration) error {
	w, err := trace.Create(path, trace.Meta{Source: "agentbench"})
	if err != nil {
		return err
	}
	// Rows in arrival order: call k of every session after call k-1 of all of them (the
	// recorded arrival of call k is the session's start + k·(gap+1s); sessions start within
	// ramp, which is shorter than gap+1s).
	for k := range calls {
		for s := range sessions {
			id := int64(k*sessions + s)
			c := trace.NewCall()
			c.Duration = time.Second
			at := time.Duration(s)*ramp/time.Duration(sessions) + time.Duration(k)*(gap+time.Second)
			if k > 0 {
				c.Parents, c.Gap, c.GapKind = []int64{id - int64(sessions)}, gap, trace.GapTool
			}
			r := trace.Request{ID: id, Arrival: at, PromptTokens: int32(first + k*(out+add)), OutputTokens: int32(out),
				SessionID: int64(s), HasSession: true, Call: c}
			if err := w.Write(r); err != nil {
				w.Abort()
				return err
			}
		}
	}
	return w.Close()
}

// sink answers every chat request with max_tokens one-word chunks at once and the usage.
func sink(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("http://%s/v1\n", ln.Addr())
	os.Stdout.Sync()
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"sink","object":"model"}]}`)
	})
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		n := 16
		br := bufio.NewReaderSize(r.Body, 64<<10)
		// max_tokens comes before the messages in llmreplay's bodies: read it from the head.
		head, _ := br.Peek(512)
		if i := strings.Index(string(head), `"max_tokens":`); i >= 0 {
			rest := string(head[i+len(`"max_tokens":`):])
			if j := strings.IndexAny(rest, ",}"); j > 0 {
				n, _ = strconv.Atoi(rest[:j])
			}
		}
		io.Copy(io.Discard, br)
		w.Header().Set("Content-Type", "text/event-stream")
		bw := bufio.NewWriter(w)
		for range n {
			bw.WriteString(`data: {"choices":[{"index":0,"delta":{"content":" word"}}]}` + "\n\n")
		}
		fmt.Fprintf(bw, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", n)
		bw.Flush()
	})
	log.Fatal(http.Serve(ln, mux))
}
