package wire

// The Prometheus metrics engines expose at /metrics (MetricsURL) that llmreplay reads:
// named once here, for the analysis of scraped metrics and for the sweep's idle check.
// Where an engine renamed a metric, both names are listed (the newer first).
const (
	// vLLM
	VLLMRequestsRunning       = "vllm:num_requests_running"
	VLLMRequestsWaiting       = "vllm:num_requests_waiting"
	VLLMKVCacheUsage          = "vllm:kv_cache_usage_perc"
	VLLMGPUCacheUsage         = "vllm:gpu_cache_usage_perc" // the older name of VLLMKVCacheUsage
	VLLMPreemptionsTotal      = "vllm:num_preemptions_total"
	VLLMPreemptions           = "vllm:num_preemptions" // the older name of VLLMPreemptionsTotal
	VLLMPrefixCacheQueries    = "vllm:prefix_cache_queries_total"
	VLLMGPUPrefixCacheQueries = "vllm:gpu_prefix_cache_queries_total" // older
	VLLMPrefixCacheHits       = "vllm:prefix_cache_hits_total"
	VLLMGPUPrefixCacheHits    = "vllm:gpu_prefix_cache_hits_total" // older
	VLLMGPUPrefixCacheHitRate = "vllm:gpu_prefix_cache_hit_rate"

	// SGLang
	SGLangRequestsRunning = "sglang:num_running_reqs"
	SGLangRequestsQueued  = "sglang:num_queue_reqs"
	SGLangTokenUsage      = "sglang:token_usage"
	SGLangCacheHitRate    = "sglang:cache_hit_rate"

	// Text Generation Inference
	TGIBatchSize = "tgi_batch_current_size"
	TGIQueueSize = "tgi_queue_size"

	// The llama.cpp server (--metrics)
	LlamaCPPRequestsProcessing = "llamacpp:requests_processing"
	LlamaCPPRequestsDeferred   = "llamacpp:requests_deferred"
	LlamaCPPKVCacheUsage       = "llamacpp:kv_cache_usage_ratio"

	// NVIDIA's DCGM exporter
	DCGMGPUUtil    = "DCGM_FI_DEV_GPU_UTIL"
	DCGMPowerUsage = "DCGM_FI_DEV_POWER_USAGE"
	DCGMFBUsed     = "DCGM_FI_DEV_FB_USED"
)

// BusyGauges are the gauges of requests an engine is running or holding in its queue, one
// pair per engine: their sum over an exposition is the engine's outstanding work, zero
// when it is idle (the sweep waits for that between points).
var BusyGauges = []string{
	VLLMRequestsRunning, VLLMRequestsWaiting,
	SGLangRequestsRunning, SGLangRequestsQueued,
	TGIQueueSize, TGIBatchSize,
	LlamaCPPRequestsProcessing, LlamaCPPRequestsDeferred,
}
