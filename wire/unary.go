package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Unary kinds (embeddings.go, rerank.go) answer with one JSON body, not a stream. Their
// answer can be megabytes (1,000 inputs of 4,096 floats as JSON text is ~40 MB; base64
// makes it ~22 MB): UnaryScanner reads it as it arrives, in pieces, and keeps only what a
// record needs, the answer array's element count, the usage's prompt count and an error
// message, never the body.

func init() {
	// After the generation kinds, in the order messages list them.
	Register(&embeddingsKind)
	Register(&rerankKind)
}

// UnaryAnswer says where a unary kind's response answers its inputs.
type UnaryAnswer struct {
	// Array is the top-level array with one element per input: "data" for embeddings,
	// "results" for rerank.
	Array string
	// Usage is the field of the top-level "usage" object that counts the prompt tokens:
	// "prompt_tokens" for embeddings, "total_tokens" for rerank.
	Usage string
}

// UnaryBody is what a unary response body says, as encoding/json would decode it into a
// map of its top-level fields (a repeated field: the last one counts; keys match exactly).
type UnaryBody struct {
	// Count is the number of elements of the top-level Array; -1 when the body has none,
	// or it is not an array.
	Count int
	// PromptTokens is usage[Usage] when it is an integer from 0 to 2^31-1; else -1.
	PromptTokens int32
	// Error is the body's error message: "error" when a string, "error"."message" when
	// an object, else a top-level "message" (vLLM's older ErrorResponse); "" when none.
	Error string
}

// maxUnaryDepth is encoding/json's nesting limit: a deeper body is not JSON to it.
const maxUnaryDepth = 10000

// maxUnaryMessage bounds the error message kept (in its escaped form).
const maxUnaryMessage = 512

// Scanner states.
const (
	usValue      = iota // a value (the top level, after ':' or an array's ',')
	usValueOrEnd        // after '[': a value or ']'
	usKeyOrEnd          // after '{': a key or '}'
	usKey               // after an object's ',': a key
	usColon             // after a key
	usAfter             // after a value: ',' or the container's end
	usString            // inside a string
	usNumber            // inside a number
	usLiteral           // inside true, false or null
	usDone              // the top-level value is over: only white space
)

// Container tags on the scanner's stack: what each open container is to the record.
const (
	ctObject = iota
	ctArray
	ctAnswer // the top-level answer array
	ctUsage  // the top-level usage object
	ctError  // the top-level error object
)

// Roles of a key or a value: what the record takes from it.
const (
	roleNone = iota
	roleAnswer
	roleUsage
	roleError
	roleMessage      // a top-level "message"
	roleErrorMessage // "message" inside the error object
	roleUsageTokens  // usage[Usage]
)

// UnaryScanner decodes a unary response body pushed to it in pieces (Write), holding only
// its open containers and the few bytes of the key, number or message it is inside.
// Close says what the whole body said. It accepts exactly what encoding/json accepts
// (FuzzUnaryScanner checks it).
type UnaryScanner struct {
	ans   UnaryAnswer
	st    int
	stack []byte // open containers' tags
	off   int64  // bytes read
	err   error

	// The string, number or literal being read.
	isKey   bool
	esc     int // 0; 1 after a backslash; 2..5 hex digits of \u to come
	role    int // of the value being read (or of the key's object)
	buf     []byte
	over    bool // buf overflowed (a key too long to match, a message cut)
	numSt   int
	literal string
	litAt   int

	key       int // role of the last key read in the top-level or a tagged object
	count     int // elements of the answer array being read
	body      UnaryBody
	errMsg    string // "error"'s message
	topMsg    string // top-level "message"
	errString bool   // "error" was a string (its message is errMsg)
}

// NewUnaryScanner returns a scanner of bodies answering as a says.
func NewUnaryScanner(a UnaryAnswer) *UnaryScanner {
	s := &UnaryScanner{}
	s.Reset(a)
	return s
}

// Reset makes s ready for a new body, keeping its buffers.
func (s *UnaryScanner) Reset(a UnaryAnswer) {
	*s = UnaryScanner{ans: a, stack: s.stack[:0], buf: s.buf[:0]}
	s.body = UnaryBody{Count: -1, PromptTokens: -1}
}

