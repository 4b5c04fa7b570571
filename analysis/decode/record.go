package decode

import (
	"fmt"
	"slices"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"

	"github.com/llmreplay/llmreplay/replay/results"
)

// A record of a row group is decoded request by request in four steps, each validating
// what it reads: the scalars (request), the chunk lists (chunkRow), the stream of an ok
// request into the ITL histograms and token bins (addStream), and the store into Data's
// columns. The steps return a *FieldError without file and row, which addRecord fills in.

// recordCols are the scalar columns analysis reads of one record, typed.
type recordCols struct {
	sched, sent, first, end               *array.Int64
	prompt, promptSrv, outTarget, outToks *array.Int32
	outSrc, status                        *array.String
	// inputs (revision 1.4) when the record holds it: a request with inputs is not
	// streamed, so an ok one has no first token.
	inputs *array.Int32
}

// locateRecord finds rec's columns by name in l, the layout of the records' schema.
func locateRecord(rec arrow.Record, l *results.Layout) (recordCols, error) {
	x := results.NewArrays(rec, l)
	c := recordCols{
		sched:     results.Array[*array.Int64](x, results.ColScheduledNS),
		sent:      results.Array[*array.Int64](x, results.ColSentNS),
		first:     results.Array[*array.Int64](x, results.ColFirstTokenNS),
		end:       results.Array[*array.Int64](x, results.ColEndNS),
		prompt:    results.Array[*array.Int32](x, results.ColPromptTokens),
		promptSrv: results.Array[*array.Int32](x, results.ColPromptTokensServer),
		outTarget: results.Array[*array.Int32](x, results.ColOutputTokensTarget),
		outToks:   results.Array[*array.Int32](x, results.ColOutputTokens),
		outSrc:    results.Array[*array.String](x, results.ColOutputTokensSource),
		status:    results.Array[*array.String](x, results.ColStatus),
		inputs:    results.Array[*array.Int32](x, results.ColInputs),
	}
	return c, x.Err()
}

// request is one row's scalars, its times shifted onto the common time axis.
type request struct {
	st                int   // index in Statuses
	sched, s, f, e    int64 // scheduled, sent, first token, end; Null64 when null
	prompt, promptSrv int32 // promptSrv Null32 when null
	outTarget, ot     int32 // ot (output_tokens) Null32 when null
	src               uint8 // output_tokens_source: 0 none, 1 usage, 2 tokenizer
}

// bad is a bad value in the row being decoded; the caller names the file and row.
func bad(field, format string, a ...any) *FieldError {
	return &FieldError{Field: field, Err: fmt.Errorf(format, a...)}
}

// request decodes and validates row i's scalars: a known status, the times inside the time
// axis and in order (sent, first token, end; all three set in an ok request, but for the
// first token of a request with inputs, which is not streamed: its end follows its send),
// the required counts set and output_tokens not negative, a known output_tokens_source.
func (c *recordCols) request(i int, shift int64) (request, *FieldError) {
	var r request
	if !c.status.IsValid(i) {
		return r, bad(results.ColStatus, "null")
	}
	s := c.status.Value(i)
	r.st = -1
	for k, name := range Statuses {
		if results.Status(s) == name {
			r.st = k
			break
		}
	}
	if r.st < 0 {
		return r, bad(results.ColStatus, "unknown status %q", s)
	}
	if !c.sched.IsValid(i) {
		return r, bad(results.ColScheduledNS, "null")
	}
	opt64 := func(a *array.Int64) int64 {
		if a.IsValid(i) {
			return a.Value(i) + shift
		}
		return Null64
	}
	r.sched, r.s, r.f, r.e = c.sched.Value(i)+shift, opt64(c.sent), opt64(c.first), opt64(c.end)
	for _, t := range []struct {
		name string
		v    int64
	}{{results.ColScheduledNS, r.sched}, {results.ColSentNS, r.s}, {results.ColFirstTokenNS, r.f}, {results.ColEndNS, r.e}} {
		if t.v != Null64 && (t.v < 0 || t.v >= int64(MaxSpan)) {
			return r, bad(t.name, "%d ns is outside [0, %v) from the run start", t.v-shift, MaxSpan)
		}
	}
	unary := c.inputs != nil && c.inputs.IsValid(i)
	if r.st == int(StOK) {
		switch {
		case r.s == Null64:
			return r, bad(results.ColSentNS, "null in an ok request")
		case r.f == Null64 && !unary:
			return r, bad(results.ColFirstTokenNS, "null in an ok request")
		case r.e == Null64:
			return r, bad(results.ColEndNS, "null in an ok request")
		}
	}
	if r.f != Null64 && (r.s == Null64 || r.f < r.s) {
		return r, bad(results.ColFirstTokenNS, "%d before sent_ns", r.f-shift)
	}
	switch {
	case r.e == Null64:
	case unary && r.f == Null64:
		if r.s == Null64 || r.e < r.s {
			return r, bad(results.ColEndNS, "%d before sent_ns", r.e-shift)
		}
	case r.f == Null64 || r.e < r.f:
		return r, bad(results.ColEndNS, "%d before first_token_ns", r.e-shift)
	}
	return r, c.counts(i, &r)
}

