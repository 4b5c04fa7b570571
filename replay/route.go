package replay

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// Routing as in production (docs/replay.md, "Routing"): every request carries
// X-Request-Id: RUNID-REQUESTID, so that a server's or a gateway's log joins the results
// file (vLLM logs it with --enable-request-id-headers); a request of a trace session
// carries the session id in a session-affinity header for routers (llm-d, gateways); and
// the trace's model column can choose the model (a LoRA adapter is a served model name).

// DefaultSessionHeader is --session-header's default.
const DefaultSessionHeader = "X-Session-ID"

// validateRoutes checks --header, --session-header and --model-map (Config.Validate).
func (c *Config) validateRoutes() error {
	h, err := ParseHeaders(c.Headers)
	if err != nil {
		return err
	}
	if err := transport.CheckSessionHeader(c.SessionHeader); err != nil {
		return &ConfigError{err.Error()}
	}
	for k := range h {
		if err := transport.CheckExtraHeader(k, c.SessionHeader); err != nil {
			return &ConfigError{err.Error()}
		}
	}
	_, err = ParseModelMap(c.ModelMap)
	return err
}

// ParseModelMap reads --model-map: trace=served pairs, comma-separated. Its errors name
// the flag.
func ParseModelMap(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	m := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return nil, configErrorf("--model-map %q: want TRACE=SERVED pairs separated by commas, e.g. gpt-4=llama-70b,gpt-3.5=llama-8b", pair)
		}
		if _, dup := m[k]; dup {
			return nil, configErrorf("--model-map: %q is mapped twice", k)
		}
		m[k] = v
	}
	return m, nil
}

// maxTraceModels bounds the distinct model names a trace scan keeps.
const maxTraceModels = 4096

// traceModels counts the requests of each model name of src's model column (null models
// are not counted), over at most limit rows (0: all). more is set when the column holds
// more than maxTraceModels names (then counts holds the first ones).
func traceModels(src trace.Source, limit int64) (counts map[string]int64, more bool, err error) {
	counts = map[string]int64{}
	for n := int64(0); (limit == 0 || n < limit) && src.Next(); n++ {
		m := src.Request().Model
		if m == "" {
			continue
		}
		if _, ok := counts[m]; ok || len(counts) < maxTraceModels {
			counts[m]++
		} else {
			more = true
		}
	}
	return counts, more, src.Err()
}

// routes decides the model of each request from the trace's model column, --model-map
// and --model, and records the decision in the run metadata:
//
//   - --model-map: each of the trace's models is sent as the model the map names; every
//     served name must be one the endpoint lists, and every model of the trace mapped.
//   - else, with --model: every request goes to it (a notice says the column is unused).
//   - else, when every model of the column is served: each request goes to its own.
//   - else: every request goes to the first served model, and a notice says why.
//
// A name is served when wire.ServedModel matches it with the list (with or without
// Ollama's ":latest"), and a request carries the name as the endpoint lists it. Requests
// with no model (a null) go to the run's model. The whole trace's column is read
// (up to --limit plus --warmup rows), not one shard's share, so every shard of a run
// decides alike.
func (p *preparer) routes(ctx context.Context) error {
	cfg := p.cfg
	mm, _ := ParseModelMap(cfg.ModelMap)
	hasModels := p.src.HasValues(trace.ColModel)
	if mm == nil && cfg.Model != "" {
		if hasModels {
			p.meta.Flags["model-column"] = "not used: --model"
			fmt.Fprintf(p.env.Log, "llmreplay: --model %s: every request goes to it; the trace's model column is not used (--model-map maps it)\n", cfg.Model)
		}
		return nil
	}
	var counts map[string]int64
	var more bool
	if hasModels {
		scan, err := p.open()
		if err != nil {
			return err
		}
		counts, more, err = traceModels(scan, cfg.scanRows())
		scan.Close()
		if err != nil {
			return err
		}
	}
	names := slices.Sorted(maps.Keys(counts))
	if mm != nil {
		if len(names) == 0 {
			return configErrorf("--model-map: the trace has no model column (or no request with a model)")
		}
		var unmapped []string
		for _, n := range names {
			if _, ok := mm[n]; !ok {
				unmapped = append(unmapped, fmt.Sprintf("%q (%d requests)", n, counts[n]))
			}
		}
		if more {
			return configErrorf("--model-map: the trace has more than %d models", maxTraceModels)
		}
		if len(unmapped) > 0 {
			return configErrorf("--model-map: no mapping for the trace's %s", listSome(unmapped, 5))
		}
		served, err := p.served(ctx)
		if err != nil {
			return configErrorf("--model-map: cannot check the served models: %v", err)
		}
		p.models = make(map[string]string, len(mm))
		for _, k := range slices.Sorted(maps.Keys(mm)) {
			entry, ok := wire.ServedModel(served, mm[k])
			if !ok {
				return configErrorf("--model-map %s=%s: %s does not serve %q (it serves %s)", k, mm[k], p.meta.Endpoint, mm[k], listSome(quoteAll(served), 10))
			}
			p.models[k] = entry
		}
		p.meta.Flags["model-column"] = "mapped"
		fmt.Fprintf(p.env.Log, "llmreplay: the trace's %d models are sent as --model-map maps them\n", len(names))
		return nil
	}
	if len(names) == 0 {
		return nil
	}
	served, err := p.served(ctx)
	if err != nil {
		return fmt.Errorf("replay: the trace has a model column: %w", err)
	}
	var unserved []string
	sent := make(map[string]string, len(names))
	for _, n := range names {
		if entry, ok := wire.ServedModel(served, n); ok {
			sent[n] = entry
		} else {
			unserved = append(unserved, strconv.Quote(n))
		}
	}
	if more || len(unserved) > 0 {
		why := fmt.Sprintf("%s not served", listSome(unserved, 3))
		if more {
			why = fmt.Sprintf("over %d models", maxTraceModels)
		}
		p.meta.Flags["model-column"] = "not used: not served"
		fmt.Fprintf(p.env.Log, "llmreplay: the trace's model column is not used (%s by %s): every request goes to %s (--model); map it with --model-map\n", why, p.meta.Endpoint, p.modelID)
		return nil
	}
	p.models = sent
	p.meta.Flags["model-column"] = "as is"
	fmt.Fprintf(p.env.Log, "llmreplay: each request goes to its trace model (%d models, all served by %s)\n", len(names), p.meta.Endpoint)
	return nil
}

// served lists the endpoint's models once.
func (p *preparer) served(ctx context.Context) ([]string, error) {
	if p.servedIDs == nil {
		ids, err := listModels(ctx, p.base, p.cfg.APIKey, p.header, p.cfg.Insecure)
		if err != nil {
			return nil, err
		}
		p.servedIDs = ids
	}
	return p.servedIDs, nil
}

// listModels is ListModels, waiting at most 30 s.
func listModels(ctx context.Context, base *url.URL, apiKey string, header http.Header, insecure bool) ([]string, error) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return transport.ListModels(lctx, base, apiKey, header, insecure)
}

func quoteAll(s []string) []string {
	q := make([]string, len(s))
	for i, x := range s {
		q[i] = strconv.Quote(x)
	}
	return q
}

// listSome joins at most n items, saying how many more there are.
func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}
