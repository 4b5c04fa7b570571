//go:build race

package tokenize

// raceEnabled trims the tests that count real tokens: tiktoken-go runs about ten times
// slower under the race detector, and those tests check lengths, not concurrency.
const raceEnabled = true
