package sim

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/cputime"
)

// streamBody is a completions request for n tokens with a 16-token token-id prompt.
func streamBody(n int) []byte {
	return []byte(fmt.Sprintf(`{"prompt":[%s],"max_tokens":%d,"ignore_eos":true,"stream":true}`,
		strings.TrimSuffix(strings.Repeat("791,", 16), ","), n))
}

// BenchmarkStream1000 measures the streamed tokens per second the sim serves to 1,000
// concurrent streams on this machine, client included (both share the CPU, as they do
// when the replayer runs the sim in-process). One op is one token.
//
//   - paced-10ms: a step every 10 ms of real time, so 1,000 streams are offered 100k tok/s
//     and each token goes out as its own chunk write while the sim keeps up.
//   - unpaced: the engine runs flat out (time scale 1e6); handlers write whatever tokens
//     have accumulated in one write, so this is the sim's ceiling.
//
// The raw client speaks HTTP/1.1 over TCP and only counts events, so the figure is the
// sim's; the nethttp variant uses net/http's client for comparison.
func BenchmarkStream1000(b *testing.B) {
	for _, bc := range []struct {
		name  string
		step  time.Duration
		scale float64
		raw   bool
	}{
		{"paced-10ms/raw", 10 * time.Millisecond, 1, true},
		{"unpaced/raw", time.Millisecond, MaxTimeScale, true},
		{"paced-10ms/nethttp", 10 * time.Millisecond, 1, false},
		{"unpaced/nethttp", time.Millisecond, MaxTimeScale, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg, _ := Profile("tiny")
			cfg.StepBase, cfg.PrefillPerToken, cfg.DecodePerSeq, cfg.ContextPerToken = bc.step, 0, 0, 0
			cfg.MaxBatch, cfg.MaxBatchedTokens, cfg.KVCacheTokens = 1024, 1<<16, 1<<22
			cfg.TimeScale = bc.scale
			benchStreams(b, cfg, 1000, 100, bc.raw)
		})
	}
}

// rawStream sends one streaming request on conn and counts its SSE events, reading until
// the chunked body's terminator.
func rawStream(conn net.Conn, br *bufio.Reader, req []byte, buf []byte) (events int, err error) {
	if _, err := conn.Write(req); err != nil {
		return 0, err
	}
	// Status line and headers.
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			break
		}
	}
	var prev byte
	var tail uint64 // last 5 bytes, for the "0\r\n\r\n" terminator
	const term = uint64('0')<<32 | uint64('\r')<<24 | uint64('\n')<<16 | uint64('\r')<<8 | uint64('\n')
	for {
		n, err := br.Read(buf)
		for _, ch := range buf[:n] {
			if ch == '\n' && prev == '\n' {
				events++
			}
			prev = ch
			tail = (tail<<8 | uint64(ch)) & (1<<40 - 1)
		}
		if tail == term && prev == '\n' {
			return events, nil
		}
		if err != nil {
			return events, err
		}
	}
}

// BenchmarkFixedStreams measures the fixed profile's CPU per streamed token (tok/cpu-s,
// client included) with 300 concurrent streams of 500 tokens at an ITL of 5 ms (60k tok/s
// offered, 300 000 tokens a round), written by the precise writer or by the handlers'
// goroutines (the path every stream takes off Linux, and the one the precise writer
// replaced: the pair says what it saves). Run it with -benchtime 300000x or more: the
// connections' setup is inside the figure.
func BenchmarkFixedStreams(b *testing.B) {
	for _, path := range []string{"precise", "goroutine"} {
		b.Run(path, func(b *testing.B) {
			cfg, _ := Profile("fixed")
			cfg.FixedTTFT, cfg.FixedITL = 5*time.Millisecond, 5*time.Millisecond
			r := startSim(b, cfg)
			r.srv.noPrecise.Store(path == "goroutine")
			benchStreamsOn(b, r, 300, 500, true)
		})
	}
}

func benchStreams(b *testing.B, cfg Config, streams, perReq int, raw bool) {
	benchStreamsOn(b, startSim(b, cfg), streams, perReq, raw)
}

