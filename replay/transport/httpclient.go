package transport

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// HTTP client choices (ClientOptions.HTTPClient, --http-client). The raw client is built
// for linux only (rawhttp.go); elsewhere auto chooses net/http and raw is an error.
const (
	HTTPClientAuto    = "auto"     // raw for http:// without a proxy (on linux), else net/http
	HTTPClientRaw     = "raw"      // the replayer's own HTTP/1.1 client; http:// only, linux only
	HTTPClientNetHTTP = "net/http" // Go's net/http Transport
)

// rawErrBody is how many bytes of an error response either client keeps for its message.
const rawErrBody = 1 << 10

// maxResponseHead caps a response's status line and headers, in both clients (net/http's
// own default is 10 MiB): an engine's head is a few hundred bytes.
const maxResponseHead = 64 << 10

// errRawNotBuilt is useRaw's error for --http-client raw where the raw client is not built.
var errRawNotBuilt = errors.New("client: the raw client is only built for linux; use --http-client net/http")

// ParseHTTPClient checks an --http-client value.
func ParseHTTPClient(s string) (string, error) {
	switch s {
	case "", HTTPClientAuto:
		return HTTPClientAuto, nil
	case HTTPClientRaw, HTTPClientNetHTTP:
		return s, nil
	}
	return "", fmt.Errorf("unknown HTTP client %q (want auto, raw or net/http)", s)
}

// useRaw decides which client serves u.
func useRaw(choice string, u *url.URL) (bool, error) {
	proxied := false
	if u.Scheme == "http" {
		p, err := http.ProxyFromEnvironment(&http.Request{URL: u})
		proxied = err != nil || p != nil
	}
	switch choice {
	case HTTPClientRaw:
		if !RawBuilt {
			return false, errRawNotBuilt
		}
		if u.Scheme != "http" {
			return false, errors.New("client: the raw HTTP client speaks plain http only (use --http-client auto or net/http for https)")
		}
		if proxied {
			return false, errors.New("client: the raw HTTP client does not use proxies, and the environment sets one for this endpoint")
		}
		return true, nil
	case HTTPClientNetHTTP:
		return false, nil
	}
	return RawBuilt && u.Scheme == "http" && !proxied, nil
}
