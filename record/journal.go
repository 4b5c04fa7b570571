package record

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/llmreplay/llmreplay/internal/atomicfile"
	"github.com/llmreplay/llmreplay/internal/filekind"
	"github.com/llmreplay/llmreplay/trace"
)

// The trace journal is where the recorder keeps its rows until the trace file is written.
// Rows come in the order requests ended, not by arrival, and an hour at 1,000 requests/s
// of rows holding thousands of prefix-block ids is gigabytes: so the journal is an
// append-only file that survives the recorder being killed, and ConvertTraceJournal sorts
// an index of it, never the rows themselves.
//
// Format, version 1 (integers little-endian; varints are encoding/binary's):
//
//	header:  "LRTJ", version byte 1, uvarint n, n bytes of trace.Meta as JSON,
//	         uint32 CRC-32C of everything before it
//	record:  uvarint n (1..maxRecord), uint32 CRC-32C of those varint bytes,
//	         n bytes of payload, uint32 CRC-32C of the payload
//
// The length has its own checksum so that a corrupt length is told from a record cut by
// a crash: a record the file ends inside (its length read whole and checked) is a torn
// tail, dropped and counted; a record that is whole but fails a check, or fails to
// decode, is corruption, an error naming the byte offset. A tail of zero bytes is torn
// too: a file system may extend a file before the data reaches it.
//
// Payload: uvarint flags (the journal* bits), then varints: request_id, arrival_ns,
// prompt_tokens, output_tokens, [session_id], [tool_tokens], [image_tokens], model
// (uvarint length + bytes), [prefix_blocks: uvarint count + 8 bytes each, fixed width
// because the recorder's ids are salted hashes, uniformly spread over 64 bits, for which
// a varint takes 9.5 bytes on average], images (uvarint count, then width and height
// each when sized), [call: parents (count + ids when not nil), gap_ns, gap_kind
// (string), duration_ns, prefix_tokens, cached_tokens, reasoning_tokens], [params: api
// (string), max_tokens, n]. Fields in brackets are present when their flag is set.

const (
	journalMagic   = "LRTJ"
	journalVersion = 1
	// maxRecord bounds a record's payload: a row of 1 Mi prefix blocks (16 Mi tokens at
	// 16 a block) and 65,536 sized images fits, so a larger length is corruption.
	maxRecord = 16 << 20
	// journalBuffer is how many bytes Add gathers before writing them to the file: large
	// writes for the disk, and a bounded loss when the process dies between Flushes.
	journalBuffer = 1 << 20
)

