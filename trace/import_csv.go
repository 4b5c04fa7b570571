package trace

import (
	"bytes"
	"fmt"
	"github.com/llmreplay/llmreplay/internal/filekind"
	"io"
	"sort"
	"strings"
)

// header maps a CSV header's column names to their indexes.
type header struct {
	names []string
	idx   map[string]int
}

func newHeader(fields [][]byte) header {
	h := header{idx: map[string]int{}}
	for i, f := range fields {
		n := strings.TrimSpace(string(f))
		h.names = append(h.names, n)
		if _, dup := h.idx[n]; !dup {
			h.idx[n] = i
		}
	}
	return h
}

// find returns the index of the column named name: an exact match first, else the one
// column whose name matches ignoring case. -1 when absent.
func (h header) find(name string) int {
	if i, ok := h.idx[name]; ok {
		return i
	}
	found := -1
	for i, n := range h.names {
		if strings.EqualFold(n, name) {
			if found >= 0 {
				return -1
			}
			found = i
		}
	}
	return found
}

// csvSource reads the header of a CSV trace and then its rows.
type csvSource struct {
	p    *pipeline
	r    *csvReader
	head header
	row  int64 // 0-based data row index: the request id
}

func openCSV(in io.Reader, p *pipeline) (*csvSource, error) {
	c := &csvSource{p: p, r: newCSVReader(in), row: -1}
	f, err := c.r.read()
	if err == io.EOF {
		return nil, fmt.Errorf("trace: import %s: empty file, no CSV header", p.name)
	}
	if err != nil {
		return nil, &SyntaxError{File: p.name, Unit: "line", Line: c.r.line, Err: err}
	}
	c.head = newHeader(f)
	return c, nil
}

// require returns the index of each named column, or an error naming the missing one.
func (c *csvSource) require(names ...string) ([]int, error) {
	out := make([]int, len(names))
	for i, n := range names {
		if out[i] = c.head.find(n); out[i] < 0 {
			return nil, fmt.Errorf("trace: import %s line 1: column %q: missing (header has %s)", c.p.name, n, filekind.Printable(strings.Join(c.head.names, ","), 200))
		}
	}
	return out, nil
}

// next reads the next data row; it checks the field count against the header.
func (c *csvSource) next() ([][]byte, bool, error) {
	f, err := c.r.read()
	if err == io.EOF {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, &SyntaxError{File: c.p.name, Unit: "line", Line: c.r.line, Err: err}
	}
	c.row++
	c.p.rep.RowsRead++
	if len(f) != len(c.head.names) {
		return nil, false, c.errorf("", "%d fields, the header has %d", len(f), len(c.head.names))
	}
	return f, true, nil
}

func (c *csvSource) errorf(col string, format string, a ...any) error {
	return &SyntaxError{File: c.p.name, Unit: "line", Line: c.r.line, Field: col, Err: fmt.Errorf(format, a...)}
}

