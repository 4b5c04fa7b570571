package replay

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// Preflight: what Prepare checks before the first request, so that a run never spends its
// traffic (an hour of GPU time, say) and then fails to keep its results (docs/replay.md,
// "Before the first request"). The output is checked first, then the trace, then the
// endpoint; the disk is checked against an estimate once the trace is open.

// DefaultOutputName is the results file of a run given no -o: results-<t in UTC, to the
// second>.parquet (ISO 8601 basic format, no colons, so it is a valid name everywhere and
// sorts by time), with .shard-I before .parquet for shard I of several. t is the run's
// start: --start-at when given (the same for every shard of one run), else now.
func DefaultOutputName(t time.Time, sh trace.Shard) string {
	name := "results-" + t.UTC().Format("20060102T150405Z")
	if sh.Count > 1 {
		name += ".shard-" + strconv.Itoa(sh.Index)
	}
	return name + ".parquet"
}

// uniqueOutput returns name, or name with -2, -3, ... before .parquet, whichever is the
// first that no file (results, journal or metrics file) occupies: two runs started in the
// same second in one folder never share a default name.
func uniqueOutput(name string) string {
	base := strings.TrimSuffix(name, ".parquet")
	for i := 1; ; i++ {
		out := name
		if i > 1 {
			out = base + "-" + strconv.Itoa(i) + ".parquet"
		}
		if !occupied(out) {
			return out
		}
	}
}

func occupied(out string) bool {
	for _, p := range []string{out, out + results.JournalSuffix, results.MetricsPath(out), results.MetricsPath(out) + results.JournalSuffix} {
		if _, err := os.Lstat(p); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return true
		}
	}
	return false
}

// CheckOutput checks, without writing anything that stays, that path can take a run's
// results: it is not a folder; it is not an existing file unless force (a run never
// replaces another silently); no journal of an earlier run that did not finish lies beside
// it unless force (its records would be lost: the error names the recover command); and
// its folder exists and takes a new file. Errors are *ConfigError naming -o.
func CheckOutput(path string, force bool) error {
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return configErrorf("-o %s: is a folder; name a file, e.g. %s", path, filepath.Join(path, "results.parquet"))
		}
		if !force {
			return configErrorf("-o %s: file exists (written %s); choose another name, or give --force to replace it", path, st.ModTime().UTC().Format(time.RFC3339))
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return configErrorf("-o %s: %v", path, pathErr(err))
	}
	for _, j := range []string{path + results.JournalSuffix, results.MetricsPath(path) + results.JournalSuffix} {
		if _, err := os.Lstat(j); err == nil && !force {
			return configErrorf("-o %s: the journal %s of an earlier run to this output is there (that run did not finish); its records are kept until you run `llmreplay recover %s`, or give --force to discard them", path, j, j)
		}
	}
	if mp := results.MetricsPath(path); mp != path {
		if _, err := os.Lstat(mp); err == nil && !force {
			return configErrorf("-o %s: the metrics file %s of an earlier run is there; choose another name, or give --force to replace it", path, mp)
		}
	}
	dir := filepath.Dir(path)
	st, err := os.Stat(dir)
	if err != nil {
		return configErrorf("-o %s: folder %s: %v", path, dir, pathErr(err))
	}
	if !st.IsDir() {
		return configErrorf("-o %s: %s is not a folder", path, dir)
	}
	f, err := os.CreateTemp(dir, ".llmreplay-preflight-*")
	if err != nil {
		return configErrorf("-o %s: cannot create a file in %s: %v", path, dir, pathErr(err))
	}
	name := f.Name()
	f.Close()
	os.Remove(name)
	return nil
}

// pathErr drops the path an *fs.PathError repeats (the message already names it).
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// output resolves the results file (DefaultOutputName when -o is not given) and checks it.
func (p *preparer) output(context.Context) error {
	out := p.cfg.Output
	if out == "" {
		t := time.Now()
		if !p.startAt.IsZero() {
			t = p.startAt
		}
		out = uniqueOutput(DefaultOutputName(t, p.shard))
	}
	if err := CheckOutput(out, p.cfg.Force); err != nil {
		return err
	}
	p.s.Output = out
	return nil
}

// Bytes per results row beyond its chunks, and per output chunk (chunk_ns int64 +
// chunk_tokens int32), in the journal (Arrow IPC, uncompressed): the estimate's basis.
// The Parquet file is smaller (compressed), and exists beside the journal while it is
// written, so the estimate counts both at the journal's size.
const (
	rowBytes   = 160
	chunkBytes = 12
)

