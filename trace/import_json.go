package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/llmreplay/llmreplay/tokenize"
)

// jsonlSource reads a JSON Lines file one object per non-empty line.
type jsonlSource struct {
	p   *pipeline
	r   *csvReader // only its line reader is used
	row int64
}

func newJSONL(in io.Reader, p *pipeline) *jsonlSource {
	return &jsonlSource{p: p, r: newCSVReader(in), row: -1}
}

// next unmarshals the next object into v.
func (s *jsonlSource) next(v any) (bool, error) {
	for {
		s.r.line = s.r.nextLn
		l, err := s.r.readLine()
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, &SyntaxError{File: s.p.name, Unit: "line", Line: s.r.line, Err: err}
		}
		l = bytes.TrimSpace(l)
		if len(l) == 0 {
			continue
		}
		s.row++
		s.p.rep.RowsRead++
		if err := json.Unmarshal(l, v); err != nil {
			return false, s.errorf("", "not a JSON object: %v", err)
		}
		return true, nil
	}
}

func (s *jsonlSource) errorf(field, format string, a ...any) error {
	return &SyntaxError{File: s.p.name, Unit: "line", Line: s.r.line, Field: field, Err: fmt.Errorf(format, a...)}
}

// num returns a JSON number's (or numeric string's) text, or an error for a missing field.
func num(raw json.RawMessage) ([]byte, error) {
	if raw == nil {
		return nil, fmt.Errorf("missing")
	}
	b := bytes.TrimSpace(raw)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, err
		}
		return []byte(s), nil
	}
	if bytes.Equal(b, []byte("null")) {
		return nil, fmt.Errorf("null")
	}
	return b, nil
}

type mooncakeRow struct {
	Timestamp    json.RawMessage `json:"timestamp"`
	InputLength  json.RawMessage `json:"input_length"`
	OutputLength json.RawMessage `json:"output_length"`
	HashIDs      []int64         `json:"hash_ids"`
}

// importMooncake reads Mooncake's FAST'25 traces: {"timestamp": ms, "input_length",
// "output_length", "hash_ids": [...]} over 512-token blocks.
func importMooncake(in io.Reader, p *pipeline) error {
	s := newJSONL(in, p)
	p.meta.Source = "mooncake"
	p.meta.BlockTokens = 512
	for {
		var m mooncakeRow
		ok, err := s.next(&m)
		if !ok {
			return err
		}
		req, ts, err := s.lengthsAndTime(m.Timestamp, m.InputLength, m.OutputLength, 1e6)
		if err != nil {
			return err
		}
		req.PrefixBlocks = m.HashIDs
		if req.PrefixBlocks == nil {
			req.PrefixBlocks = []int64{}
		}
		if err := p.emit(row{ts: ts, line: s.r.line, req: req}); err != nil {
			return err
		}
	}
}

func (s *jsonlSource) lengthsAndTime(ts, in, out json.RawMessage, unit int64) (Request, int64, error) {
	b, err := num(ts)
	if err != nil {
		return Request{}, 0, s.errorf("timestamp", "%v", err)
	}
	t, err := parseScaled(b, unit)
	if err != nil {
		return Request{}, 0, s.errorf("timestamp", "%v", err)
	}
	if t < 0 {
		return Request{}, 0, s.errorf("timestamp", "%s is negative", b)
	}
	req := Request{ID: s.row}
	if b, err = num(in); err == nil {
		req.PromptTokens, err = tokens(b)
	}
	if err != nil {
		return req, 0, s.errorf("input_length", "%v", err)
	}
	if b, err = num(out); err == nil {
		req.OutputTokens, err = tokens(b)
	}
	if err != nil {
		return req, 0, s.errorf("output_length", "%v", err)
	}
	return req, t, nil
}

type bailianRow struct {
	ChatID       json.RawMessage `json:"chat_id"`
	ParentChatID json.RawMessage `json:"parent_chat_id"`
	Timestamp    json.RawMessage `json:"timestamp"`
	InputLength  json.RawMessage `json:"input_length"`
	OutputLength json.RawMessage `json:"output_length"`
	HashIDs      []int64         `json:"hash_ids"`
}

