package replay

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// This file is the one home of endpoint normalisation and secret redaction: every place
// that stores or prints an endpoint, a flag value or a header goes through it. URL
// passwords, API keys and header values are secrets; header names are not.

// BaseURL parses an --endpoint the way OpenAI clients take a base URL: a URL with no path
// gets /v1. Only http and https are accepted. Its errors never quote the URL's userinfo.
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

// HasSecret reports whether a URL as typed carries something SafeURL removes (userinfo,
// a query, a fragment), i.e. whether its stored form differs from it.
func HasSecret(s string) bool { return SafeURL(s) != s }

// SafeHeaderNames returns the names of 'Name: value' headers, sorted and comma-joined:
// the only part of --header that is stored.
func SafeHeaderNames(headers []string) string {
	names := make([]string, 0, len(headers))
	for _, h := range headers {
		names = append(names, HeaderName(h))
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

// HeaderName returns the name part of a 'Name: value' header, for messages.
func HeaderName(h string) string {
	k, _, _ := strings.Cut(h, ":")
	return strings.TrimSpace(k)
}

// BasicAuth returns the Authorization header value for u's userinfo ("" without one), so
// that callers that must not see URLs with credentials (tokenize.Calibrate) get them as a
// header, whose values they scrub from their errors.
func BasicAuth(u *url.URL) string {
	if u.User == nil {
		return ""
	}
	pw, _ := u.User.Password()
	r := http.Request{Header: http.Header{}}
	r.SetBasicAuth(u.User.Username(), pw)
	return r.Header.Get("Authorization")
}

// Secrets lists the secret values a client sends: the API key, the header values, the
// URL's password and the basic-auth token made of its userinfo. Values shorter than four
// bytes are left out: replacing them would mangle messages and hide nothing.
func Secrets(base *url.URL, apiKey string, header http.Header) []string {
	var s []string
	add := func(v string) {
		if len(v) >= 4 {
			s = append(s, v)
		}
	}
	add(apiKey)
	for _, vs := range header {
		for _, v := range vs {
			add(v)
		}
	}
	if base != nil && base.User != nil {
		pw, _ := base.User.Password()
		add(pw)
		if auth, ok := strings.CutPrefix(BasicAuth(base), "Basic "); ok {
			add(auth)
		}
	}
	return s
}

// Scrub replaces every secret in text with [redacted]: for messages that quote a server's
// reply, since a server or proxy may echo the request back.
func Scrub(text string, secrets []string) string {
	for _, v := range secrets {
		if strings.Contains(text, v) {
			text = strings.ReplaceAll(text, v, "[redacted]")
		}
	}
	return text
}
