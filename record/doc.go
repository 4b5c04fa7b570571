// Package record is llmreplay's recording proxy: it stands in front of one production
// endpoint, passes every request and response through unchanged, and writes from what
// passed a trace in the trace format (arrivals, lengths, sampling fields, sessions and the
// dependency of a call on the one it continues, salted prefix-block ids: never a word of
// text) and production results in the results format (sent, first-token and chunk times,
// status), so that a replay of the trace can be compared with production on the same
// traffic (docs/record.md).
//
// The proxy is a hand-written HTTP/1.1 relay (relay.go) for GETs and POSTs in plain form,
// which hands any other connection to net/http/httputil.ReverseProxy with a RoundTripper
// that stamps and taps the response (proxy.go); either way the response is tapped by
// replay/transport's Tap, the replayer's own stream record. The
// recorder (recorder.go) turns finished exchanges into rows off the request's path: a
// bounded queue (a full queue drops the recording of a request, never the request), a
// pool of parsers (request.go: bodies into numbers and salted hashes), one linker that
// takes them in the order they ended (sessions.go) and writes each rotation's journals
// (journal.go and the results journal), turned into Parquet files at rotation and stop.
package record