// importAzure reads Azure LLM inference traces: TIMESTAMP,ContextTokens,GeneratedTokens
// (2023 and 2024 releases; other columns are ignored). With lmm it reads the 2025
// multimodal trace (AzureLMMInferenceDataset2025.md in Azure/AzurePublicDataset), which
// adds NumImages: each row sends that many images of unknown size (0x0), and
// ContextTokens, the whole prompt as the service counted it, images included (the
// dataset says no more: docs/trace-format.md), is prompt_tokens; image_tokens stays null.
// Without lmm a file with NumImages imports without its images, counted in the report.
func importAzure(in io.Reader, p *pipeline, lmm bool) error {
	c, err := openCSV(in, p)
	if err != nil {
		return err
	}
	cols, err := c.require("TIMESTAMP", "ContextTokens", "GeneratedTokens")
	if err != nil {
		return err
	}
	numImages := c.head.find("NumImages")
	if lmm {
		is, err := c.require("NumImages")
		if err != nil {
			return err
		}
		numImages = is[0]
	}
	p.abs = true
	p.meta.Source = "azure"
	for {
		f, ok, err := c.next()
		if !ok {
			return err
		}
		ts, err := parseUnixNS(f[cols[0]])
		if err != nil {
			return c.errorf("TIMESTAMP", "%v", err)
		}
		if c.row == 0 {
			p.meta.Source = azureRelease(f[cols[0]])
			if lmm {
				p.meta.Source = "azure-lmm-2025"
			}
		}
		pt, err := tokens(f[cols[1]])
		if err != nil {
			return c.errorf("ContextTokens", "%v", err)
		}
		ot, err := tokens(f[cols[2]])
		if err != nil {
			return c.errorf("GeneratedTokens", "%v", err)
		}
		req := Request{ID: c.row, PromptTokens: pt, OutputTokens: ot}
		if lmm {
			n, err := parseCount(f[numImages])
			if err != nil {
				return c.errorf("NumImages", "%v", err)
			}
			if n > MaxImages {
				return c.errorf("NumImages", "%d, at most %d", n, MaxImages)
			}
			if n > 0 {
				req.Images = make([]Image, n) // the trace gives counts, not sizes
			}
		} else if numImages >= 0 {
			// --from azure ignores the column as it always did; the report says what it left.
			if n, err := parseCount(f[numImages]); err == nil && n > 0 {
				p.rep.adjust("images not imported (NumImages > 0; --from azure-lmm keeps them)")
			}
		}
		if err := p.emit(row{ts: ts, line: c.r.line, req: req}); err != nil {
			return err
		}
	}
}

// azureRelease names the release by its timestamp form: a zone offset is 2024's,
// a Z or 'T' is 2025's ISO 8601, neither is 2023's.
func azureRelease(ts []byte) string {
	switch {
	case bytes.ContainsAny(ts, "TZ"):
		return "azure-2025"
	case len(ts) > 19 && bytes.ContainsAny(ts[19:], "+-"):
		return "azure-2024"
	}
	return "azure-2023"
}

// importBurstGPT reads BurstGPT: v1 Timestamp,Model,Request tokens,Response tokens,
// Total tokens,Log Type, and v2 with Session ID and Elapsed time inserted.
func importBurstGPT(in io.Reader, p *pipeline) error {
	c, err := openCSV(in, p)
	if err != nil {
		return err
	}
	cols, err := c.require("Timestamp", "Request tokens", "Response tokens")
	if err != nil {
		return err
	}
	model, session := c.head.find("Model"), c.head.find("Session ID")
	p.meta.Source = "burstgpt"
	if session >= 0 {
		p.meta.Source = "burstgpt-v2"
	}
	for {
		f, ok, err := c.next()
		if !ok {
			return err
		}
		ts, err := parseScaled(f[cols[0]], 1e9)
		if err != nil {
			return c.errorf("Timestamp", "%v", err)
		}
		if ts < 0 {
			return c.errorf("Timestamp", "%s is negative", f[cols[0]])
		}
		pt, err := parseCount(f[cols[1]])
		if err != nil {
			return c.errorf("Request tokens", "%v", err)
		}
		ot, err := parseCount(f[cols[2]])
		if err != nil {
			return c.errorf("Response tokens", "%v", err)
		}
		if ot == 0 {
			// BurstGPT marks failed requests with 0 response tokens.
			if !p.opts.KeepFailed {
				p.rep.drop("failed request (0 response tokens)")
				continue
			}
			p.rep.adjust("failed request kept, zero lengths raised to 1")
			ot = 1
			if pt == 0 {
				pt = 1
			}
		}
		if pt < 1 {
			return c.errorf("Request tokens", "0, must be >= 1")
		}
		if pt > 1<<31-1 || ot > 1<<31-1 {
			return c.errorf("Request tokens", "out of range")
		}
		req := Request{ID: c.row, PromptTokens: int32(pt), OutputTokens: int32(ot)}
		if model >= 0 {
			req.Model = p.intern(string(f[model]))
		}
		if session >= 0 && len(f[session]) > 0 {
			req.SessionID, req.HasSession = sessionKey(f[session]), true
		}
		if err := p.emit(row{ts: ts, line: c.r.line, req: req}); err != nil {
			return err
		}
	}
}