// counts decodes and validates row i's token counts and their source into r.
func (c *recordCols) counts(i int, r *request) *FieldError {
	opt32 := func(a *array.Int32) int32 {
		if a.IsValid(i) {
			return a.Value(i)
		}
		return Null32
	}
	if !c.prompt.IsValid(i) {
		return bad(results.ColPromptTokens, "null")
	}
	if !c.outTarget.IsValid(i) {
		return bad(results.ColOutputTokensTarget, "null")
	}
	r.prompt, r.promptSrv, r.outTarget = c.prompt.Value(i), opt32(c.promptSrv), c.outTarget.Value(i)
	r.ot = opt32(c.outToks)
	if r.ot != Null32 && r.ot < 0 {
		return bad(results.ColOutputTokens, "%d is negative", r.ot)
	}
	if c.outSrc.IsValid(i) {
		switch c.outSrc.Value(i) {
		case results.SourceUsage:
			r.src = 1
		case results.SourceTokenizer:
			r.src = 2
		case "":
		default:
			return bad(results.ColOutputTokensSource, "unknown source %q", c.outSrc.Value(i))
		}
	}
	return nil
}

// chunkRow is one row's chunk lists: borrowed from the cursors until their next call.
type chunkRow struct {
	cns    []int64 // chunk_ns: offsets from sent
	ctk    []int32 // chunk_tokens, when hasTok
	hasTok bool
	tokSum int64 // sum of chunk_tokens; -1 when chunk_tokens is null
}

// chunks reads r's chunk lists and validates them: no chunks in a request never sent,
// chunk_tokens one non-negative entry per chunk, chunk_ns inside the time axis, and in
// order unless r is ok (addStream checks an ok request's order in its own loop). It counts
// the rows with chunk_tokens, multi-token chunks and first/last chunks that disagree with
// first_token_ns and end_ns.
func (w *worker) chunks(r *request, nsCur *listCursor[int64], tokCur *listCursor[int32]) (chunkRow, *FieldError) {
	var ch chunkRow
	cns, _, err := nsCur.next()
	if err != nil {
		return ch, bad(results.ColChunkNS, "%v", err)
	}
	ctk, tokNull, err := tokCur.next()
	if err != nil {
		return ch, bad(results.ColChunkTokens, "%v", err)
	}
	s := r.s
	nc := len(cns)
	if nc > 0 && s == Null64 {
		return ch, bad(results.ColChunkNS, "chunks in a request never sent")
	}
	ch.cns, ch.hasTok, ch.tokSum = cns, !tokNull, -1
	if ch.hasTok {
		if len(ctk) != nc {
			return ch, bad(results.ColChunkTokens, "%d entries for %d chunks", len(ctk), nc)
		}
		w.hasChunkT++
		ch.tokSum = 0
		for k, v := range ctk {
			if v < 0 {
				return ch, bad(results.ColChunkTokens, "entry %d is %d", k, v)
			}
			if v > 1 {
				w.multiTokenChunks = true
			}
			ch.tokSum += int64(v)
		}
		ch.ctk = ctk
	}
	// chunk_ns must be non-decreasing offsets inside the time axis. Checking is folded
	// into the ok-request loop of addStream, the hottest loop of a load (10^8 chunks).
	if nc > 0 && (cns[0] < 0 || cns[nc-1] >= int64(MaxSpan)-s) {
		k := 0
		if cns[0] >= 0 {
			k = nc - 1
		}
		return ch, bad(results.ColChunkNS, "entry %d (%d) is outside [0, %v) from the run start", k, cns[k], MaxSpan)
	}
	if r.st != int(StOK) || (nc > 0 && cns[0] > cns[nc-1]) {
		for k := 1; k < nc; k++ {
			if cns[k] < cns[k-1] {
				return ch, bad(results.ColChunkNS, "entry %d (%d) before entry %d (%d)", k, cns[k], k-1, cns[k-1])
			}
		}
	}
	if nc > 0 && (r.f == Null64 || r.e == Null64 || cns[0] != r.f-s || cns[nc-1] != r.e-s) {
		w.firstChunkMismatch++
	}
	return ch, nil
}

