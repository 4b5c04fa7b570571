// Package wire is the one home of what llmreplay says to an inference endpoint and how it
// reads the answer: the base URL and the URLs derived from it (the API paths, /models,
// /metrics, /tokenize), the API kinds and their request bodies, the streaming chunk
// decoder (text, reasoning, tool-call and usage deltas), error bodies, the token-count
// probes calibration sends, and the names of the metrics engines expose.
//
// An API kind is one file here that registers a Kind (completions.go, chat.go); the
// clients, the simulated engine's request decoding, calibration, the scraper and the
// benchmarks all take what they need of an endpoint from this package, so an endpoint
// detail (where /metrics lives, which field caps the output) is written once.
//
// wire imports nothing of llmreplay: it knows bytes and HTTP, not runs or traces.
package wire