// estimateBytes is a conservative estimate of the disk a run's journal and results file
// take at their largest: rows records of meanOut output chunks each, twice (journal and
// Parquet side by side before the journal is removed).
func estimateBytes(rows int64, meanOut float64) int64 {
	return 2 * rows * int64(rowBytes+chunkBytes*meanOut)
}

// diskCheck says on the log when the output's folder has less free space than the run's
// estimate: it does not refuse (the estimate is conservative, and a filesystem may
// compress), but a run that will fail to keep its results is said before it starts.
func (p *preparer) diskCheck() {
	rows := p.src.NumRows()
	if p.shard.Count > 1 {
		rows = rows/int64(p.shard.Count) + 1
	}
	if l := p.cfg.Limit; l > 0 && l < rows {
		rows = l
	}
	meanOut, err := p.meanOutput(10_000)
	if err != nil || rows <= 0 {
		return
	}
	need := estimateBytes(rows, meanOut)
	dir := filepath.Dir(p.s.Output)
	free, ok := diskFree(dir)
	if !ok || free >= uint64(need) {
		return
	}
	fmt.Fprintf(p.env.Log, "llmreplay: warning: %s has %s free; this run's journal and results may need up to %s (%d requests of %.0f output tokens on average, estimated): the run may fail to write them\n",
		dir, humanBytes(int64(free)), humanBytes(need), rows, meanOut)
}

// meanOutput is the mean output_tokens of the trace's first n rows.
func (p *preparer) meanOutput(n int) (float64, error) {
	r, err := p.open()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	var sum, k int64
	for k < int64(n) && r.Next() {
		sum += int64(r.Request().OutputTokens)
		k++
	}
	if err := r.Err(); err != nil || k == 0 {
		return 0, err
	}
	return float64(sum) / float64(k), nil
}

// diskFree is freeBytes; tests replace it.
var diskFree = freeBytes

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
}

