package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"strconv"
)

// Low-level parsers shared by the importers. They work on []byte fields pointing into the
// read buffer so the CSV fast path allocates nothing per row.

// parseUnixNS parses a wall-clock timestamp into Unix nanoseconds. It accepts the forms
// the public Azure traces use, and ISO 8601 / RFC 3339 in general:
//
//	2023-11-16 18:17:03.9799600          (Azure 2023: 7 fractional digits, no zone: UTC)
//	2024-05-12 00:00:00.001163+00:00     (Azure 2024; the fraction is omitted when zero)
//	2025-05-01T00:00:01.123Z             (Azure 2025, ISO 8601 with Z)
//
// The date and time may be separated by a space or 'T'; the fraction may have any number
// of digits (beyond 9 they are truncated, not rounded); the zone is absent (UTC), Z, or
// ±HH:MM / ±HHMM / ±HH. Hand-written because time.Parse costs several times more per row
// and the Azure import must run at millions of rows per second.
func parseUnixNS(b []byte) (int64, error) {
	bad := func(why string) (int64, error) {
		return 0, fmt.Errorf("%q is not a timestamp like 2006-01-02 15:04:05.999: %s", b, why)
	}
	if len(b) < 19 {
		return bad("too short")
	}
	num := func(s []byte) (int, bool) {
		n := 0
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	y, ok1 := num(b[0:4])
	mo, ok2 := num(b[5:7])
	d, ok3 := num(b[8:10])
	h, ok4 := num(b[11:13])
	mi, ok5 := num(b[14:16])
	s, ok6 := num(b[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || b[4] != '-' || b[7] != '-' || (b[10] != ' ' && b[10] != 'T') || b[13] != ':' || b[16] != ':' {
		return bad("layout")
	}
	if mo < 1 || mo > 12 || d < 1 || d > daysIn(y, mo) || h > 23 || mi > 59 || s > 60 {
		return bad("field out of range")
	}
	rest := b[19:]
	var frac int64
	if len(rest) > 0 && rest[0] == '.' {
		i := 1
		scale := int64(100_000_000)
		for ; i < len(rest) && rest[i] >= '0' && rest[i] <= '9'; i++ {
			frac += int64(rest[i]-'0') * scale
			scale /= 10
		}
		if i == 1 {
			return bad("empty fraction")
		}
		rest = rest[i:]
	}
	var offset int64 // seconds east of UTC
	switch {
	case len(rest) == 0:
	case len(rest) == 1 && (rest[0] == 'Z' || rest[0] == 'z'):
	case rest[0] == '+' || rest[0] == '-':
		z := rest[1:]
		var zh, zm int
		var ok bool
		switch {
		case len(z) == 2:
			zh, ok = num(z)
		case len(z) == 5 && z[2] == ':':
			var ok2 bool
			zh, ok = num(z[0:2])
			zm, ok2 = num(z[3:5])
			ok = ok && ok2
		case len(z) == 4:
			var ok2 bool
			zh, ok = num(z[0:2])
			zm, ok2 = num(z[2:4])
			ok = ok && ok2
		}
		if !ok || zh > 23 || zm > 59 {
			return bad("zone")
		}
		offset = int64(zh*3600 + zm*60)
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return bad("trailing characters")
	}
	secs := daysFromCivil(y, mo, d)*86400 + int64(h*3600+mi*60+s) - offset
	// Unix ns fit int64 from 1677 to 2262; beyond, the multiplication overflows.
	if secs < -9_223_372_036 || secs > 9_223_372_035 {
		return bad("year out of range")
	}
	return secs*1e9 + frac, nil
}

func daysIn(y, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil returns days since 1970-01-01 of a proleptic Gregorian date
// (Howard Hinnant's algorithm: eras of 400 years, March-based years).
func daysFromCivil(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era = (y - 399) / 400
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

// parseScaled parses a decimal number (optionally signed, with a fraction or exponent)
// times unit nanoseconds into integer nanoseconds. Plain decimals are converted exactly
// (no float rounding: "1.000000001" s is 1000000001 ns); exponent forms go through float64.
func parseScaled(b []byte, unit int64) (int64, error) {
	if len(b) == 0 {
		return 0, errors.New("empty")
	}
	if bytes.ContainsAny(b, "eE") {
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f*float64(unit)) > 9e18 {
			return 0, fmt.Errorf("%q is not a number", b)
		}
		return int64(math.Round(f * float64(unit))), nil
	}
	neg := false
	s := b
	if s[0] == '-' || s[0] == '+' {
		neg = s[0] == '-'
		s = s[1:]
	}
	var ip int64
	i, digits := 0, 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if ip > (math.MaxInt64-9)/10 {
			return 0, fmt.Errorf("%q is out of range", b)
		}
		ip = ip*10 + int64(s[i]-'0')
		digits++
	}
	if ip > math.MaxInt64/unit {
		return 0, fmt.Errorf("%q is out of range", b)
	}
	v := ip * unit
	if i < len(s) && s[i] == '.' {
		i++
		scale := unit / 10
		rem := int64(0) // digits beyond ns resolution are truncated
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			if scale > 0 {
				v += int64(s[i]-'0') * scale
				scale /= 10
			} else {
				rem++
			}
			digits++
		}
		if v < 0 {
			return 0, fmt.Errorf("%q is out of range", b)
		}
	}
	if i != len(s) || digits == 0 {
		return 0, fmt.Errorf("%q is not a number", b)
	}
	if neg {
		v = -v
	}
	return v, nil
}

// parseCount parses a token count: a non-negative integer, also written as "12.0" (as
// pandas writes integer columns that once held a NaN). Fractions other than zero fail.
func parseCount(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, errors.New("empty")
	}
	var n int64
	i := 0
	if b[0] == '+' {
		i++
	}
	start := i
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if n > (math.MaxInt64-9)/10 {
			return 0, fmt.Errorf("%q is out of range", b)
		}
		n = n*10 + int64(b[i]-'0')
	}
	if i == start {
		return 0, fmt.Errorf("%q is not a non-negative integer", b)
	}
	if i < len(b) && b[i] == '.' {
		for i++; i < len(b) && b[i] == '0'; i++ {
		}
	}
	if i != len(b) {
		return 0, fmt.Errorf("%q is not a non-negative integer", b)
	}
	return n, nil
}

