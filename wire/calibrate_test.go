package wire_test

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/wire"
)

// Calibration end to end: the wire's probes count, tokenize fits. These tests drive both
// against fake engines of every /tokenize shape, as replay.Calibrate does.

// probeOpts are a calibration's settings, as these tests vary them.
type probeOpts struct {
	BaseURL      string
	API          wire.API
	Model        string
	Header       http.Header
	Method       string
	HTTPClient   *http.Client
	Builder      *tokenize.Builder
	FitLengths   []int
	CheckLengths []int
}

// calibrate counts with a wire.Prober and fits with tokenize.Calibrate.
func calibrate(ctx context.Context, o probeOpts) (tokenize.Calibration, error) {
	methods, err := wire.ProbeMethods(o.API, o.Method)
	if err != nil {
		return tokenize.Calibration{}, err
	}
	base, err := wire.BaseURL(o.BaseURL)
	if err != nil {
		return tokenize.Calibration{}, err
	}
	h := o.Header.Clone()
	if base.User != nil {
		// As replay.Calibrate: credentials in the URL go as a header, never in a URL.
		pw, _ := base.User.Password()
		r := http.Request{Header: http.Header{}}
		r.SetBasicAuth(base.User.Username(), pw)
		if h == nil {
			h = http.Header{}
		}
		h.Set("Authorization", r.Header.Get("Authorization"))
		base.User = nil
	}
	p := &wire.Prober{Base: base, API: o.API, Model: o.Model, Header: h, Client: o.HTTPClient}
	return tokenize.Calibrate(ctx, tokenize.CalibrateOptions{API: string(o.API), Methods: methods, Count: p.Count,
		Builder: o.Builder, FitLengths: o.FitLengths, CheckLengths: o.CheckLengths})
}