// Flag bits of a record's payload.
const (
	journalSession = 1 << iota
	journalTools
	journalImageTokens
	journalBlocks
	journalSized // the images have sizes
	journalCall
	journalParents
	journalParams
	journalHasStream
	journalStream
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TraceJournal appends trace rows to a crash-safe journal file (the format above). It is
// not safe for concurrent use: one goroutine, the recorder's writer, owns it.
type TraceJournal struct {
	path     string
	f        *os.File
	buf      []byte // records not yet written to the file
	payload  []byte // scratch for one record's payload
	rows     int64
	err      error // sticky: after a failed write, or Close, the journal is unusable
	closeErr error
}

// CreateTraceJournal creates the journal at path, which must not exist (a journal left by
// a recorder that died is converted, never overwritten), and writes its header with meta,
// synced with its folder, so that even a recorder killed before its first row leaves a
// journal that converts to a valid, empty trace.
func CreateTraceJournal(path string, meta trace.Meta) (*TraceJournal, error) {
	mj, err := json.Marshal(meta)
	if err != nil {
		return nil, fmt.Errorf("record: trace journal %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("record: create trace journal: %w (a journal left by an earlier recording is converted to a trace, or removed, before its name is used again)", err)
	}
	h := append([]byte(journalMagic), journalVersion)
	h = binary.AppendUvarint(h, uint64(len(mj)))
	h = append(h, mj...)
	h = binary.LittleEndian.AppendUint32(h, crc32.Checksum(h, castagnoli))
	if _, err = f.Write(h); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = atomicfile.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("record: create trace journal %s: %w", path, err)
	}
	return &TraceJournal{path: path, f: f, buf: make([]byte, 0, journalBuffer+64<<10)}, nil
}

// Add appends r to the journal's buffer, writing the buffer to the file when it is full
// (without a sync: Flush makes the rows durable). It refuses a row with prompt text (a
// recording keeps no text) or one that trace.Request.Validate refuses, naming the
// request_id; neither makes the journal unusable.
func (j *TraceJournal) Add(r *trace.Request) error {
	if j.err != nil {
		return j.err
	}
	if r.Prompt != "" {
		// The text itself never reaches an error: it is what the recording must not keep.
		return fmt.Errorf("record: trace journal %s: request_id %d: has prompt text; a recording keeps lengths and salted hashes, never text", j.path, r.ID)
	}
	if err := r.Validate(); err != nil {
		return fmt.Errorf("record: trace journal %s: request_id %d: %w", j.path, r.ID, err)
	}
	j.payload = appendPayload(j.payload[:0], r)
	if len(j.payload) > maxRecord {
		return fmt.Errorf("record: trace journal %s: request_id %d: a row of %d bytes, over the journal's %d", j.path, r.ID, len(j.payload), maxRecord)
	}
	start := len(j.buf)
	j.buf = binary.AppendUvarint(j.buf, uint64(len(j.payload)))
	j.buf = binary.LittleEndian.AppendUint32(j.buf, crc32.Checksum(j.buf[start:], castagnoli))
	j.buf = append(j.buf, j.payload...)
	j.buf = binary.LittleEndian.AppendUint32(j.buf, crc32.Checksum(j.payload, castagnoli))
	j.rows++
	if len(j.buf) >= journalBuffer {
		return j.write()
	}
	return nil
}

// write hands the buffer to the operating system.
func (j *TraceJournal) write() error {
	if j.err != nil {
		return j.err
	}
	if j.f == nil {
		return fmt.Errorf("record: trace journal %s: closed", j.path)
	}
	if _, err := j.f.Write(j.buf); err != nil {
		j.err = fmt.Errorf("record: trace journal %s: %w", j.path, err)
		return j.err
	}
	j.buf = j.buf[:0]
	return nil
}

// Flush writes the buffered rows and syncs the file: every row added before it survives
// the process, or the machine, stopping.
func (j *TraceJournal) Flush() error {
	if err := j.write(); err != nil {
		return err
	}
	if err := j.f.Sync(); err != nil {
		j.err = fmt.Errorf("record: trace journal %s: %w", j.path, err)
		return j.err
	}
	return nil
}

// Rows returns how many rows Add has accepted.
func (j *TraceJournal) Rows() int64 { return j.rows }

// Close flushes and closes the file. Closing twice returns the first Close's result.
func (j *TraceJournal) Close() error {
	if j.f == nil {
		return j.closeErr
	}
	err := j.Flush()
	if cerr := j.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("record: trace journal %s: %w", j.path, cerr)
	}
	j.f, j.closeErr = nil, err
	if j.err == nil {
		j.err = fmt.Errorf("record: trace journal %s: closed", j.path)
	}
	return err
}

