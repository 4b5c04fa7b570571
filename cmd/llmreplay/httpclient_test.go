package main

import (
	"runtime"

	"github.com/llmreplay/llmreplay/replay/transport"
)

// autoClient is what --http-client auto chooses for a plain-http endpoint: the raw client,
// which is built for linux only.
func autoClient() string {
	if runtime.GOOS == "linux" {
		return transport.HTTPClientRaw
	}
	return transport.HTTPClientNetHTTP
}