// importBailian reads Alibaba's Qwen/Bailian traces: timestamp in float seconds,
// hash_ids over 16-token blocks, and chat_id/parent_chat_id (-1 for a first turn)
// linking the turns of a conversation. Every turn gets its root chat's id as session_id;
// a turn whose parent is not in the file starts a session named by that parent.
// The chat-to-session map holds one entry per row: about 50 bytes each.
func importBailian(in io.Reader, p *pipeline) error {
	s := newJSONL(in, p)
	p.meta.Source = "bailian"
	p.meta.BlockTokens = 16
	sessions := map[int64]int64{}
	for {
		var m bailianRow
		ok, err := s.next(&m)
		if !ok {
			return err
		}
		req, ts, err := s.lengthsAndTime(m.Timestamp, m.InputLength, m.OutputLength, 1e9)
		if err != nil {
			return err
		}
		chat, err := num(m.ChatID)
		if err != nil {
			return s.errorf("chat_id", "%v", err)
		}
		id := sessionKey(chat)
		sess := id
		if parent, err := num(m.ParentChatID); err == nil && string(parent) != "-1" && len(parent) > 0 {
			pid := sessionKey(parent)
			if ps, ok := sessions[pid]; ok {
				sess = ps
			} else {
				sess = pid
			}
		}
		sessions[id] = sess
		req.SessionID, req.HasSession = sess, true
		req.PrefixBlocks = m.HashIDs
		if req.PrefixBlocks == nil {
			req.PrefixBlocks = []int64{}
		}
		if err := p.emit(row{ts: ts, line: s.r.line, req: req}); err != nil {
			return err
		}
	}
}

// importGenericJSONL reads JSON Lines with fields named by opts.Map.
func importGenericJSONL(in io.Reader, p *pipeline) error {
	if len(p.opts.Map) == 0 {
		return fmt.Errorf("trace: import %s: the jsonl format needs a key map (--map arrival=KEY,prompt_tokens=KEY,output_tokens=KEY)", p.name)
	}
	unit, err := timeUnitNS(p.opts.TimeUnit)
	if err != nil {
		return fmt.Errorf("trace: import %s: %w", p.name, err)
	}
	g := genericParser{unit: unit}
	p.abs = unit == 0
	p.meta.Source = "jsonl"
	s := newJSONL(in, p)
	mp := p.opts.Map
	for {
		var m map[string]json.RawMessage
		ok, err := s.next(&m)
		if !ok {
			return err
		}
		b, err := num(m[mp[FieldArrival]])
		if err != nil {
			return s.errorf(mp[FieldArrival], "%v", err)
		}
		ts, err := g.arrival(b)
		if err != nil {
			return s.errorf(mp[FieldArrival], "%v", err)
		}
		req := Request{ID: s.row}
		for _, f := range []struct {
			key string
			dst *int32
		}{{mp[FieldPrompt], &req.PromptTokens}, {mp[FieldOutput], &req.OutputTokens}} {
			b, err := num(m[f.key])
			if err == nil {
				*f.dst, err = tokens(b)
			}
			if err != nil {
				return s.errorf(f.key, "%v", err)
			}
		}
		if k, ok := mp[FieldRequestID]; ok {
			b, err := num(m[k])
			var id int64
			if err == nil {
				id, err = parseCount(b)
			}
			if err != nil {
				return s.errorf(k, "%v", err)
			}
			req.ID = id
		}
		if k, ok := mp[FieldSession]; ok {
			if b, err := num(m[k]); err == nil && len(b) > 0 {
				req.SessionID, req.HasSession = sessionKey(b), true
			}
		}
		if k, ok := mp[FieldTools]; ok && m[k] != nil && !bytes.Equal(m[k], []byte("null")) {
			b, err := num(m[k])
			if err == nil {
				req.ToolTokens, req.HasToolTokens, err = toolTokens(b, req.PromptTokens)
			}
			if err != nil {
				return s.errorf(k, "%v", err)
			}
		}
		for _, f := range []struct {
			field string
			parse func([]byte, *Request) error
		}{{FieldImages, imageCount}, {FieldImageTokens, imageTokens}} {
			k, ok := mp[f.field]
			if !ok || m[k] == nil || bytes.Equal(m[k], []byte("null")) {
				continue
			}
			b, err := num(m[k])
			if err == nil {
				err = f.parse(b, &req)
			}
			if err != nil {
				return s.errorf(k, "%v", err)
			}
		}
		for _, f := range []struct {
			key string
			dst *string
		}{{mp[FieldModel], &req.Model}, {mp[FieldText], &req.Prompt}} {
			if f.key == "" || m[f.key] == nil {
				continue
			}
			var v string
			if err := json.Unmarshal(m[f.key], &v); err != nil {
				if !bytes.Equal(m[f.key], []byte("null")) {
					return s.errorf(f.key, "not a string")
				}
			}
			*f.dst = v
		}
		if req.Model != "" {
			req.Model = p.intern(req.Model)
		}
		if err := p.emit(row{ts: ts, line: s.r.line, req: req}); err != nil {
			return err
		}
	}
}