var models = map[string]string{}

// internModel shares the string of a repeated model name: a trace has few models and
// millions of rows, and the Sort buffer would otherwise hold a copy per row.
func (p *pipeline) intern(s string) string {
	if v, ok := p.models[s]; ok {
		return v
	}
	if p.models == nil {
		p.models = map[string]string{}
	}
	if len(p.models) < 4096 {
		p.models[s] = s
	}
	return s
}

// Generic field names for --map.
const (
	FieldArrival   = "arrival"
	FieldPrompt    = "prompt_tokens"
	FieldOutput    = "output_tokens"
	FieldSession   = "session_id"
	FieldRequestID = "request_id"
	FieldModel     = "model"
	FieldText      = "prompt"
	FieldTools     = ColToolTokens // tokens of prompt_tokens that are tool definitions
	// FieldImages is the number of images a request sends (their sizes unknown: 0x0).
	FieldImages = ColImages
	// FieldImageTokens is how many of prompt_tokens the images count for.
	FieldImageTokens = ColImageTokens
)

var mapFields = []string{FieldArrival, FieldPrompt, FieldOutput, FieldSession, FieldRequestID, FieldModel, FieldText, FieldTools,
	FieldImages, FieldImageTokens}

// imageCount parses an images value into req: a count in [0, MaxImages] of images of
// unknown size; an empty value is none.
func imageCount(b []byte, req *Request) error {
	if len(b) == 0 {
		return nil
	}
	n, err := parseCount(b)
	if err != nil {
		return err
	}
	if n > MaxImages {
		return fmt.Errorf("%d, at most %d", n, MaxImages)
	}
	if n > 0 {
		req.Images = make([]Image, n)
	}
	return nil
}

// imageTokens parses an image_tokens value into req, after its images and tools: a count
// within the prompt beside the tools, 0 when the row has no images; an empty value is none.
func imageTokens(b []byte, req *Request) error {
	if len(b) == 0 {
		return nil
	}
	v, err := parseCount(b)
	if err != nil {
		return err
	}
	switch {
	case v > int64(req.PromptTokens):
		return fmt.Errorf("%d is more than prompt_tokens %d (the images' tokens are part of the prompt)", v, req.PromptTokens)
	case v > 0 && len(req.Images) == 0:
		return fmt.Errorf("%d but the row sends no images (map images= too)", v)
	case v+int64(req.Tools()) > int64(req.PromptTokens):
		return fmt.Errorf("%d and tool_tokens %d are more than prompt_tokens %d together", v, req.Tools(), req.PromptTokens)
	}
	req.ImageTokens, req.HasImageTokens = int32(v), true
	return nil
}

// toolTokens parses a tool_tokens value of a row whose prompt is prompt tokens: a count
// in [0, prompt]; an empty value is none (ok false).
func toolTokens(b []byte, prompt int32) (n int32, ok bool, err error) {
	if len(b) == 0 {
		return 0, false, nil
	}
	v, err := parseCount(b)
	if err != nil {
		return 0, false, err
	}
	if v > int64(prompt) {
		return 0, false, fmt.Errorf("%d is more than prompt_tokens %d (the tool definitions are part of the prompt)", v, prompt)
	}
	return int32(v), true, nil
}

// ParseMap parses --map's "field=column,field=column" into a map, checking field names
// and that arrival, prompt_tokens and output_tokens are present.
func ParseMap(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || v == "" {
			return nil, fmt.Errorf("map: %q is not FIELD=COLUMN", kv)
		}
		known := false
		for _, f := range mapFields {
			known = known || f == k
		}
		if !known {
			return nil, fmt.Errorf("map: unknown field %q (want %s)", k, strings.Join(mapFields, ", "))
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("map: field %q given twice", k)
		}
		m[k] = v
	}
	var missing []string
	for _, k := range []string{FieldArrival, FieldPrompt, FieldOutput} {
		if _, ok := m[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("map: missing %s (want arrival=COL,prompt_tokens=COL,output_tokens=COL)", strings.Join(missing, ", "))
	}
	return m, nil
}

