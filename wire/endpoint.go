package wire

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// BaseURL parses an --endpoint the way OpenAI clients take a base URL: a URL with no path
// gets /v1, and trailing slashes go. Only http and https are accepted. Its errors never
// quote the URL's userinfo.
func BaseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		// *url.Error quotes the whole string, password included: keep only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("endpoint %q: %w", SafeURL(s), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("endpoint %q: scheme must be http or https", SafeEndpoint(u))
	}
	if u.Host == "" {
		return nil, fmt.Errorf("endpoint %q: no host", SafeEndpoint(u))
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1"
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return u, nil
}

// SafeEndpoint returns u without userinfo, query or fragment: the one form in which an
// endpoint is stored (run metadata, sweep state) or printed (messages, errors).
func SafeEndpoint(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	c.ForceQuery = false
	c.Fragment = ""
	c.RawFragment = ""
	return c.String()
}

// SafeURL is SafeEndpoint of a URL as the user typed it (a flag value). A string that does
// not parse as a URL is withheld whole, since any part of it may be a password; a parsable
// one keeps its form (no /v1 added), so a stored flag still reads as given.
func SafeURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return "[redacted url]"
	}
	return SafeEndpoint(u)
}

// rootPath is the server root of an API base path: the path without a trailing slash and
// /v1. vLLM, SGLang, TGI and the llama.cpp server serve /metrics and /tokenize there, beside
// the OpenAI routes rather than under them.
func rootPath(basePath string) string {
	return strings.TrimSuffix(strings.TrimSuffix(basePath, "/"), "/v1")
}

// APIURL is the URL requests of api go to: base + the kind's path (see Kind.Path). It keeps
// base's userinfo and query; the caller that sends credentials another way drops the
// userinfo. An unregistered api gets the completions path, as NewEncoder refuses it anyway.
func APIURL(base *url.URL, api API) *url.URL {
	u := *base
	path := "/completions"
	if k, ok := Lookup(api); ok {
		path = k.Path
	}
	u.Path += path
	return &u
}

// ModelsURL is GET BASE/models, the OpenAI model list, without userinfo (a client sends it
// as a header).
func ModelsURL(base *url.URL) *url.URL {
	u := *base
	u.User = nil
	u.Path += "/models"
	return &u
}

// MetricsURL is the Prometheus endpoint of an engine whose OpenAI base URL is base: the
// server root + /metrics. It keeps base's userinfo and drops its query and fragment.
func MetricsURL(base *url.URL) *url.URL { return rootURL(base, "/metrics") }

// TokenizeURL is the /tokenize endpoint of vLLM, SGLang and the llama.cpp server whose
// OpenAI base URL is base: the server root + /tokenize, without query or fragment.
func TokenizeURL(base *url.URL) *url.URL { return rootURL(base, "/tokenize") }

// rootURL is path at the server root of base, with base's userinfo and without its query
// and fragment.
func rootURL(base *url.URL, path string) *url.URL {
	u := *base
	u.Path = rootPath(u.Path) + path
	u.RawPath = ""
	u.RawQuery, u.Fragment = "", ""
	return &u
}

// ServerRoot is base's server root (the base without /v1) as a string, without query or
// fragment: for messages that point a person at the server's own routes.
func ServerRoot(base *url.URL) string {
	u := *base
	u.Path = rootPath(u.Path)
	u.RawPath = ""
	u.RawQuery, u.Fragment = "", ""
	return u.String()
}