// addStream adds the chunks of an ok request to the worker: every gap between chunks to
// the ITL histograms, every chunk's tokens to the 10 ms bin it arrived in, the stream to
// the buffered-stream tally. It checks the chunks' order as it goes.
func (w *worker) addStream(r *request, ch *chunkRow) *FieldError {
	cns, ctk, hasTok := ch.cns, ch.ctk, ch.hasTok
	s, ot := r.s, r.ot
	nc := len(cns)
	// chunk_tokens that count nothing for an answer the server counted are placeholders,
	// not counts: files recorded before the client believed per-chunk usage only when it
	// moved hold Ollama's all-zero usage as every chunk's tokens. They are read as absent.
	if hasTok && ch.tokSum == 0 && ot != Null32 && ot > 0 {
		hasTok = false
	}
	// Tokens per chunk: chunk_tokens when the server sent them; else the reported
	// output_tokens spread evenly over the chunks (1 per chunk when unknown), so
	// the binned tokens of a request add up to its output_tokens.
	per := 1.0
	if !hasTok && ot != Null32 {
		per = float64(ot) / float64(nc)
	}
	if last := (s + cns[nc-1]) / BinNS; int64(len(w.bins)) <= last {
		w.bins = append(w.bins, make([]float64, last+1-int64(len(w.bins)))...)
	}
	bins := w.bins
	h := &w.itl
	tok0 := per
	if hasTok {
		tok0 = float64(ctk[0])
	}
	bins[(s+cns[0])/BinNS] += tok0
	// The gaps go straight into the µs histogram; their sum and max are folded in
	// once per request.
	var sum, mx int64
	zeros := 0 // gaps of 0: chunks of one read
	prev := cns[0]
	for k := 1; k < nc; k++ {
		v := cns[k]
		g := v - prev
		if g < 0 {
			return bad(results.ColChunkNS, "entry %d (%d) before entry %d (%d)", k, v, k-1, prev)
		}
		prev = v
		sum += g
		mx = max(mx, g)
		if g == 0 {
			zeros++
		}
		h.CountUS((g + 500) / 1000)
		tok := per
		if hasTok {
			tok = float64(ctk[k])
			if ctk[k] > 0 {
				w.itlTok.Add(float64(g)/float64(ctk[k]), int64(ctk[k]))
			}
		}
		b := (s + v) / BinNS
		if b >= int64(len(bins)) {
			// Past the last chunk's bin: a later chunk must come earlier than this one.
			for k2 := k + 1; k2 < nc; k2++ {
				if cns[k2] < cns[k2-1] {
					return bad(results.ColChunkNS, "entry %d (%d) before entry %d (%d)", k2, cns[k2], k2-1, cns[k2-1])
				}
			}
		}
		bins[b] += tok
	}
	if nc > 1 {
		h.AddTotals(int64(nc-1), float64(sum), float64(mx))
	}
	w.buf.AddStream(nc, zeros, sum)
	return nil
}

// addRecord decodes rec, the record of rows [row0, row0+n) of the file at path, into the
// next n rows of the part.
func (p *part) addRecord(path string, row0 int64, rec arrow.Record, l *results.Layout, nsCur *listCursor[int64], tokCur *listCursor[int32], shift int64) error {
	d, w := p.d, p.w
	if p.at+int(rec.NumRows()) > p.end {
		return fmt.Errorf("analysis: read %s: row group holds more rows than the footer says", path)
	}
	c, err := locateRecord(rec, l)
	if err != nil {
		return fmt.Errorf("analysis: read %s: %w", path, err)
	}
	n := int(rec.NumRows())
	for i := 0; i < n; i++ {
		r, fe := c.request(i, shift)
		var ch chunkRow
		if fe == nil {
			ch, fe = w.chunks(&r, nsCur, tokCur)
		}
		if fe == nil && r.st == int(StOK) && len(ch.cns) > 0 {
			fe = w.addStream(&r, &ch)
		}
		if fe != nil {
			fe.File, fe.Row = path, row0+int64(i)
			return fe
		}
		j := p.at
		p.at++
		d.Scheduled[j] = r.sched
		d.Sent[j], d.First[j], d.End[j] = r.s, r.f, r.e
		d.Prompt[j], d.PromptServer[j] = r.prompt, r.promptSrv
		d.OutTarget[j], d.OutTokens[j], d.OutSource[j] = r.outTarget, r.ot, r.src
		d.Status[j], d.NChunks[j], d.ChunkTokSum[j] = uint8(r.st), int32(len(ch.cns)), ch.tokSum
	}
	return nil
}