// timeUnitNS returns the nanoseconds of a --time-unit, or 0 for datetime.
func timeUnitNS(u string) (int64, error) {
	switch u {
	case "s", "":
		return 1e9, nil
	case "ms":
		return 1e6, nil
	case "us":
		return 1e3, nil
	case "ns":
		return 1, nil
	case "datetime":
		return 0, nil
	}
	return 0, fmt.Errorf("time unit %q: want s, ms, us, ns or datetime", u)
}

// genericParser turns mapped string fields into a row; shared by CSV and JSONL.
type genericParser struct {
	unit int64 // ns per unit; 0 for datetime
}

func (g genericParser) arrival(b []byte) (int64, error) {
	if g.unit == 0 {
		return parseUnixNS(b)
	}
	return parseScaled(b, g.unit)
}

func importGenericCSV(in io.Reader, p *pipeline) error {
	if len(p.opts.Map) == 0 {
		return fmt.Errorf("trace: import %s: the csv format needs a column map (--map arrival=COL,prompt_tokens=COL,output_tokens=COL)", p.name)
	}
	unit, err := timeUnitNS(p.opts.TimeUnit)
	if err != nil {
		return fmt.Errorf("trace: import %s: %w", p.name, err)
	}
	g := genericParser{unit: unit}
	c, err := openCSV(in, p)
	if err != nil {
		return err
	}
	cols, err := c.require(p.opts.Map[FieldArrival], p.opts.Map[FieldPrompt], p.opts.Map[FieldOutput])
	if err != nil {
		return err
	}
	opt := map[string]int{}
	for _, k := range []string{FieldSession, FieldRequestID, FieldModel, FieldText, FieldTools, FieldImages, FieldImageTokens} {
		if col, ok := p.opts.Map[k]; ok {
			ix, err := c.require(col)
			if err != nil {
				return err
			}
			opt[k] = ix[0]
		}
	}
	p.abs = unit == 0
	p.meta.Source = "csv"
	for {
		f, ok, err := c.next()
		if !ok {
			return err
		}
		ts, err := g.arrival(f[cols[0]])
		if err != nil {
			return c.errorf(p.opts.Map[FieldArrival], "%v", err)
		}
		pt, err := tokens(f[cols[1]])
		if err != nil {
			return c.errorf(p.opts.Map[FieldPrompt], "%v", err)
		}
		ot, err := tokens(f[cols[2]])
		if err != nil {
			return c.errorf(p.opts.Map[FieldOutput], "%v", err)
		}
		req := Request{ID: c.row, PromptTokens: pt, OutputTokens: ot}
		if i, ok := opt[FieldRequestID]; ok {
			id, err := parseCount(f[i])
			if err != nil {
				return c.errorf(p.opts.Map[FieldRequestID], "%v", err)
			}
			req.ID = id
		}
		if i, ok := opt[FieldSession]; ok && len(f[i]) > 0 {
			req.SessionID, req.HasSession = sessionKey(f[i]), true
		}
		if i, ok := opt[FieldModel]; ok {
			req.Model = p.intern(string(f[i]))
		}
		if i, ok := opt[FieldText]; ok {
			req.Prompt = string(f[i])
		}
		if i, ok := opt[FieldTools]; ok {
			if req.ToolTokens, req.HasToolTokens, err = toolTokens(f[i], pt); err != nil {
				return c.errorf(p.opts.Map[FieldTools], "%v", err)
			}
		}
		for _, k := range []struct {
			field string
			parse func([]byte, *Request) error
		}{{FieldImages, imageCount}, {FieldImageTokens, imageTokens}} {
			if i, ok := opt[k.field]; ok {
				if err := k.parse(f[i], &req); err != nil {
					return c.errorf(p.opts.Map[k.field], "%v", err)
				}
			}
		}
		if err := p.emit(row{ts: ts, line: c.r.line, req: req}); err != nil {
			return err
		}
	}
}