// appendPayload appends r's payload (the format above) to b.
func appendPayload(b []byte, r *trace.Request) []byte {
	var flags uint64
	set := func(bit uint64, on bool) {
		if on {
			flags |= bit
		}
	}
	set(journalSession, r.HasSession)
	set(journalTools, r.HasToolTokens)
	set(journalImageTokens, r.HasImageTokens)
	set(journalBlocks, r.PrefixBlocks != nil)
	set(journalSized, len(r.Images) > 0 && r.Images[0].Known())
	set(journalCall, r.Call != nil)
	set(journalParents, r.Call != nil && r.Call.Parents != nil)
	set(journalParams, r.Params != nil)
	set(journalHasStream, r.Params != nil && r.Params.HasStream)
	set(journalStream, r.Params != nil && r.Params.Stream)
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendVarint(b, r.ID)
	b = binary.AppendVarint(b, int64(r.Arrival))
	b = binary.AppendVarint(b, int64(r.PromptTokens))
	b = binary.AppendVarint(b, int64(r.OutputTokens))
	if r.HasSession {
		b = binary.AppendVarint(b, r.SessionID)
	}
	if r.HasToolTokens {
		b = binary.AppendVarint(b, int64(r.ToolTokens))
	}
	if r.HasImageTokens {
		b = binary.AppendVarint(b, int64(r.ImageTokens))
	}
	b = appendString(b, r.Model)
	if r.PrefixBlocks != nil {
		b = binary.AppendUvarint(b, uint64(len(r.PrefixBlocks)))
		for _, id := range r.PrefixBlocks {
			b = binary.LittleEndian.AppendUint64(b, uint64(id))
		}
	}
	b = binary.AppendUvarint(b, uint64(len(r.Images)))
	if flags&journalSized != 0 {
		for _, im := range r.Images {
			b = binary.AppendVarint(b, int64(im.Width))
			b = binary.AppendVarint(b, int64(im.Height))
		}
	}
	if c := r.Call; c != nil {
		if c.Parents != nil {
			b = binary.AppendUvarint(b, uint64(len(c.Parents)))
			for _, p := range c.Parents {
				b = binary.AppendVarint(b, p)
			}
		}
		b = binary.AppendVarint(b, int64(c.Gap))
		b = appendString(b, c.GapKind)
		b = binary.AppendVarint(b, int64(c.Duration))
		b = binary.AppendVarint(b, int64(c.PrefixTokens))
		b = binary.AppendVarint(b, int64(c.CachedTokens))
		b = binary.AppendVarint(b, int64(c.ReasoningTokens))
	}
	if p := r.Params; p != nil {
		b = appendString(b, p.API)
		b = binary.AppendVarint(b, int64(p.MaxTokens))
		b = binary.AppendVarint(b, int64(p.N))
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads a payload; the first error sticks and every later read returns zero.
type decoder struct {
	b      []byte
	err    error
	models map[string]string // interned: few distinct models, many rows
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%s: payload ends early or holds a bad varint", what)
	}
}

func (d *decoder) varint(what string) int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) int32(what string) int32 {
	v := d.varint(what)
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail(what)
		return 0
	}
	return int32(v)
}