// Write reads the next piece of the body. After a syntax error it reads nothing more and
// returns that error (Close returns it too).
func (s *UnaryScanner) Write(p []byte) error {
	if s.err != nil {
		return s.err
	}
	for i := 0; i < len(p); i++ {
		if s.st == usString && s.esc == 0 {
			// The bulk of a body is in strings (base64 embeddings): run to the next
			// byte that matters.
			j := i
			for j < len(p) && p[j] != '"' && p[j] != '\\' && p[j] >= 0x20 {
				j++
			}
			if j > i {
				s.keep(p[i:j])
				i = j
				if i == len(p) {
					break
				}
			}
		}
		if s.st == usNumber && s.role != roleUsageTokens && (s.numSt == numInt || s.numSt == numFrac || s.numSt == numExp) {
			// Digits of a float of a JSON embedding: they change nothing.
			for i < len(p) && '0' <= p[i] && p[i] <= '9' {
				i++
			}
			if i == len(p) {
				break
			}
		}
		if err := s.step(p[i]); err != nil {
			s.err = fmt.Errorf("malformed JSON at byte %d: %w", s.off+int64(i), err)
			s.off += int64(i)
			return s.err
		}
	}
	s.off += int64(len(p))
	return nil
}

// Close ends the body and returns what it said; the error says why it is not JSON (cut
// short, malformed).
func (s *UnaryScanner) Close() (UnaryBody, error) {
	if s.err != nil {
		return UnaryBody{Count: -1, PromptTokens: -1}, s.err
	}
	if s.st == usNumber && len(s.stack) == 0 {
		// A top-level number ends with the body.
		if err := s.endNumber(); err != nil {
			return UnaryBody{Count: -1, PromptTokens: -1}, fmt.Errorf("malformed JSON at byte %d: %w", s.off, err)
		}
		s.afterValue()
	}
	if s.st != usDone {
		if s.off == 0 {
			return UnaryBody{Count: -1, PromptTokens: -1}, errors.New("empty body")
		}
		return UnaryBody{Count: -1, PromptTokens: -1}, fmt.Errorf("JSON cut short: the body ended after %d bytes inside it", s.off)
	}
	b := s.body
	switch {
	case s.errMsg != "":
		b.Error = s.errMsg
	case s.topMsg != "":
		b.Error = s.topMsg
	}
	return b, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// step reads one byte.
func (s *UnaryScanner) step(c byte) error {
	switch s.st {
	case usString:
		return s.stringByte(c)
	case usNumber:
		if s.numberByte(c) {
			return nil
		}
		if err := s.endNumber(); err != nil {
			return err
		}
		s.afterValue()
		return s.step(c)
	case usLiteral:
		if c != s.literal[s.litAt] {
			return fmt.Errorf("invalid character %q in literal %s", c, s.literal)
		}
		s.litAt++
		if s.litAt == len(s.literal) {
			s.afterValue()
		}
		return nil
	}
	if isSpace(c) {
		return nil
	}
	switch s.st {
	case usValue, usValueOrEnd:
		if s.st == usValueOrEnd && c == ']' {
			return s.close(c)
		}
		return s.beginValue(c)
	case usKeyOrEnd, usKey:
		if s.st == usKeyOrEnd && c == '}' {
			return s.close(c)
		}
		if c != '"' {
			return fmt.Errorf("invalid character %q looking for an object key", c)
		}
		s.st, s.isKey, s.esc, s.over = usString, true, 0, false
		s.buf = s.buf[:0]
		return nil
	case usColon:
		if c != ':' {
			return fmt.Errorf("invalid character %q after an object key", c)
		}
		s.st = usValue
		return nil
	case usAfter:
		if len(s.stack) == 0 {
			return fmt.Errorf("invalid character %q after the top-level value", c)
		}
		top := s.stack[len(s.stack)-1]
		switch {
		case c == ',' && top == ctArray || c == ',' && top == ctAnswer:
			s.st = usValue
			return nil
		case c == ',':
			s.st = usKey
			return nil
		case c != ']' && c != '}':
			return fmt.Errorf("invalid character %q after a value (want ',' or the container's end)", c)
		}
		return s.close(c)
	case usDone:
		return fmt.Errorf("invalid character %q after the top-level value", c)
	}
	return fmt.Errorf("scanner state %d", s.st)
}

// valueRole is the role of a value starting now: what the key before it named, in the
// container it is in.
func (s *UnaryScanner) valueRole() int {
	d := len(s.stack)
	switch {
	case d == 1 && s.stack[0] == ctObject:
		return s.key
	case d == 2 && (s.stack[1] == ctUsage || s.stack[1] == ctError):
		return s.key
	}
	return roleNone
}

// beginValue starts a value with its first byte c.
func (s *UnaryScanner) beginValue(c byte) error {
	role := roleNone
	if len(s.stack) > 0 {
		top := s.stack[len(s.stack)-1]
		if top == ctAnswer {
			s.count++
		} else if top != ctArray {
			role = s.valueRole()
		}
	}
	s.role = role
	switch role {
	case roleAnswer:
		if c != '[' {
			s.body.Count = -1
		}
	case roleUsage:
		s.body.PromptTokens = -1
	case roleError:
		s.errMsg, s.errString = "", false
	case roleMessage:
		s.topMsg = ""
	case roleErrorMessage:
		s.errMsg = ""
	case roleUsageTokens:
		s.body.PromptTokens = -1
	}
	switch {
	case c == '{' || c == '[':
		if len(s.stack) >= maxUnaryDepth {
			return errors.New("exceeded max depth")
		}
		tag := byte(ctObject)
		switch {
		case c == '[' && role == roleAnswer:
			tag, s.count = ctAnswer, 0
		case c == '[':
			tag = ctArray
		case role == roleUsage:
			tag = ctUsage
		case role == roleError:
			tag = ctError
		}
		s.stack = append(s.stack, tag)
		s.key = roleNone
		if c == '{' {
			s.st = usKeyOrEnd
		} else {
			s.st = usValueOrEnd
		}
	case c == '"':
		s.st, s.isKey, s.esc, s.over = usString, false, 0, false
		s.buf = s.buf[:0]
	case c == '-' || '0' <= c && c <= '9':
		s.st, s.numSt = usNumber, numStart
		s.buf = s.buf[:0]
		if !s.numberByte(c) {
			return fmt.Errorf("invalid character %q in a number", c)
		}
	case c == 't':
		s.st, s.literal, s.litAt = usLiteral, "true", 1
	case c == 'f':
		s.st, s.literal, s.litAt = usLiteral, "false", 1
	case c == 'n':
		s.st, s.literal, s.litAt = usLiteral, "null", 1
	default:
		return fmt.Errorf("invalid character %q looking for a value", c)
	}
	return nil
}

// close ends the innermost container with c.
func (s *UnaryScanner) close(c byte) error {
	if len(s.stack) == 0 {
		return fmt.Errorf("invalid character %q", c)
	}
	top := s.stack[len(s.stack)-1]
	isArray := top == ctArray || top == ctAnswer
	if isArray && c != ']' || !isArray && c != '}' {
		return fmt.Errorf("invalid character %q closing the container", c)
	}
	s.stack = s.stack[:len(s.stack)-1]
	if top == ctAnswer {
		s.body.Count = s.count
	}
	// Back in the container around it, whose last key was the one that opened this.
	s.key = roleNone
	if len(s.stack) == 0 {
		s.st = usDone
	} else {
		s.st = usAfter
	}
	return nil
}

// keep appends string bytes to buf while what it holds can matter.
func (s *UnaryScanner) keep(b []byte) {
	limit := maxUnaryMessage
	if s.isKey {
		limit = 16
	} else if s.role != roleMessage && s.role != roleErrorMessage && s.role != roleError {
		return
	}
	if len(s.buf)+len(b) > limit {
		s.over = true
		b = b[:max(limit-len(s.buf), 0)]
	}
	s.buf = append(s.buf, b...)
}

// stringByte reads one byte inside a string.
func (s *UnaryScanner) stringByte(c byte) error {
	switch {
	case s.esc == 1:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.esc = 0
		case 'u':
			s.esc = 2
		default:
			return fmt.Errorf("invalid escape \\%c in a string", c)
		}
		s.keep([]byte{'\\', c})
		return nil
	case s.esc >= 2:
		if !isHex(c) {
			return fmt.Errorf("invalid character %q in a \\u escape", c)
		}
		s.keep([]byte{c})
		if s.esc++; s.esc == 6 {
			s.esc = 0
		}
		return nil
	case c == '\\':
		s.esc = 1
		return nil
	case c == '"':
		s.endString()
		return nil
	case c < 0x20:
		return fmt.Errorf("invalid control character %#02x in a string", c)
	}
	s.keep([]byte{c})
	return nil
}

