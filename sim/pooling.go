package sim

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/llmreplay/llmreplay/sim/pooling"
	"github.com/llmreplay/llmreplay/sim/stampconn"
)

// The pooling endpoints, /v1/embeddings and /rerank (with /v1/rerank and /v2/rerank, as
// vLLM routes them), in vLLM's shapes; package pooling has the shapes, the scheduler and
// the sources they follow. Here the requests are counted with the sim's tokenizer and
// run on the server's pooling engine.

// Model-time headers of a pooling response, sent when the request has X-Sim-Timing: 1.
// Headers, not trailers: the body is written once, when every input is done, so the
// times are known before the head. Values are model nanoseconds since the engine's
// epoch, as the generation trailers'.
const (
	// HeaderPoolArrival is the request's arrival; HeaderPoolAdmit the first admission of
	// one of its inputs; HeaderPoolDone the end of the step that finished its last input
	// (its latency is HeaderPoolDone - HeaderPoolArrival); HeaderPoolAhead the inputs
	// waiting ahead of its first on arrival.
	HeaderPoolArrival = "X-Sim-Arrival-Ns"
	HeaderPoolAdmit   = "X-Sim-Admit-Ns"
	HeaderPoolDone    = "X-Sim-Last-Ns"
	HeaderPoolAhead   = "X-Sim-Waiting-Ahead"
)

// poolLimits and poolStep give the pooling engine the profile's budget and step model.
func (c *Config) poolLimits() pooling.Limits {
	return pooling.Limits{MaxBatchedTokens: c.PoolMaxBatchedTokens, MaxBatch: c.PoolMaxBatch}
}

func (c *Config) poolStep(prefill, context int, pairs int64) time.Duration {
	return c.StepTime(prefill, 0, context, pairs)
}

// PoolPrefillTime is the latency of one pooling input of tokens tokens alone on an idle
// pooling engine.
func (c *Config) PoolPrefillTime(tokens int) time.Duration {
	return pooling.PrefillTime(c.poolStep, c.poolLimits(), tokens)
}

// serveEmbeddings answers POST /v1/embeddings as vLLM's OpenAIServingEmbedding does, each
// input an engine request. Every input's tokens are counted as the chat path counts a
// prompt: cl100k_base for text, the ids' count for token ids.
func (s *Server) serveEmbeddings(w http.ResponseWriter, r *http.Request) {
	recv, _, _ := earliestArrival(stampconn.FromContext(r.Context()), time.Now())
	echoRequestID(w, r)
	body := s.bodyOr(w, r, writeError)
	if body == nil {
		return
	}
	var req pooling.EmbeddingsRequest
	if aerr := decodeStrict(body, &req); aerr != nil {
		s.poolBad(w, aerr)
		return
	}
	if !s.poolModel(w, req.Model) {
		return
	}
	b64, dims, perr := req.Options(s.cfg.EmbeddingDim, s.cfg.MaxModelLen)
	if perr != nil {
		s.poolBad(w, badRequest(perr.Param, "%s", perr.Msg))
		return
	}
	texts, ids, perr := pooling.ParseInput(req.Input, vocabSize)
	var inputs []pooling.Input
	for _, t := range texts {
		inputs = append(inputs, pooling.Input{Tokens: s.count(t, nil), Key: pooling.HashText(t)})
	}
	for _, l := range ids {
		inputs = append(inputs, pooling.Input{Tokens: len(l), Key: pooling.HashIDs(l)})
	}
	for i := 0; perr == nil && i < len(inputs); i++ {
		perr = pooling.CheckLen("input", i, inputs[i].Tokens, s.cfg.MaxModelLen, "embedding generation")
	}
	if perr != nil {
		s.poolBad(w, badRequest(perr.Param, "%s", perr.Msg))
		return
	}
	// The body is built while the inputs run, so that its cost (dims normals an input)
	// is not added to the modelled latency.
	run := s.startPool(recv, inputs)
	out := pooling.AppendEmbeddings(make([]byte, 0, pooling.EmbeddingsSize(len(inputs), dims)), rand.Uint64(), time.Now().Unix(),
		s.modelJSON, inputs, s.cfg.EmbeddingDim, dims, b64)
	s.finishPool(w, r, run, out)
}