func benchStreamsOn(b *testing.B, r *Running, streams, perReq int, raw bool) {
	url := r.BaseURL() + "/completions"
	body := streamBody(perReq)
	rawReq := []byte(fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		r.Addr(), len(body), body))
	tr := &http.Transport{MaxIdleConnsPerHost: streams, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	var launched, got atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cputime.Process()
	start := time.Now()
	for range streams {
		wg.Go(func() {
			buf := make([]byte, 32<<10)
			var conn net.Conn
			var br *bufio.Reader
			if raw {
				var err error
				if conn, err = net.Dial("tcp", r.Addr().String()); err != nil {
					failed.Store(err)
					return
				}
				defer conn.Close()
				br = bufio.NewReaderSize(conn, 32<<10)
			}
			for launched.Add(int64(perReq)) <= int64(b.N)+int64(perReq)-1 {
				var events int
				if raw {
					var err error
					if events, err = rawStream(conn, br, rawReq, buf); err != nil {
						failed.Store(err)
						return
					}
				} else {
					resp, err := c.Post(url, "application/json", bytes.NewReader(body))
					if err != nil {
						failed.Store(err)
						return
					}
					var prev byte
					for {
						n, err := resp.Body.Read(buf)
						for _, ch := range buf[:n] {
							if ch == '\n' && prev == '\n' {
								events++
							}
							prev = ch
						}
						if err == io.EOF {
							break
						}
						if err != nil {
							failed.Store(err)
							resp.Body.Close()
							return
						}
					}
					resp.Body.Close()
				}
				if events != perReq+1 {
					failed.Store(fmt.Errorf("%d events, want %d tokens + [DONE]", events, perReq))
					return
				}
				got.Add(int64(perReq))
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	cpu := cputime.Process() - cpu0
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(got.Load())/el.Seconds(), "tok/s")
	// Tokens per CPU-second of this process (sim and client together): what the sim
	// would serve with the CPU to itself, independent of other load on a shared machine.
	b.ReportMetric(float64(got.Load())/cpu.Seconds(), "tok/cpu-s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkFixedAccuracy measures how exactly the fixed profile's TTFT and ITL reach a
// plain net/http client on loopback (16 concurrent streams of 20 tokens, TTFT 20 ms,
// ITL 5 ms): median signed error and p99 absolute error, in microseconds. The error
// includes the client's own read path and the OS scheduler, so it bounds the sim's error
// from above; sim_*_write_err is the sim's own lateness at its write, by the same stats.
// Each runs with the precise writer and with the goroutine path.
func BenchmarkFixedAccuracy(b *testing.B) {
	for _, path := range []string{"precise", "goroutine"} {
		b.Run(path, func(b *testing.B) { benchFixedAccuracy(b, path == "goroutine") })
	}
}

func benchFixedAccuracy(b *testing.B, goroutine bool) {
	cfg, _ := Profile("fixed")
	cfg.FixedTTFT, cfg.FixedITL = 20*time.Millisecond, 5*time.Millisecond
	r := startSim(b, cfg)
	r.srv.noPrecise.Store(goroutine)
	r.Server().lateness = &latenessLog{}
	url := r.BaseURL() + "/completions"
	const streams, perReq = 16, 20
	body := streamBody(perReq)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	var mu sync.Mutex
	var ttftErr, itlErr []float64
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range streams {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(body))
				sent := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				br := bufio.NewReader(resp.Body)
				var stamps []time.Time
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						break
					}
					if bytes.HasPrefix(line, []byte("data: {")) {
						stamps = append(stamps, time.Now())
					}
				}
				resp.Body.Close()
				if len(stamps) != perReq {
					b.Errorf("%d chunks", len(stamps))
					return
				}
				mu.Lock()
				ttftErr = append(ttftErr, float64(stamps[0].Sub(sent)-cfg.FixedTTFT)/1e3)
				for i := 1; i < len(stamps); i++ {
					itlErr = append(itlErr, float64(stamps[i].Sub(stamps[i-1])-cfg.FixedITL)/1e3)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	us := func(d []time.Duration) []float64 {
		x := make([]float64, len(d))
		for i, v := range d {
			x[i] = float64(v) / 1e3
		}
		return x
	}
	report := func(name string, x []float64) {
		sort.Float64s(x)
		abs := make([]float64, len(x))
		for i, v := range x {
			abs[i] = math.Abs(v)
		}
		sort.Float64s(abs)
		q := func(s []float64, p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))] }
		b.ReportMetric(q(x, 0.5), name+"_err_p50_us")
		b.ReportMetric(q(abs, 0.99), name+"_abserr_p99_us")
	}
	report("ttft", ttftErr)
	report("itl", itlErr)
	// The sim's own share: how late the handler wrote each token batch.
	report("sim_first_write", us(r.Server().lateness.first))
	report("sim_write", us(r.Server().lateness.rest))
}
