// Package transport sends prepared requests to an inference endpoint and times their
// streams: net/http, or on Linux the replayer's own HTTP/1.1 client (rawhttp.go), whose
// responses stream reactors read and end with no goroutine per request
// (reactor_linux.go). Package replay decides what is sent and when (preparation, the
// executors, the dispatcher); this package decides how, and never imports replay.
//
// What crosses the seam:
//   - Client, ClientOptions and NewClient: the endpoint's client, built once per run;
//     Client.Transport is what the dispatcher sends through.
//   - Request: one prepared request (body, the raw client's head, routing ids), and
//     Clock, the run clock every stamp is read from.
//   - Transport, and SplitTransport for a transport whose send the dispatcher begins
//     itself at the due time (Begin, BeginAt with a DueWriter: replay's thread waiter
//     writes as its thread wakes), SendStart being that begun send.
//   - SSEReader: the stream reader the dispatcher keeps one of per in-flight request.
package transport