// count reads a list's length, refusing one that could not fit in what is left at size
// bytes an element (so that corruption cannot ask for a huge allocation).
func (d *decoder) count(what string, size int) int {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > uint64(len(d.b)-n)/uint64(size) {
		d.fail(what)
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

func (d *decoder) bytes(what string) []byte {
	n := d.count(what, 1)
	s := d.b[:n]
	d.b = d.b[n:]
	return s
}

// string reads a string, returning one of known when it is among them (no allocation).
func (d *decoder) string(what string, known []string) string {
	s := d.bytes(what)
	if k := slices.Index(known, string(s)); k >= 0 {
		return known[k]
	}
	return string(s)
}

// decodePayload decodes a payload made by appendPayload.
func (d *decoder) decodePayload(b []byte) (trace.Request, error) {
	d.b, d.err = b, nil
	var r trace.Request
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		return r, errors.New("flags: bad varint")
	}
	d.b = d.b[n:]
	flags := v
	r.ID = d.varint("request_id")
	r.Arrival = time.Duration(d.varint("arrival_ns"))
	r.PromptTokens = d.int32("prompt_tokens")
	r.OutputTokens = d.int32("output_tokens")
	if flags&journalSession != 0 {
		r.SessionID, r.HasSession = d.varint("session_id"), true
	}
	if flags&journalTools != 0 {
		r.ToolTokens, r.HasToolTokens = d.int32("tool_tokens"), true
	}
	if flags&journalImageTokens != 0 {
		r.ImageTokens, r.HasImageTokens = d.int32("image_tokens"), true
	}
	m := d.bytes("model")
	if v, ok := d.models[string(m)]; ok {
		r.Model = v
	} else if len(m) > 0 {
		r.Model = string(m)
		if len(d.models) < 1024 {
			d.models[r.Model] = r.Model
		}
	}
	if flags&journalBlocks != 0 {
		r.PrefixBlocks = make([]int64, d.count("prefix_blocks", 8))
		for k := range r.PrefixBlocks {
			r.PrefixBlocks[k] = int64(binary.LittleEndian.Uint64(d.b))
			d.b = d.b[8:]
		}
	}
	d.images(&r, flags&journalSized != 0)
	if flags&journalCall != 0 {
		r.Call = d.call(flags&journalParents != 0)
	}
	if flags&journalParams != 0 {
		r.Params = &trace.Params{API: d.string("api", trace.APIs), MaxTokens: d.int32("max_tokens"), N: d.int32("n"),
			Stream: flags&journalStream != 0, HasStream: flags&journalHasStream != 0}
	}
	switch {
	case d.err != nil:
		return r, d.err
	case len(d.b) > 0:
		return r, fmt.Errorf("%d bytes after the row's last field", len(d.b))
	}
	return r, nil
}

// images reads the image count (bounded by trace.MaxImages, and for sized images by the
// bytes left) and the sizes when sized.
func (d *decoder) images(r *trace.Request, sized bool) {
	v, n := binary.Uvarint(d.b)
	if d.err != nil || n <= 0 || v > trace.MaxImages || sized && v > uint64(len(d.b)-n)/2 {
		d.fail("images")
		return
	}
	d.b = d.b[n:]
	if v == 0 {
		return
	}
	r.Images = make([]trace.Image, v)
	if sized {
		for k := range r.Images {
			r.Images[k] = trace.Image{Width: d.int32("image_widths"), Height: d.int32("image_heights")}
		}
	}
}

func (d *decoder) call(parents bool) *trace.Call {
	c := &trace.Call{}
	if parents {
		c.Parents = make([]int64, d.count("parents", 1))
		for k := range c.Parents {
			c.Parents[k] = d.varint("parents")
		}
	}
	c.Gap = time.Duration(d.varint("gap_ns"))
	c.GapKind = d.string("gap_kind", []string{trace.GapTool, trace.GapUser})
	c.Duration = time.Duration(d.varint("duration_ns"))
	c.PrefixTokens = d.int32("prefix_tokens")
	c.CachedTokens = d.int32("cached_tokens")
	c.ReasoningTokens = d.int32("reasoning_tokens")
	return c
}

// JournalInfo tells what ConvertTraceJournal found.
type JournalInfo struct {
	Rows int64 // rows written to the trace
	// TornBytes counts the bytes of a last record cut by a crash (or a tail of zeros),
	// dropped; 0 for a journal that was closed, or synced, whole.
	TornBytes int64
}

// journalEntry is the index ConvertTraceJournal sorts: 24 bytes a row.
type journalEntry struct{ arrival, id, off int64 }

// ConvertTraceJournal writes the rows of the trace journal at journal to the trace file
// out, sorted by arrival then request_id, through trace.Create (a temporary file renamed
// into place, so out is never half-written). It reads the journal twice: once to check
// every record and index it (its arrival, request_id and byte offset), then, in the
// index's sorted order, each record by ReadAt; so its memory is the index, not the rows.
// A last record the file ends inside (a crash mid-write) is dropped and counted in
// TornBytes; a bad record before the end is an error naming the journal and its offset.
// Measured on 100,000 rows of 1,000 prefix blocks (an 800 MB journal): 7,300 rows/s and
// a peak of 290 MB RSS, nearly all of it trace.Writer's (BenchmarkTraceJournalConvert).
func ConvertTraceJournal(journal, out string) (JournalInfo, error) {
	var info JournalInfo
	f, err := os.Open(journal)
	if err != nil {
		return info, fmt.Errorf("record: convert trace journal: %w", err)
	}
	defer f.Close()
	meta, index, torn, err := scanJournal(f, journal)
	if err != nil {
		return info, err
	}
	info.TornBytes = torn
	slices.SortFunc(index, func(a, b journalEntry) int {
		return cmp.Or(cmp.Compare(a.arrival, b.arrival), cmp.Compare(a.id, b.id), cmp.Compare(a.off, b.off))
	})
	w, err := trace.Create(out, meta)
	if err != nil {
		return info, err
	}
	rd := recordReader{f: f, name: journal, d: decoder{models: map[string]string{}}}
	for _, e := range index {
		r, err := rd.read(e.off)
		if err == nil {
			err = w.Write(r)
		}
		if err != nil {
			w.Abort()
			return info, fmt.Errorf("record: trace journal %s: record at byte %d: %w", journal, e.off, err)
		}
		info.Rows++
	}
	return info, w.Close()
}

// countingReader counts the bytes read through it, for the records' offsets.
type countingReader struct {
	r *bufio.Reader
	n int64
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

func (c *countingReader) full(p []byte) error {
	n, err := io.ReadFull(c.r, p)
	c.n += int64(n)
	return err
}

// scanJournal reads the header and checks and indexes every record; torn is the bytes of
// a torn tail.
func scanJournal(f *os.File, name string) (meta trace.Meta, index []journalEntry, torn int64, err error) {
	cr := &countingReader{r: bufio.NewReaderSize(f, 1<<20)}
	if meta, err = readJournalHeader(cr, name); err != nil {
		return meta, nil, 0, err
	}
	bad := func(off int64, format string, a ...any) error {
		return fmt.Errorf("record: trace journal %s: record at byte %d: %s (the journal is corrupt there)", name, off, fmt.Sprintf(format, a...))
	}
	var payload []byte
	for {
		off := cr.n
		ln, hdr, err := readRecordHead(cr)
		switch {
		case err == io.EOF && cr.n == off:
			return meta, index, 0, nil // a clean end
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return meta, index, cr.n - off, nil
		case err == errBadHead && zeroTail(hdr, cr):
			return meta, index, cr.n - off, nil
		case err != nil:
			return meta, index, 0, bad(off, "%v", err)
		}
		if cap(payload) < int(ln)+4 {
			payload = make([]byte, ln+4)
		}
		payload = payload[:ln+4]
		if err := cr.full(payload); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return meta, index, cr.n - off, nil
			}
			return meta, index, 0, fmt.Errorf("record: trace journal %s: %w", name, err)
		}
		p := payload[:ln]
		if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(payload[ln:]) {
			if binary.LittleEndian.Uint32(payload[ln:]) == 0 && zeroTail(nil, cr) {
				// The last record, its end never written: torn.
				return meta, index, cr.n - off, nil
			}
			return meta, index, 0, bad(off, "payload checksum mismatch")
		}
		e := journalEntry{off: off}
		if e.id, e.arrival, err = payloadKey(p); err != nil {
			return meta, index, 0, bad(off, "%v", err)
		}
		index = append(index, e)
	}
}

