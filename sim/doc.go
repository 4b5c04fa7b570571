// Package sim is the simulated OpenAI-compatible inference engine: `llmreplay sim`, and the
// endpoint a replay starts in-process when it is given none. It needs no GPU, so that
// anyone can try the replayer at once, tests have an endpoint whose behaviour is known
// exactly, and the analysis has a ground truth to be held against.
//
// Its timing comes from a model of an iteration-level, continuous-batching engine (vLLM's
// and SGLang's way): each step admits waiting requests while the KV cache has room, runs
// chunked prefill within a token budget and decodes one token for each running sequence,
// and lasts Config.StepTime (a base, plus terms per prefill token, per decoding sequence,
// per context token attended, per pair of a prefilled token and a token before it (the
// prefill's attention, which grows with the context) and per MoE expert touched). Info gives the analytical
// limits that follow, which a replay against the engine should measure. The fixed profile
// has exact TTFT and ITL and no batching, for measuring the replayer's own error.
// docs/sim.md has the model, the profiles, the faults and the request log.
//
// It imports nothing of replay: the replayer and the engine meet only on the wire, as the
// replayer and a real engine do.
package sim