func testBuilder(t testing.TB, name string, opts tokenize.BuilderOptions) *tokenize.Builder {
	t.Helper()
	enc, err := tokenize.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tokenize.NewBuilder(enc, opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustPrompt(t testing.TB, b *tokenize.Builder, p tokenize.PromptSpec) string {
	t.Helper()
	s, err := b.AppendPrompt(nil, p)
	if err != nil {
		t.Fatal(err)
	}
	return string(s)
}

const secretKey = "sk-test-5ecret-never-print-me"

// fakeTokenizer counts text the way a different model might: every word is one token except
// about 1 in 10 (chosen by a hash of the word), which are two, so the builder's prompts come
// out near +10%; completions add a BOS token and chat adds a 12-token template.
type fakeServer struct {
	shape    string // "vllm", "llamacpp" or "none" (no /tokenize)
	linear   bool   // count ceil(1.1 x words) instead of hashing words
	template int
	bos      int
	echoAuth bool // answer every request with an error that quotes the Authorization header
	t        *testing.T
	probes   int
}

func (f *fakeServer) count(text string, chat bool) int {
	words := strings.Fields(text)
	n := f.bos
	if chat {
		n += f.template
	}
	if f.linear {
		return n + int(math.Ceil(1.1*float64(len(words))))
	}
	for _, w := range words {
		h := fnv.New32a()
		h.Write([]byte(w))
		n++
		if h.Sum32()%10 == 0 {
			n++
		}
	}
	return n
}

type fakeReq struct {
	Model    string  `json:"model"`
	Prompt   *string `json:"prompt"`
	Content  *string `json:"content"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens       int     `json:"max_tokens"`
	Input           *string `json:"input"`
	MaxOutputTokens int     `json:"max_output_tokens"`
	Store           *bool   `json:"store"`
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.probes++
	if r.Header.Get("Authorization") != "Bearer "+secretKey {
		http.Error(w, `{"error":"no key"}`, http.StatusUnauthorized)
		return
	}
	if f.echoAuth {
		http.Error(w, `{"error":"bad key `+r.Header.Get("Authorization")+`"}`, http.StatusForbidden)
		return
	}
	var req fakeReq
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	text := func() (string, bool) {
		if req.Messages != nil {
			return req.Messages[0].Content, true
		}
		if req.Prompt != nil {
			return *req.Prompt, false
		}
		return "", false
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/tokenize":
		switch f.shape {
		case "vllm":
			s, chat := text()
			n := f.count(s, chat)
			toks := make([]int, n)
			json.NewEncoder(w).Encode(map[string]any{"count": n, "tokens": toks, "max_model_len": 32768})
		case "llamacpp":
			// llama.cpp answers a body without "content" with no tokens at all.
			n := 0
			if req.Content != nil {
				n = f.count(*req.Content, false)
			}
			toks := make([]int, n)
			json.NewEncoder(w).Encode(map[string]any{"tokens": toks})
		default:
			http.NotFound(w, r)
		}
	case "/v1/completions", "/v1/chat/completions":
		if req.MaxTokens != 1 || req.Model != "m" {
			http.Error(w, "probe must ask for one token of model m", http.StatusBadRequest)
			return
		}
		s, chat := text()
		if chat != (r.URL.Path == "/v1/chat/completions") {
			http.Error(w, "wrong body for path", http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"usage": map[string]int{"prompt_tokens": f.count(s, chat), "completion_tokens": 1}})
	case "/v1/messages":
		// Anthropic's usage: input_tokens is the part not read from the cache; the probe
		// carries the kind's anthropic-version header.
		s, chat := text()
		if !chat || req.MaxTokens != 1 || req.Model != "m" || r.Header.Get("anthropic-version") != "2023-06-01" {
			http.Error(w, "probe must be a Messages request for one token of model m, with anthropic-version", http.StatusBadRequest)
			return
		}
		n := f.count(s, true)
		cached := min(n, 5)
		json.NewEncoder(w).Encode(map[string]any{"type": "message", "usage": map[string]int{"input_tokens": n - cached,
			"cache_read_input_tokens": cached, "cache_creation_input_tokens": 0, "output_tokens": 1}})
	case "/v1/responses":
		// The input string is one user message: the chat template counts.
		if req.Input == nil || req.MaxOutputTokens != 16 || req.Store == nil || *req.Store || req.Model != "m" {
			http.Error(w, "probe must be a Responses request for 16 tokens of model m, input a string, not stored", http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "response", "usage": map[string]int{"input_tokens": f.count(*req.Input, true), "output_tokens": 16}})
	default:
		http.NotFound(w, r)
	}
}

func calibrateAgainst(t *testing.T, f *fakeServer, api wire.API, method string) (tokenize.Calibration, error) {
	t.Helper()
	srv := httptest.NewServer(f)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+secretKey)
	return calibrate(ctx, probeOpts{
		BaseURL: srv.URL + "/v1", API: api, Model: "m", Header: h, Method: method,
		HTTPClient: srv.Client(), Builder: testBuilder(t, tokenize.CL100kBase, tokenize.BuilderOptions{}),
	})
}

// TestCalibrate: against a server counting about +10% tokens with a BOS and (chat) a 12-token
// template, every path lands within 0.5% on held-out lengths, and Target hits exact counts on
// a server whose count is exactly linear.
func TestCalibrate(t *testing.T) {
	for _, tc := range []struct {
		shape        string
		api          wire.API
		method, want string
	}{
		{"vllm", wire.APICompletions, "", wire.MethodTokenize},
		{"vllm", wire.APIChat, "", wire.MethodTokenize},
		{"llamacpp", wire.APICompletions, "", wire.MethodTokenizeLlamaCpp},
		{"llamacpp", wire.APIChat, "", wire.MethodUsage},
		{"none", wire.APICompletions, "", wire.MethodUsage},
		{"none", wire.APIChat, "", wire.MethodUsage},
		{"vllm", wire.APIChat, wire.MethodUsage, wire.MethodUsage},
		{"vllm", wire.APIResponses, "", wire.MethodTokenize},
		{"llamacpp", wire.APIResponses, "", wire.MethodUsage},
		{"none", wire.APIResponses, "", wire.MethodUsage},
		{"vllm", wire.APIMessages, "", wire.MethodTokenize},
		{"none", wire.APIMessages, "", wire.MethodUsage},
	} {
		chat := tc.api != wire.APICompletions // the chat template counts
		for _, linear := range []bool{false, true} {
			f := &fakeServer{shape: tc.shape, template: 12, bos: 1, linear: linear, t: t}
			cal, err := calibrateAgainst(t, f, tc.api, tc.method)
			if err != nil {
				t.Fatalf("%s %s linear=%v: %v", tc.shape, tc.api, linear, err)
			}
			t.Logf("%s linear=%v: %v %v", tc.shape, linear, cal, cal.Warnings)
			if cal.Method != tc.want {
				t.Errorf("%s %s: method %s, want %s", tc.shape, tc.api, cal.Method, tc.want)
			}
			if linear && cal.MaxRelError > 0.005 {
				t.Errorf("%s %s linear: held-out error %.3f%% > 0.5%%: %+v", tc.shape, tc.api, 100*cal.MaxRelError, cal.Check)
			}
			if !linear {
				// A tokenizer that splits 1 word in 10 miscounts any one prompt by the
				// word mix of its window: up to about 3 sd = 3*sqrt(512*0.09/4) = 10 tokens,
				// plus the 7 head words (1 more). Calibration cannot remove that; below the
				// length where it is 0.5% (about 2,200 tokens) the bound is in tokens.
				bound := 3*math.Sqrt(512*0.09/4) + 1
				for _, pt := range cal.Check {
					if d := math.Abs(float64(pt.ServerTokens - pt.Want)); d > max(bound, 0.005*float64(pt.Want)) {
						t.Errorf("%s %s word-split: held-out %+v off by %.0f tokens, bound %.1f", tc.shape, tc.api, pt, d, max(bound, 0.005*float64(pt.Want)))
					}
				}
			}
			overhead := 1.0
			if chat {
				overhead = 13
			}
			if math.Abs(cal.Overhead-overhead) > 3 || math.Abs(cal.Ratio-1.1) > 0.01 {
				t.Errorf("%s %s: overhead %.2f ratio %.4f, want about %.0f and 1.1", tc.shape, tc.api, cal.Overhead, cal.Ratio, overhead)
			}
			if linear {
				// An exactly linear server must be hit to within rounding (one builder token is
				// 1.1 server tokens) and the fitted slope's error, extrapolated: 0.1%.
				for _, n := range []int{50, 999, 12345} {
					k := cal.Target(n)
					if got := f.count(mustPrompt(t, testBuilder(t, tokenize.CL100kBase, tokenize.BuilderOptions{}), tokenize.PromptSpec{RequestID: 3, Tokens: k}), chat); math.Abs(float64(got-n)) > max(1, 0.001*float64(n)) {
						t.Errorf("%s %s: Target(%d)=%d counts %d", tc.shape, tc.api, n, k, got)
					}
				}
			}
			if len(cal.Check) != len(tokenize.DefaultCheckLengths) || len(cal.Fit) != 3*len(tokenize.DefaultFitLengths) {
				t.Errorf("probes: fit %v check %v", cal.Fit, cal.Check)
			}
		}
	}
}

// TestCalibrateLongHeldOut: on long prompts the word mix averages out and a word-splitting
// tokenizer is within 0.5% too.
func TestCalibrateLongHeldOut(t *testing.T) {
	for _, tc := range []struct {
		api   wire.API
		shape string
	}{
		{wire.APICompletions, "none"}, {wire.APIChat, "none"}, {wire.APICompletions, "vllm"}, {wire.APIChat, "vllm"},
	} {
		api := tc.api
		f := &fakeServer{shape: tc.shape, template: 12, bos: 1}
		srv := httptest.NewServer(f)
		h := http.Header{"Authorization": {"Bearer " + secretKey}}
		cal, err := calibrate(context.Background(), probeOpts{
			BaseURL: srv.URL, API: api, Model: "m", Header: h, HTTPClient: srv.Client(),
			Builder:      testBuilder(t, tokenize.O200kBase, tokenize.BuilderOptions{Seed: 99}),
			FitLengths:   []int{256, 2048, 8192},
			CheckLengths: []int{3000, 6000, 12000, 30000},
		})
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v; check %+v", cal, cal.Check)
		if cal.MaxRelError > 0.005 {
			t.Errorf("%s: held-out error %.3f%% > 0.5%%: %+v", api, 100*cal.MaxRelError, cal.Check)
		}
	}
}

func TestCalibrateErrorsKeepSecrets(t *testing.T) {
	f := &fakeServer{shape: "vllm", echoAuth: true, t: t}
	_, err := calibrateAgainst(t, f, wire.APICompletions, "")
	if err == nil {
		t.Fatal("calibration against a failing server succeeded")
	}
	if strings.Contains(err.Error(), secretKey) || strings.Contains(err.Error(), "5ecret") {
		t.Fatalf("error leaks the key: %v", err)
	}
	if !strings.Contains(err.Error(), "HTTP 403") {
		t.Errorf("error does not say what happened: %v", err)
	}
	// A URL with credentials in it is not echoed either.
	_, err = calibrate(context.Background(), probeOpts{
		BaseURL: "http://user:" + secretKey + "@127.0.0.1:1/v1?key=" + secretKey, API: wire.APIChat, Model: "m",
		Builder: testBuilder(t, tokenize.CL100kBase, tokenize.BuilderOptions{}), Method: wire.MethodUsage,
	})
	if err == nil || strings.Contains(err.Error(), secretKey) {
		t.Fatalf("err = %v", err)
	}
	// tokenize's errors carry no URL at all: the caller wraps them with the endpoint it
	// may show.
	if strings.Contains(err.Error(), "://") || strings.Contains(err.Error(), "user") {
		t.Fatalf("error quotes the URL: %v", err)
	}
}

func TestCalibrateCanceled(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := calibrate(ctx, probeOpts{BaseURL: srv.URL, API: wire.APICompletions, Model: "m", Builder: testBuilder(t, tokenize.CL100kBase, tokenize.BuilderOptions{})})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
}