var errBadHead = errors.New("length checksum mismatch")

// readRecordHead reads a record's length and its checksum; hdr is the bytes read.
func readRecordHead(cr *countingReader) (n uint64, hdr []byte, err error) {
	var b [binary.MaxVarintLen64 + 4]byte
	k := 0
	for {
		c, err := cr.ReadByte()
		if err != nil {
			return 0, b[:k], err
		}
		b[k] = c
		k++
		if c < 0x80 {
			break
		}
		if k == binary.MaxVarintLen64 {
			return 0, b[:k], errBadHead
		}
	}
	if err := cr.full(b[k : k+4]); err != nil {
		return 0, nil, err
	}
	n, _ = binary.Uvarint(b[:k])
	if crc32.Checksum(b[:k], castagnoli) != binary.LittleEndian.Uint32(b[k:k+4]) {
		return 0, b[:k+4], errBadHead
	}
	if n == 0 || n > maxRecord {
		return 0, b[:k+4], fmt.Errorf("length %d, want 1..%d", n, maxRecord)
	}
	return n, b[:k+4], nil
}

// zeroTail reports whether hdr and everything after it to the end of the file are zero
// bytes: space a file system gave the file before the data reached it.
func zeroTail(hdr []byte, cr *countingReader) bool {
	for _, c := range hdr {
		if c != 0 {
			return false
		}
	}
	for {
		c, err := cr.ReadByte()
		if err != nil {
			return err == io.EOF
		}
		if c != 0 {
			return false
		}
	}
}