// reachable checks that the endpoint answers before the first request: GET {base}/models
// with a short timeout. Any HTTP answer counts except 401 and 403 (every request would be
// refused: the API key); a transport error (nothing listens, a DNS name that does not
// resolve, TLS) stops the run with the reason. When no --model was given, model discovery
// already asked the same question.
func (p *preparer) reachable(ctx context.Context) error {
	if p.cfg.Model == "" {
		return nil
	}
	u := *p.base
	u.User = nil
	u.Path += "/models"
	// On the hard context: a graceful stop before the first request still lets the run
	// start (and end at once, with its empty results file), as it does when --model is
	// discovered.
	lctx, cancel := context.WithTimeout(HardContext(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(lctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	transport.Authorize(req, p.base, p.cfg.APIKey, p.header)
	hc := &http.Client{Transport: transport.NewTransport(1, p.cfg.Insecure)}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) {
			err = ue.Unwrap()
		}
		return fmt.Errorf("replay: the endpoint %s does not answer (GET %s: %v); no request was sent", wire.SafeEndpoint(p.base), wire.SafeEndpoint(&u), transport.Scrub(err.Error(), transport.Secrets(p.base, p.cfg.APIKey, p.header)))
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return fmt.Errorf("replay: the endpoint %s refused GET %s with %s: check --api-key (or $LLMREPLAY_API_KEY) and --header; no request was sent", wire.SafeEndpoint(p.base), wire.SafeEndpoint(&u), resp.Status)
	}
	return nil
}

// KeptJournalError is said when a run's results file could not be written (or its journal
// not closed cleanly): the records are in the journal, which is kept, and the message gives
// the exact command that turns it into a results file.
func KeptJournalError(journal, output string) error {
	return fmt.Errorf("replay: the results file %s was not written; every record this run journaled is kept in %s; turn it into a results file with:\n  llmreplay recover %s -o %s\n(or another -o if %s cannot be written)",
		output, journal, shellQuote(journal), shellQuote(output), output)
}

// shellQuote quotes s for a POSIX shell when it holds anything but safe characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:+=,@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// The preflight's length check (lengths): one short streaming request, asking for
// lengthCheckTokens output tokens after a builder prompt of lengthCheckPrompt tokens.
// Its builder request id lies below the trace's (non-negative) and calibration's probes
// (from -1<<40 down), so it shares no prefix with either.
const (
	lengthCheckTokens    = 4
	lengthCheckPrompt    = 16
	lengthCheckRequestID = -1 << 41
)

// lengths checks, with one short request, that the server honours the field that caps
// the output (wire.Encoder.MaxTokensField): a server that ignores it (Ollama ignores
// max_completion_tokens, which --backend openai sends on the chat API) generates every
// request of the trace until the client cuts its stream, and the run measures nothing
// it was meant to. One that sends more than asked stops the run with the field, what
// came back and what to do; one that sends fewer with a backend that forces the length
// is said on the log (lengths are upper bounds there), not refused. The request goes as
// the trace's will (the run's API, backend, model, credentials and headers), with
// X-Request-Id wire.PreflightRequestID, and is recorded nowhere. An error (an HTTP error
// status, a broken stream) stops the run with the server's message, scrubbed of secrets:
// every request of the trace would meet it. On the hard context, as reachable.
func (p *preparer) lengths(ctx context.Context) error {
	if p.unaryAPI() {
		fmt.Fprintf(p.env.Log, "llmreplay: preflight: --api %s asks for no output, so there is no output length to check\n", p.api)
		return nil
	}
	prompt, err := p.builder.AppendPrompt(nil, tokenize.PromptSpec{RequestID: lengthCheckRequestID, Tokens: lengthCheckPrompt})
	if err != nil {
		return err
	}
	l, err := p.cl.CheckLength(HardContext(ctx), prompt, lengthCheckTokens)
	asked := fmt.Sprintf("a preflight request for %d output tokens (%s with --api %s --backend %s, model %s)",
		lengthCheckTokens, l.Fields, p.api, p.backend, p.modelID)
	if err != nil {
		return fmt.Errorf("replay: the endpoint %s failed %s: %v; every request of the trace would be sent the same way, so none was sent", wire.SafeEndpoint(p.base), asked, err)
	}
	if l.Over() {
		return fmt.Errorf("replay: the endpoint %s does not honour %s: %s got %s; every request of the trace would run past its output length (until its model stops or the client cuts its stream), so none was sent. %s",
			wire.SafeEndpoint(p.base), l.Field, asked, lengthSeen(l), p.lengthAdvice(l.Field))
	}
	if l.Tokens() < l.Asked && l.Forced {
		fmt.Fprintf(p.env.Log, "llmreplay: preflight: %s got %d: this server does not honour %s, so output lengths are upper bounds on it (a request whose model stops early is shorter than the trace's)\n",
			asked, l.Tokens(), forcingFields(l))
	}
	return nil
}

// forcingFields names the fields of a length check's request that should have made its
// length exact: all but the cap, "ignore_eos or min_tokens" as the log says them.
func forcingFields(l transport.LengthCheck) string {
	var names []string
	for _, f := range []string{"ignore_eos", "min_tokens", "n_predict"} {
		if strings.Contains(l.Fields, f) {
			names = append(names, f)
		}
	}
	return strings.Join(names, " or ")
}

// lengthSeen says what a length check that overran saw.
func lengthSeen(l transport.LengthCheck) string {
	if l.Cut {
		return fmt.Sprintf("%d output chunks and the server was still sending (the request was canceled there)", l.Chunks)
	}
	if l.CompletionTokens > 0 {
		return fmt.Sprintf("%d output tokens (usage.completion_tokens; %d output chunks)", l.Tokens(), l.Chunks)
	}
	return fmt.Sprintf("%d output chunks", l.Chunks)
}

// lengthAdvice says what to do about a server that ignores field.
func (p *preparer) lengthAdvice(field string) string {
	if field == "max_output_tokens" {
		return "This server ignores max_output_tokens, the Responses API's only output cap (every backend sends it): give --api chat, whose max_tokens the engines honour."
	}
	if field != "max_tokens" {
		return fmt.Sprintf("This server ignores %s (Ollama does): give --backend vllm, which sends max_tokens (Ollama, vLLM, SGLang and llama.cpp honour it), or --backend tgi for max_tokens alone (for a server that refuses vllm's ignore_eos and min_tokens).", field)
	}
	advice := "This server ignores max_tokens: check that the endpoint is an inference server's OpenAI-compatible API and that nothing in between (a gateway, a proxy) drops the field."
	if k, ok := wire.Lookup(p.api); ok && k.OpenAIMaxTokens != "" && k.OpenAIMaxTokens != "max_tokens" && p.backend != wire.BackendOpenAI {
		advice += fmt.Sprintf(" A server that takes OpenAI's newer %s: --backend openai sends it.", k.OpenAIMaxTokens)
	}
	return advice
}
