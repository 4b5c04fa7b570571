package replay

// PrewarmCount returns how many keep-alive connections a run opens before its clock
// starts: --prewarm, bounded by the pool (the larger of --max-inflight and the
// concurrency), and in closed loop at least min(concurrency, --max-inflight), so that the
// first wave, one request per worker at once, never dials inside its lateness.
func PrewarmCount(prewarm, maxInflight, concurrency int) int {
	n := min(max(prewarm, 0), max(maxInflight, concurrency))
	if concurrency > 0 {
		n = max(n, min(concurrency, maxInflight))
	}
	return n
}