// addOptional stores the optional columns of rec's rows (the rows addRecord just stored,
// ending at p.at), refusing negative values: a count, an id or a wait is never negative.
// first_answer_ns is an offset like first_token_ns: shifted onto the common time axis and
// checked to lie between the row's first token and its end.
func (p *part) addOptional(path string, row0 int64, rec arrow.Record, l *results.Layout, opt []int, shift int64) error {
	n := int(rec.NumRows())
	at := p.at - n
	x := results.NewArrays(rec, l)
	for _, k := range opt {
		name := optionalColumns[k]
		bad := func(i int, v int64) error {
			return &FieldError{File: path, Row: row0 + int64(i), Field: name, Err: fmt.Errorf("%d is negative", v)}
		}
		switch {
		case k == oReasoningSource:
			if err := p.addSources(path, row0, x, p.d.ReasoningSource[at:at+n]); err != nil {
				return err
			}
		case is64(k):
			a := results.Array[*array.Int64](x, name)
			if err := x.Err(); err != nil || a == nil {
				return fmt.Errorf("analysis: read %s: %w", path, missing(name, err))
			}
			dst := p.d.optional64(k)[at : at+n]
			for i := range n {
				if a.IsValid(i) {
					if v := a.Value(i); v < 0 {
						return bad(i, v)
					}
					dst[i] = a.Value(i)
				}
			}
			if k == oFirstAnswer {
				if err := p.shiftFirstAnswer(path, row0, dst, at, shift); err != nil {
					return err
				}
			}
		default:
			a := results.Array[*array.Int32](x, name)
			if err := x.Err(); err != nil || a == nil {
				return fmt.Errorf("analysis: read %s: %w", path, missing(name, err))
			}
			dst := p.d.optional32(k)[at : at+n]
			for i := range n {
				if a.IsValid(i) {
					if v := a.Value(i); v < 0 {
						return bad(i, int64(v))
					}
					dst[i] = a.Value(i)
				}
			}
		}
	}
	return nil
}

// addSources stores reasoning_tokens_source of a record's rows as indexes in
// ReasoningSources, refusing a value the contract does not name.
func (p *part) addSources(path string, row0 int64, x *results.Arrays, dst []int32) error {
	name := results.ColReasoningTokensSource
	a := results.Array[*array.String](x, name)
	if err := x.Err(); err != nil || a == nil {
		return fmt.Errorf("analysis: read %s: %w", path, missing(name, err))
	}
	for i := range dst {
		if !a.IsValid(i) {
			continue
		}
		k := slices.Index(ReasoningSources, a.Value(i))
		if k < 0 {
			return &FieldError{File: path, Row: row0 + int64(i), Field: name, Err: fmt.Errorf("unknown source %q", a.Value(i))}
		}
		dst[i] = int32(k)
	}
	return nil
}

// shiftFirstAnswer puts the first answers of rows [at, at+len(fa)) on the common time
// axis and checks each against its row: a chunk at or after the first token, not after
// the last.
func (p *part) shiftFirstAnswer(path string, row0 int64, fa []int64, at int, shift int64) error {
	d := p.d
	for i, v := range fa {
		if v == Null64 {
			continue
		}
		j := at + i
		fa[i] = v + shift
		if d.First[j] == Null64 || fa[i] < d.First[j] || fa[i] > d.End[j] {
			return &FieldError{File: path, Row: row0 + int64(i), Field: results.ColFirstAnswerNS,
				Err: fmt.Errorf("%d is not within first_token_ns and end_ns", v)}
		}
	}
	return nil
}

// missing is err, or when Array found no error, the error of an optional column selected
// for reading that the records lack.
func missing(name string, err error) error {
	if err != nil {
		return err
	}
	return &results.Error{Column: name, Msg: "missing"}
}