type shareGPTTurn struct {
	From  string `json:"from"`
	Value string `json:"value"`
}

type shareGPTConv struct {
	ID            json.RawMessage `json:"id"`
	Conversations []shareGPTTurn  `json:"conversations"`
}

// importShareGPT reads ShareGPT JSON (an array of {"id", "conversations": [{"from",
// "value"}...]}), decoding one conversation at a time. As vLLM's benchmark does, each
// conversation gives one request: its first human turn is the prompt and the reply
// after it the output; both are counted in cl100k_base tokens and the prompt text is
// kept. ShareGPT records no times, so arrivals come from opts.Arrivals.
func importShareGPT(in io.Reader, p *pipeline) error {
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		return err
	}
	if err := p.opts.Arrivals.Validate(); err != nil {
		return fmt.Errorf("trace: import %s: arrivals: %w", p.name, err)
	}
	arr := newArrivalGen(p.opts.Arrivals)
	p.meta.Source = "sharegpt"
	gen, _ := json.Marshal(struct {
		Tokenizer string      `json:"tokenizer"`
		Arrivals  ArrivalSpec `json:"arrivals"`
	}{tokenize.CL100kBase, p.opts.Arrivals})
	p.meta.Generator = string(gen)
	p.what = "conversation"
	dec := json.NewDecoder(in)
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("trace: import %s: not a JSON array: %v", p.name, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("trace: import %s: not a JSON array of conversations", p.name)
	}
	var idx int64 = -1
	for dec.More() {
		idx++
		p.rep.RowsRead++
		var c shareGPTConv
		if err := dec.Decode(&c); err != nil {
			return fmt.Errorf("trace: import %s conversation %d (byte %d): %v", p.name, idx, dec.InputOffset(), err)
		}
		prompt, reply, ok := firstExchange(c.Conversations)
		if !ok {
			p.rep.drop("no human turn followed by a reply")
			continue
		}
		pt, ot := enc.Count(prompt), enc.Count(reply)
		if pt < 1 || ot < 1 {
			p.rep.drop("empty prompt or reply")
			continue
		}
		req := Request{ID: idx, PromptTokens: int32(min(pt, 1<<31-1)), OutputTokens: int32(min(ot, 1<<31-1)), Prompt: prompt}
		if err := p.emit(row{ts: arr.next(), line: idx, req: req}); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("trace: import %s after conversation %d: %v", p.name, idx, err)
	}
	return nil
}

func firstExchange(turns []shareGPTTurn) (prompt, reply string, ok bool) {
	for i := 0; i+1 < len(turns); i++ {
		if isHuman(turns[i].From) && !isHuman(turns[i+1].From) && turns[i+1].From != "system" {
			return turns[i].Value, turns[i+1].Value, true
		}
	}
	return "", "", false
}

func isHuman(from string) bool { return from == "human" || from == "user" }