// tokens parses a length column: an integer in [1, MaxInt32].
func tokens(b []byte) (int32, error) {
	n, err := parseCount(b)
	if err != nil {
		return 0, err
	}
	if n < 1 {
		return 0, fmt.Errorf("%d, must be >= 1", n)
	}
	if n > math.MaxInt32 {
		return 0, fmt.Errorf("%d is out of range", n)
	}
	return int32(n), nil
}

// sessionKey maps a session/conversation id to int64: integers as themselves, anything
// else (UUIDs, hashes) by FNV-1a 64, masked non-negative. Distinct strings collide with
// probability about n²/2⁶⁴, negligible for any real trace.
func sessionKey(b []byte) int64 {
	if n, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		return n
	}
	h := fnv.New64a()
	h.Write(b)
	return int64(h.Sum64() & math.MaxInt64)
}

// csvReader splits CSV lines into fields without allocating per row. It handles LF and
// CRLF endings, a missing final newline, a UTF-8 BOM, and RFC 4180 quoted fields
// (including embedded commas, doubled quotes and newlines); unquoted lines, the common
// case in trace files, take a fast path. Fields are valid until the next call to read.
type csvReader struct {
	br     *bufio.Reader
	line   int64 // 1-based line number of the record last read (its first line)
	nextLn int64
	fields [][]byte
	buf    []byte // scratch for lines longer than the bufio buffer and quoted fields
}

func newCSVReader(r io.Reader) *csvReader {
	return &csvReader{br: bufio.NewReaderSize(r, 1<<20), nextLn: 1}
}

// readLine returns the next line without its ending; io.EOF after the last one.
func (c *csvReader) readLine() ([]byte, error) {
	l, err := c.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		c.buf = append(c.buf[:0], l...)
		for err == bufio.ErrBufferFull {
			l, err = c.br.ReadSlice('\n')
			c.buf = append(c.buf, l...)
		}
		l = c.buf
	}
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(l) == 0 && err == io.EOF {
		return nil, io.EOF
	}
	c.nextLn++
	l = bytes.TrimSuffix(l, []byte{'\n'})
	l = bytes.TrimSuffix(l, []byte{'\r'})
	return l, nil
}

// read returns the fields of the next non-empty record, or io.EOF.
func (c *csvReader) read() ([][]byte, error) {
	for {
		c.line = c.nextLn
		l, err := c.readLine()
		if err != nil {
			return nil, err
		}
		if c.line == 1 {
			l = bytes.TrimPrefix(l, []byte("\xef\xbb\xbf"))
		}
		if len(l) == 0 {
			continue
		}
		c.fields = c.fields[:0]
		if bytes.IndexByte(l, '"') < 0 {
			for {
				i := bytes.IndexByte(l, ',')
				if i < 0 {
					c.fields = append(c.fields, l)
					return c.fields, nil
				}
				c.fields = append(c.fields, l[:i])
				l = l[i+1:]
			}
		}
		return c.readQuoted(l)
	}
}

// readQuoted parses a record containing quotes, reading more lines while a quoted field
// is open. Fields are copied into c.buf.
func (c *csvReader) readQuoted(l []byte) ([][]byte, error) {
	out := make([]byte, 0, len(l))
	var ends []int
	inQ, start := false, true
	for {
		for i := 0; i < len(l); i++ {
			ch := l[i]
			switch {
			case inQ && ch == '"':
				if i+1 < len(l) && l[i+1] == '"' {
					out = append(out, '"')
					i++
				} else {
					inQ = false
				}
			case inQ:
				out = append(out, ch)
			case ch == '"' && start:
				inQ = true
			case ch == '"':
				return nil, fmt.Errorf("bare \" in unquoted field")
			case ch == ',':
				ends = append(ends, len(out))
				start = true
				continue
			default:
				out = append(out, ch)
			}
			start = false
		}
		if !inQ {
			break
		}
		more, err := c.readLine()
		if err == io.EOF {
			return nil, fmt.Errorf("quoted field not closed before the end of the file")
		}
		if err != nil {
			return nil, err
		}
		out = append(out, '\n')
		// more aliases the bufio buffer; it is consumed here before the next read.
		l = append([]byte(nil), more...)
	}
	ends = append(ends, len(out))
	c.buf = out
	prev := 0
	for _, e := range ends {
		c.fields = append(c.fields, c.buf[prev:e])
		prev = e
	}
	return c.fields, nil
}
