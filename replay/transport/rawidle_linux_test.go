package transport

// rawMaxIdle is the raw client's idle-pool size (the raw client is built on linux only).
func rawMaxIdle(t *rawTransport) int { return t.maxIdle }