// unquote returns the string buf holds (its escaped form).
func (s *UnaryScanner) unquote() string {
	q := make([]byte, 0, len(s.buf)+2)
	q = append(q, '"')
	q = append(q, s.buf...)
	q = append(q, '"')
	var v string
	if json.Unmarshal(q, &v) != nil {
		return string(s.buf) // a message cut inside an escape: as it came
	}
	return v
}

// endString ends a key or a string value.
func (s *UnaryScanner) endString() {
	if s.isKey {
		s.key = roleNone
		switch {
		case s.over:
		case bytes.IndexByte(s.buf, '\\') < 0:
			s.key = s.keyRole(s.buf) // no escape: no copy
		default:
			s.key = s.keyRole([]byte(s.unquote()))
		}
		s.st = usColon
		return
	}
	if s.role == roleMessage || s.role == roleErrorMessage || s.role == roleError {
		msg := s.unquote()
		if s.over {
			msg += "..."
		}
		switch s.role {
		case roleMessage:
			s.topMsg = msg
		case roleErrorMessage:
			if !s.errString {
				s.errMsg = msg
			}
		case roleError:
			s.errMsg, s.errString = msg, true
		}
	}
	s.afterValue()
}

// keyRole says what a key names in the object it is in.
func (s *UnaryScanner) keyRole(k []byte) int {
	d := len(s.stack)
	switch {
	case d == 1 && s.stack[0] == ctObject:
		switch string(k) {
		case s.ans.Array:
			return roleAnswer
		case "usage":
			return roleUsage
		case "error":
			return roleError
		case "message":
			return roleMessage
		}
	case d == 2 && s.stack[1] == ctUsage && string(k) == s.ans.Usage:
		return roleUsageTokens
	case d == 2 && s.stack[1] == ctError && string(k) == "message":
		return roleErrorMessage
	}
	return roleNone
}

