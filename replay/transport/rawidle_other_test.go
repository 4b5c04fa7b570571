//go:build !linux

package transport

// rawMaxIdle: off linux there is no raw client (Client.raw is nil), so this is never asked.
func rawMaxIdle(t *rawTransport) int { return 0 }
