package wire_test

import (
	"context"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/wire"
)

// TestCalibrateAgainstSim calibrates against the simulated engine, which counts text with
// cl100k_base and wraps chat messages in a ChatML template. The builder's prompts must come
// out exact: ratio 1, the template's overhead, no residual, through /tokenize and through
// usage probes alike.
func TestCalibrateAgainstSim(t *testing.T) {
	cfg, err := sim.Profile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tokenize.NewBuilder(enc, tokenize.BuilderOptions{Seed: 2026})
	if err != nil {
		t.Fatal(err)
	}
	// ChatML as the sim documents it: <|im_start|> user\n content <|im_end|> \n, then
	// <|im_start|> assistant\n.
	chatOverhead := float64(1 + enc.Count("user\n") + 1 + enc.Count("\n") + 1 + enc.Count("assistant\n"))
	for _, api := range []wire.API{wire.APICompletions, wire.APIChat} {
		for _, method := range []string{"", wire.MethodUsage} {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			cal, err := calibrate(ctx, probeOpts{
				BaseURL: srv.URL + "/v1", API: api, Model: cfg.Model, Builder: b, Method: method,
				HTTPClient: srv.Client(),
			})
			cancel()
			if err != nil {
				t.Fatalf("%s %q: %v", api, method, err)
			}
			t.Logf("%v (warnings %v)", cal, cal.Warnings)
			want := 0.0
			if api == wire.APIChat {
				want = chatOverhead
			}
			wantMethod := method
			if method == "" {
				wantMethod = wire.MethodTokenize
			}
			if cal.Method != wantMethod {
				t.Errorf("%s: method %s, want %s", api, cal.Method, wantMethod)
			}
			if math.Abs(cal.Ratio-1) > 1e-9 || math.Abs(cal.Overhead-want) > 1e-6 {
				t.Errorf("%s %s: overhead %.6f ratio %.9f, want %.0f and 1", api, cal.Method, cal.Overhead, cal.Ratio, want)
			}
			if cal.MaxAbsError != 0 {
				t.Errorf("%s %s: residual %d tokens on %+v", api, cal.Method, cal.MaxAbsError, cal.Check)
			}
			if cal.Method == wire.MethodTokenize && cal.MaxModelLen != cfg.MaxModelLen {
				t.Errorf("max_model_len %d, want %d", cal.MaxModelLen, cfg.MaxModelLen)
			}
		}
	}
}
