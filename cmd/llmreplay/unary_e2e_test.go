package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/sim"
)

// TestE2EEmbeddingsAndRerankAgainstSim replays a trace of 512-token rows as embeddings
// (one input, and four) and as rerank (a query and four documents) against the simulated
// engine's embedding profile, on both HTTP clients: every request ok with the inputs it
// sent; the engine's usage is the tokens sent (embeddings: every input's, as cl100k counts
// them; rerank: the query with each document, vLLM's reading); and no request's latency
// is below the engine's model of it alone (the requests are 200 ms apart, the model's
// latency a few ms: none waits for another). With LLMREPLAY_E2E=1 (scripts/test's
// real-time pass, alone on the cores) each is also at most 25 ms above it, the HTTP and
// scheduling overhead the generation tests allow.
func TestE2EEmbeddingsAndRerankAgainstSim(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.parquet")
	if msg, err := runArgs(t, "trace", "synth", "--arrival", "constant", "--rate", "5", "--count", "8",
		"--prompt-tokens", "fixed:512", "--output-tokens", "fixed:1", "--seed", "4", "-o", tr); err != nil {
		t.Fatalf("synth: %v %s", err, msg)
	}
	cfg, err := sim.Profile("embed-0.6b-1gpu")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sim.Start(context.Background(), "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	alone := cfg.PoolPrefillTime(512)
	clients := []string{transport.HTTPClientNetHTTP}
	if autoClient() == transport.HTTPClientRaw {
		clients = append(clients, transport.HTTPClientRaw)
	}
	for _, c := range []struct {
		api    string
		inputs int32
	}{{"embeddings", 1}, {"embeddings", 4}, {"rerank", 4}} {
		for _, client := range clients {
			name := fmt.Sprintf("%s-%d-%s", c.api, c.inputs, strings.ReplaceAll(client, "/", ""))
			t.Run(name, func(t *testing.T) {
				out := filepath.Join(dir, name+".parquet")
				if msg, err := runArgs(t, "replay", "--trace", tr, "--endpoint", srv.BaseURL(), "--api", c.api, "--inputs", fmt.Sprint(c.inputs),
					"--http-client", client, "--scrape", "none", "-q", "-o", out); err != nil {
					t.Fatalf("replay: %v %s", err, msg)
				}
				recs, _, err := results.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) != 8 {
					t.Fatalf("%d records, want 8", len(recs))
				}
				for _, r := range recs {
					want := r.PromptTokens
					if c.api == "rerank" {
						want += (c.inputs - 1) * replay.DefaultQueryTokens // the query goes with every document
					}
					if r.Status != results.StatusOK || r.Inputs != c.inputs || r.PromptTokensServer != want || r.FirstTokenNS != results.Null || len(r.ChunkNS) != 0 {
						t.Errorf("request %d: %s %q, inputs %d, the engine counted %d (want %d), first token %d, %d chunks",
							r.RequestID, r.Status, r.Error, r.Inputs, r.PromptTokensServer, want, r.FirstTokenNS, len(r.ChunkNS))
					}
					if c.api != "embeddings" || c.inputs != 1 {
						continue
					}
					lat := time.Duration(r.EndNS - r.SentNS)
					if lat < alone {
						t.Errorf("request %d: latency %v, below the engine's model of it alone, %v", r.RequestID, lat, alone)
					}
					if os.Getenv("LLMREPLAY_E2E") != "" && lat > alone+25*time.Millisecond {
						t.Errorf("request %d: latency %v, more than 25 ms above the engine's model, %v", r.RequestID, lat, alone)
					}
				}
			})
		}
	}
}

// TestE2ESweepAutoFindsEmbeddingsCapacity runs `sweep --auto` of an embeddings trace
// against the simulated engine's pooling engine shaped so that its saturated rate is a
// rate this client reaches without strain: at most 2 inputs of 256 tokens run in a step of
// 10 ms + 20 µs a token, so the engine completes at most Info.Pooling.MaxInputsPerSec
// (about 100) inputs a second whatever the load. The sweep must bracket the knee at the
// endpoint, with the requests/s sustained at its passing load within 10% of that capacity.
//
// Real time (about 20 s: points of 3 s from 60 requests/s), it runs only with
// LLMREPLAY_E2E=1.
func TestE2ESweepAutoFindsEmbeddingsCapacity(t *testing.T) {
	if os.Getenv("LLMREPLAY_E2E") == "" {
		t.Skip("real-time end-to-end test: set LLMREPLAY_E2E=1 (scripts/test does)")
	}
	cfg, err := sim.Profile("embed-0.6b-1gpu")
	if err != nil {
		t.Fatal(err)
	}
	cfg.StepBase, cfg.PrefillPerToken, cfg.PoolMaxBatch, cfg.RefContextTokens = 10*time.Millisecond, 20*time.Microsecond, 2, 256
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	running, err := sim.Start(ctx, "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	capacity := running.Info().Pooling.MaxInputsPerSec
	dir := t.TempDir()
	tr := filepath.Join(dir, "steady.parquet")
	if msg, err := runArgs(t, "trace", "synth", "--arrival", "constant", "--rate", "50", "--count", "3000",
		"--prompt-tokens", "fixed:256", "--output-tokens", "fixed:1", "--seed", "5", "-o", tr); err != nil {
		t.Fatalf("synth: %v %s", err, msg)
	}
	var stdout bytes.Buffer
	args := []string{"--trace", tr, "--endpoint", running.BaseURL(), "--api", "embeddings", "--quiet",
		"--auto", "--auto-axis", "rate", "--start", "60", "--max", "400", "--resolution", "0.1",
		"--duration", "3s", "--cooldown", "0s", "--max-lateness", "500ms", "--json", "-o", filepath.Join(dir, "sweep")}
	if err := runSweep(ctx, args, &stdout, io.Discard); err != nil {
		t.Fatalf("sweep: %v\n%s", err, stdout.String())
	}
	var got struct {
		Saturation struct {
			Found, Bracketed bool
			PassLoad         float64 `json:"pass_load"`
			LimitedBy        string  `json:"limited_by"`
		} `json:"saturation"`
		Points []struct {
			Load      float64 `json:"load"`
			Sustained float64 `json:"sustained_requests_per_s"`
		} `json:"points"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("sweep --json: %v\n%s", err, stdout.String())
	}
	t.Logf("capacity %.1f inputs/s; sweep: %s", capacity, stdout.String())
	s := got.Saturation
	if !s.Found || !s.Bracketed || s.LimitedBy != "endpoint" {
		t.Fatalf("saturation %+v: want a bracket found at the endpoint", s)
	}
	var atPass float64
	for _, p := range got.Points {
		if p.Load == s.PassLoad {
			atPass = p.Sustained
		}
	}
	if math.Abs(atPass-capacity)/capacity > 0.10 {
		t.Errorf("sustained %.1f requests/s at the saturation load %.2f; the engine's capacity is %.1f inputs/s: more than 10%% apart", atPass, s.PassLoad, capacity)
	}
}