// serveRerank answers POST /rerank, /v1/rerank and /v2/rerank as vLLM's do_rerank. Each
// (query, document) pair is one engine request of tokens(query) + tokens(document)
// tokens: a cross-encoder reads the two together.
func (s *Server) serveRerank(w http.ResponseWriter, r *http.Request) {
	recv, _, _ := earliestArrival(stampconn.FromContext(r.Context()), time.Now())
	echoRequestID(w, r)
	body := s.bodyOr(w, r, writeError)
	if body == nil {
		return
	}
	var req pooling.RerankRequest
	if aerr := decodeStrict(body, &req); aerr != nil {
		s.poolBad(w, aerr)
		return
	}
	if !s.poolModel(w, req.Model) {
		return
	}
	query, docs, perr := req.Parse()
	if perr != nil {
		s.poolBad(w, badRequest(perr.Param, "%s", perr.Msg))
		return
	}
	qTokens, qKey := s.count(query, nil), pooling.HashText(query)
	inputs := make([]pooling.Input, len(docs))
	for i, d := range docs {
		inputs[i] = pooling.Input{Tokens: qTokens + s.count(d, nil), Key: pooling.PairKey(qKey, pooling.HashText(d))}
		if perr := pooling.CheckLen("documents", i, inputs[i].Tokens, s.cfg.MaxModelLen, "score"); perr != nil {
			s.poolBad(w, badRequest(perr.Param, "%s", perr.Msg))
			return
		}
	}
	topN := 0
	if req.TopN != nil {
		topN = *req.TopN
	}
	run := s.startPool(recv, inputs)
	out := pooling.AppendRerank(make([]byte, 0, 128+len(docs)*64), rand.Uint64(), s.modelJSON, docs, inputs, topN)
	s.finishPool(w, r, run, out)
}

// poolModel answers a request for another model with a 404 and reports whether the
// request may go on.
func (s *Server) poolModel(w http.ResponseWriter, model *string) bool {
	if model != nil {
		if aerr := s.checkModel(*model); aerr != nil {
			writeError(w, aerr)
			return false
		}
	}
	return true
}

// poolBad answers a malformed pooling request with e, counted as a bad request.
func (s *Server) poolBad(w http.ResponseWriter, e *apiError) {
	s.badRequests.Add(1)
	writeError(w, e)
}

// poolRun is a pooling request under way: its inputs on the pooling engine, or in the
// fixed profile its arrival and inputs.
type poolRun struct {
	recv   time.Time
	inputs []pooling.Input
	req    *pooling.Request // nil in the fixed profile
}

// startPool hands the inputs to the pooling engine (the fixed profile has none).
func (s *Server) startPool(recv time.Time, inputs []pooling.Input) *poolRun {
	run := &poolRun{recv: recv, inputs: inputs}
	if s.cfg.Fixed {
		s.poolInflight.Add(int64(len(inputs)))
		return run
	}
	tokens := make([]int, len(inputs))
	for i, in := range inputs {
		tokens[i] = in.Tokens
	}
	run.req = s.pool.Submit(recv, tokens)
	return run
}

// finishPool waits until the inputs are done (in the fixed profile, FixedTTFT after the
// arrival, with no batching) and then writes body. A client that leaves cancels its
// inputs.
func (s *Server) finishPool(w http.ResponseWriter, r *http.Request, run *poolRun, body []byte) {
	ctx := r.Context()
	var arrival, admit, done time.Duration
	ahead := 0
	if s.cfg.Fixed {
		ok := s.sleep(ctx, time.Until(run.recv.Add(s.realDur(s.cfg.FixedTTFT))))
		s.poolInflight.Add(-int64(len(run.inputs)))
		if !ok {
			return
		}
		arrival = scaleDur(run.recv.Sub(s.epoch), s.cfg.TimeScale)
		admit, done = arrival, arrival+s.cfg.FixedTTFT
		for _, in := range run.inputs {
			s.fixedPoolPrompt.Add(int64(in.Tokens))
			s.e2e.observe(s.cfg.FixedTTFT)
		}
		s.poolFixedDone.Add(int64(len(run.inputs)))
	} else {
		seqs, ok := run.req.Wait(ctx, s.closing)
		if !ok {
			return
		}
		arrival, admit, ahead = seqs[0].Arrival, seqs[0].Admit, seqs[0].WaitingAhead
		for _, q := range seqs {
			admit, done = min(admit, q.Admit), max(done, q.Done)
			s.e2e.observe(q.Done - q.Arrival) // vLLM observes each engine request
		}
	}
	if r.Header.Get(TimingHeader) != "" {
		h := w.Header()
		h.Set(HeaderPoolArrival, strconv.FormatInt(int64(arrival), 10))
		h.Set(HeaderPoolAdmit, strconv.FormatInt(int64(admit), 10))
		h.Set(HeaderPoolDone, strconv.FormatInt(int64(done), 10))
		h.Set(HeaderPoolAhead, strconv.Itoa(ahead))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(http.StatusOK)
	w.Write(append(body, '\n'))
}