// payloadKey decodes what the index needs of a payload: its request_id and arrival.
func payloadKey(p []byte) (id, arrival int64, err error) {
	d := decoder{b: p}
	if _, n := binary.Uvarint(d.b); n > 0 {
		d.b = d.b[n:]
	} else {
		d.fail("flags")
	}
	id, arrival = d.varint("request_id"), d.varint("arrival_ns")
	return id, arrival, d.err
}

// readJournalHeader reads and checks the header, returning its metadata.
func readJournalHeader(cr *countingReader, name string) (trace.Meta, error) {
	var meta trace.Meta
	fail := func(format string, a ...any) (trace.Meta, error) {
		return meta, fmt.Errorf("record: trace journal %s: header: %s", name, fmt.Sprintf(format, a...))
	}
	head := make([]byte, len(journalMagic)+1)
	if err := cr.full(head); err != nil || string(head[:len(journalMagic)]) != journalMagic {
		if k, ok := filekind.OfFile(name); ok && err == nil {
			return fail("%s", filekind.Mismatch(k, "an llmreplay trace journal", name))
		}
		return fail("not an llmreplay trace journal (it does not start with %q)", journalMagic)
	}
	if head[len(journalMagic)] != journalVersion {
		return fail("version %d; this llmreplay reads version %d", head[len(journalMagic)], journalVersion)
	}
	n, err := binary.ReadUvarint(cr)
	if err != nil || n > maxRecord {
		return fail("metadata length: cut or corrupt")
	}
	mj := make([]byte, n+4)
	if err := cr.full(mj); err != nil {
		return fail("cut short (%v)", err)
	}
	h := append(append(head, binary.AppendUvarint(nil, n)...), mj[:n]...)
	if crc32.Checksum(h, castagnoli) != binary.LittleEndian.Uint32(mj[n:]) {
		return fail("checksum mismatch")
	}
	if err := json.Unmarshal(mj[:n], &meta); err != nil {
		return fail("metadata: %v", err)
	}
	return meta, nil
}

// recordReader reads records by offset, as the sorted index asks for them.
type recordReader struct {
	f    *os.File
	name string
	buf  []byte
	hint int // the last record's size: rows of a recording are alike
	d    decoder
}

// read reads, checks and decodes the record at off: one ReadAt when the record is no
// larger than the one before.
func (rr *recordReader) read(off int64) (trace.Request, error) {
	want := max(rr.hint, 256)
	if cap(rr.buf) < want {
		rr.buf = make([]byte, want)
	}
	b := rr.buf[:want]
	got, err := rr.f.ReadAt(b, off)
	if err != nil && err != io.EOF {
		return trace.Request{}, err
	}
	b = b[:got]
	ln, k := binary.Uvarint(b)
	if k <= 0 || ln == 0 || ln > maxRecord {
		return trace.Request{}, errors.New("the journal changed since it was scanned")
	}
	total := k + 4 + int(ln) + 4
	if total > len(b) {
		if cap(rr.buf) < total {
			nb := make([]byte, total)
			copy(nb, b)
			rr.buf = nb
		}
		b = rr.buf[:total]
		if _, err := rr.f.ReadAt(b[got:], off+int64(got)); err != nil {
			return trace.Request{}, err
		}
	}
	rr.hint = total
	p := b[k+4 : k+4+int(ln)]
	if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(b[k+4+int(ln):]) {
		return trace.Request{}, errors.New("payload checksum mismatch (the journal changed since it was scanned)")
	}
	return rr.d.decodePayload(p)
}