// afterValue follows a scalar value's end.
func (s *UnaryScanner) afterValue() {
	if len(s.stack) == 0 {
		s.st = usDone
	} else {
		s.st = usAfter
	}
}

// Number states (RFC 8259, section 6).
const (
	numStart = iota // nothing yet
	numMinus        // after '-'
	numZero         // a leading 0
	numInt          // integer digits
	numDot          // after '.'
	numFrac         // fraction digits
	numE            // after 'e' or 'E'
	numESign        // after the exponent's sign
	numExp          // exponent digits
)

// numberByte takes c into the number if it continues it.
func (s *UnaryScanner) numberByte(c byte) bool {
	digit := '0' <= c && c <= '9'
	next := -1
	switch s.numSt {
	case numStart:
		switch {
		case c == '-':
			next = numMinus
		case c == '0':
			next = numZero
		case digit:
			next = numInt
		}
	case numMinus:
		switch {
		case c == '0':
			next = numZero
		case digit:
			next = numInt
		}
	case numZero, numInt:
		switch {
		case digit && s.numSt == numInt:
			next = numInt
		case c == '.':
			next = numDot
		case c == 'e' || c == 'E':
			next = numE
		}
	case numDot, numFrac:
		switch {
		case digit:
			next = numFrac
		case s.numSt == numFrac && (c == 'e' || c == 'E'):
			next = numE
		}
	case numE:
		switch {
		case c == '+' || c == '-':
			next = numESign
		case digit:
			next = numExp
		}
	case numESign, numExp:
		if digit {
			next = numExp
		}
	}
	if next < 0 {
		return false
	}
	s.numSt = next
	if s.role == roleUsageTokens && len(s.buf) < 24 {
		s.buf = append(s.buf, c)
	}
	return true
}

// endNumber ends a number at a byte that does not continue it.
func (s *UnaryScanner) endNumber() error {
	switch s.numSt {
	case numZero, numInt, numFrac, numExp:
	default:
		return errors.New("a number cut short")
	}
	if s.role == roleUsageTokens {
		if n, err := strconv.ParseInt(string(s.buf), 10, 32); err == nil && n >= 0 {
			s.body.PromptTokens = int32(n)
		}
	}
	return nil
}

// AppendInputsBody appends the body of a unary kind's request (Kind.Unary) carrying inputs,
// starting with start (an AppendStart): embeddings' inputs, or rerank's query and then its
// documents.
func (e Encoder) AppendInputsBody(b, start []byte, inputs [][]byte) []byte {
	return e.kind.AppendInputs(append(b, start...), inputs)
}
