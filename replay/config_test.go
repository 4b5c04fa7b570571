package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"context"
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/wire"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" = valid; else the error's text
	}{
		{"defaults", func(*Config) {}, ""},
		{"speedup", func(c *Config) { c.Speedup, c.SpeedupSet = 2, true }, ""},
		{"speedup 0", func(c *Config) { c.SpeedupSet = true }, "--speedup 0: must be positive"},
		{"speedup NaN", func(c *Config) { c.Speedup, c.SpeedupSet = math.NaN(), true }, "--speedup NaN: must be positive"},
		{"speedup 0 not given", func(c *Config) { c.Speedup = 0 }, ""},
		{"two modes", func(c *Config) { c.Speedup, c.SpeedupSet, c.Rate, c.RateSet = 2, true, 3, true }, "give at most one of --speedup, --rate and --concurrency"},
		{"rate -1", func(c *Config) { c.Rate, c.RateSet = -1, true }, "--rate -1: must be a positive number of requests per second"},
		{"rate +Inf", func(c *Config) { c.Rate, c.RateSet = math.Inf(1), true }, "--rate +Inf: must be a positive number of requests per second"},
		{"concurrency 0", func(c *Config) { c.ConcurrencySet = true }, "--concurrency 0: must be at least 1"},
		{"concurrency 4", func(c *Config) { c.Concurrency, c.ConcurrencySet = 4, true }, ""},
		{"ramp-up", func(c *Config) { c.Concurrency, c.ConcurrencySet, c.RampUp = 4, true, time.Second }, ""},
		{"ramp-up open loop", func(c *Config) { c.RampUp = time.Second }, "--ramp-up 1s: only with --concurrency"},
		{"ramp-up negative", func(c *Config) { c.Concurrency, c.ConcurrencySet, c.RampUp = 4, true, -time.Second }, "--ramp-up -1s: must not be negative"},
		{"max-inflight 0", func(c *Config) { c.MaxInflight = 0 }, "--max-inflight 0: must be at least 1"},
		{"read-batch negative", func(c *Config) { c.ReadBatch = -time.Millisecond }, "--read-batch -1ms: must be between 0"},
		{"read-batch too long", func(c *Config) { c.ReadBatch = 11 * time.Millisecond }, "--read-batch 11ms: must be between 0 (read every chunk as it arrives) and 10ms"},
		{"http-client", func(c *Config) { c.HTTPClient = "curl" }, "--http-client: "},
		{"api", func(c *Config) { c.API = "images" }, "--api: "},
		{"backend", func(c *Config) { c.Backend = "x" }, "--backend: "},
		{"prompt-format", func(c *Config) { c.PromptFormat = "bytes" }, `--prompt-format "bytes": want auto, text or token-ids`},
		{"token-ids chat", func(c *Config) { c.PromptFormat, c.API = "token-ids", "chat" }, "--prompt-format token-ids needs --api completions"},
		{"auto chat", func(c *Config) { c.API = "chat" }, ""},
		{"vocab-size", func(c *Config) { c.PromptFormat, c.VocabSize = "token-ids", 10 }, "--vocab-size: "},
		{"calibrate-max-error negative", func(c *Config) { c.CalibrateMaxError = -0.01 }, "--calibrate-max-error -0.01: want a relative error >= 0"},
		{"calibrate-max-error NaN", func(c *Config) { c.CalibrateMaxError = math.NaN() }, "--calibrate-max-error NaN: "},
		{"calibrate-max-error zero", func(c *Config) { c.CalibrateMaxError = 0 }, ""},
		{"vocab-size text", func(c *Config) { c.PromptFormat, c.VocabSize = "text", 10 }, ""},
		{"vocab-size auto endpoint", func(c *Config) { c.Endpoint, c.VocabSize = "http://h:1/v1", 10 }, ""},
		{"shard", func(c *Config) { c.Shard = "3/2" }, "--shard: "},
		{"start-at", func(c *Config) { c.StartAt = "tomorrow" }, `--start-at: "tomorrow": want RFC 3339`},
		{"start-at ok", func(c *Config) { c.StartAt = "2026-12-02T15:00:00Z" }, ""},
		{"header", func(c *Config) { c.Headers = []string{"X-Secret value"} }, `--header "X-Secret value": want 'Name: value'`},
		{"header value kept out", func(c *Config) { c.Headers = []string{": hunter2"} }, `--header "": want 'Name: value'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			case err != nil && !IsConfigError(err):
				t.Fatalf("Validate() = %T, want a *ConfigError", err)
			}
		})
	}
}

func TestSafeURL(t *testing.T) {
	for in, want := range map[string]string{
		"":                                     "",
		"http://127.0.0.1:8000/v1":             "http://127.0.0.1:8000/v1",
		"http://u:pw@127.0.0.1:8000/v1":        "http://127.0.0.1:8000/v1",
		"https://api.example.com?key=s3cret#f": "https://api.example.com",
		"http://u:pw@host:bad/v1":              "[redacted url]",
	} {
		if got := wire.SafeURL(in); got != want {
			t.Errorf("SafeURL(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := wire.BaseURL("http://u:pw@host:bad/v1"); err == nil || strings.Contains(err.Error(), "pw") {
		t.Errorf("BaseURL of a bad URL with a password: %v", err)
	}
	m := SafeFlags(map[string]string{"endpoint": "http://u:pw@h:1/v1", "api-key": "k", "model": "m"})
	if m["endpoint"] != "http://h:1/v1" || m["model"] != "m" || m["api-key"] != "" {
		t.Errorf("SafeFlags = %v", m)
	}
}

// TestCalibrateErrorsCarryNoSecrets: a server that echoes the request's headers and URL in
// its error reply; the calibration error names the endpoint in its safe form and holds
// neither the URL's password, the API key, a header value nor the basic-auth token.
func TestCalibrateErrorsCarryNoSecrets(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "denied %s %v", r.URL, r.Header)
	}))
	defer srv.Close()
	base, err := wire.BaseURL(strings.Replace(srv.URL, "http://", "http://user:pw-Secret1@", 1) + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	_, b := testBuilder(t)
	header := http.Header{"X-Secret": {"hv-Secret2"}}
	for _, key := range []string{"", "sk-Secret3"} {
		_, err = Calibrate(context.Background(), Endpoint{Base: base, API: wire.APICompletions, Model: "m", APIKey: key, Header: header}, b)
		if err == nil {
			t.Fatal("calibration against a server that refuses everything succeeded")
		}
		msg := err.Error()
		for _, s := range []string{"pw-Secret1", "hv-Secret2", "sk-Secret3", "user:", base64.StdEncoding.EncodeToString([]byte("user:pw-Secret1"))} {
			if strings.Contains(msg, s) {
				t.Errorf("calibration error holds %q: %s", s, msg)
			}
		}
		if !strings.HasPrefix(msg, wire.SafeEndpoint(base)+": ") || !strings.Contains(msg, "HTTP 403") {
			t.Errorf("calibration error does not name the endpoint and what happened: %s", msg)
		}
	}
}

// TestErrorsScrubSecrets: a gateway that echoes the request's credentials in its error
// reply; neither the records' error text (both HTTP clients) nor ListModels' error holds
// the API key, a header value, the URL's password or the basic-auth token.
func TestErrorsScrubSecrets(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"bad credentials %s %s"}}`, r.Header.Get("Authorization"), r.Header.Get("X-Secret"))
	})
	u := vllmtest.Start(t, echo)
	u.User = url.UserPassword("user", "pw-Secret1")
	header := http.Header{"X-Secret": {"hv-Secret2"}}
	secrets := []string{"pw-Secret1", "hv-Secret2", "sk-Secret3", base64.StdEncoding.EncodeToString([]byte("user:pw-Secret1"))}
	check := func(what, msg string) {
		t.Helper()
		if !strings.Contains(msg, "HTTP 401") {
			t.Errorf("%s: %q does not say what happened", what, msg)
		}
		for _, s := range secrets {
			if strings.Contains(msg, s) {
				t.Errorf("%s holds %q: %s", what, s, msg)
			}
		}
	}
	for _, hc := range []string{transport.HTTPClientRaw, transport.HTTPClientNetHTTP} {
		for _, key := range []string{"", "sk-Secret3"} {
			c := newTestClient(t, u, func(o *transport.ClientOptions) { o.APIKey, o.Header, o.HTTPClient = key, header, hc })
			_, res, _ := runTrace(t, context.Background(), c, uniformTrace(2, time.Millisecond, 8, 4), nil)
			for _, r := range res {
				check(hc+" record", r.Error)
			}
		}
	}
	_, err := transport.ListModels(context.Background(), u, "sk-Secret3", header, false)
	if err == nil {
		t.Fatal("ListModels against a refusing server succeeded")
	}
	check("ListModels", err.Error())
}
