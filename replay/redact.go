package replay

import (
	"sort"
	"strings"

	"github.com/llmreplay/llmreplay/wire"
)

// This file is replay's home of secret redaction: every place that stores or prints an
// endpoint, a flag value or a header goes through it (the endpoint's normalisation and its
// safe form are wire's). URL passwords, API keys and header values are secrets; header
// names are not.

// HasSecret reports whether a URL as typed carries something wire.SafeURL removes (userinfo,
// a query, a fragment), i.e. whether its stored form differs from it.
func HasSecret(s string) bool { return wire.SafeURL(s) != s }

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
