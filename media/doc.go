// Package media is what llmreplay knows of images: how many prompt tokens one image of a
// given size counts for under a model family's processor (Rule, LookupRule), and a real,
// valid PNG or JPEG of a given size, deterministic from a seed, to send (Encode).
//
// It is a leaf: it imports nothing of llmreplay, so that the trace, the wire, the replay
// and the simulated engine all take their image arithmetic from one place.
package media
