package transport

import (
	"net/http"
	"net/url"
	"strings"
)

// The clients' secrets: the API key, the header values and the URL's userinfo, scrubbed
// from every record's error text, since a server or proxy may echo the request back.

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
