package results

import (
	"encoding/json"
	"fmt"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/llmreplay/llmreplay/internal/filekind"
)

// File is a results file open for reading: its Parquet reader, the Arrow reader over it and
// the run it records. Both decoders of results files start here, ReadFile (row by row into
// Results) and the analysis (column by column), so a file is recognised, and its run
// metadata read and validated, one way.
type File struct {
	Path    string
	Parquet *file.Reader
	Arrow   *pqarrow.FileReader
	Run     RunMeta
}

// OpenOptions control Open.
type OpenOptions struct {
	// Props are the Parquet reader properties; nil means the library's defaults.
	Props *parquet.ReaderProperties
	// BatchSize is the number of rows per Arrow record; it must be positive (pqarrow
	// silently returns no rows for 0).
	BatchSize int64
}

// Open opens the results file at path and reads its run metadata. A file that is not
// Parquet is named for what it is (a CSV, a journal, ...); a Parquet file that is not a
// results file (a trace, another tool's file) is refused with what it is. The errors name
// the operation and the file ("open x.parquet: ...", "read x.parquet: ..."); the caller
// prefixes its package. Close the File when done.
func Open(path string, o OpenOptions) (*File, error) {
	if o.BatchSize <= 0 {
		return nil, fmt.Errorf("open %s: batch size %d is not positive", path, o.BatchSize)
	}
	var opts []file.ReadOption
	if o.Props != nil {
		opts = append(opts, file.WithReadProps(o.Props))
	}
	pr, err := file.OpenParquetFile(path, false, opts...)
	if err != nil {
		if k, ok := filekind.OfFile(path); ok && k != filekind.Parquet {
			return nil, fmt.Errorf("open %s: %s", path, filekind.Mismatch(k, "a results file (Parquet)", path))
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: o.BatchSize}, memory.DefaultAllocator)
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	run, err := ReadRun(path, pr)
	if err != nil {
		pr.Close()
		return nil, err
	}
	return &File{Path: path, Parquet: pr, Arrow: fr, Run: run}, nil
}

// Close closes the file.
func (f *File) Close() error { return f.Parquet.Close() }

// Check checks the file's schema against the contract by column name (Check) and returns
// where its columns are. The error names the file.
func (f *File) Check() (*Layout, error) {
	sc, err := f.Arrow.Schema()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Path, err)
	}
	l, err := Check(sc)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Path, err)
	}
	return l, nil
}

// ReadRun reads the format and run metadata of the results file pr reads (at path),
// checked and validated as Open does, without reading its rows. pqarrow stores the Arrow
// schema (and its metadata) under ARROW:schema and copies the llmreplay keys into the
// Parquet key-value metadata as well; a file written without the copy is read from the
// Arrow schema. The error names the file ("read x.parquet: ...").
func ReadRun(path string, pr *file.Reader) (RunMeta, error) {
	m, err := readRun(path, pr)
	if err != nil {
		return m, fmt.Errorf("read %s: %w", path, err)
	}
	return m, nil
}

func readRun(path string, pr *file.Reader) (RunMeta, error) {
	kv := pr.MetaData().KeyValueMetadata()
	format := kv.FindValue(MetaFormat)
	if format != nil {
		return parseRun(path, format, kv.FindValue(MetaRun))
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 1}, memory.DefaultAllocator)
	if err == nil {
		if sc, err := fr.Schema(); err == nil {
			md := sc.Metadata()
			if i := md.FindKey(MetaFormat); i >= 0 {
				v := md.Values()[i]
				format = &v
			}
			if i := md.FindKey(MetaRun); i >= 0 {
				v := md.Values()[i]
				return parseRun(path, format, &v)
			}
		}
	}
	return RunMeta{}, fmt.Errorf("schema metadata %s missing: not an llmreplay results file", MetaFormat)
}

// parseRun checks the format, decodes the run and validates its shard fields: a file
// without shard_count was written by a single process (1 shard).
func parseRun(path string, format, run *string) (RunMeta, error) {
	var m RunMeta
	if format == nil || *format != Format {
		got := "none"
		if format != nil {
			got = *format
		}
		if got == "trace/v1" {
			return m, fmt.Errorf("this is a trace (%s = %q), not a replay's results file; replay it with `llmreplay replay --trace %s`", MetaFormat, got, path)
		}
		return m, fmt.Errorf("schema metadata %s = %q, want %q", MetaFormat, got, Format)
	}
	if run == nil {
		return m, fmt.Errorf("schema metadata %s missing", MetaRun)
	}
	if err := json.Unmarshal([]byte(*run), &m); err != nil {
		return m, fmt.Errorf("schema metadata %s: %w", MetaRun, err)
	}
	if m.ShardCount <= 0 {
		m.ShardCount = 1
	}
	if m.ShardCount > 1<<16 {
		return m, fmt.Errorf("schema metadata %s: shard_count %d is implausible", MetaRun, m.ShardCount)
	}
	if m.ShardIndex < 0 || m.ShardIndex >= m.ShardCount {
		return m, fmt.Errorf("schema metadata %s: shard_index %d outside [0, %d)", MetaRun, m.ShardIndex, m.ShardCount)
	}
	return m, nil
}

// Leaves returns, per top-level field of s, the indices of its Parquet leaf columns, in
// order: one for a flat column or a list of scalars, two for a map. They are what pqarrow's
// GetRecordReader selects and what a Parquet row group's Column takes.
func Leaves(s *arrow.Schema) map[string][]int {
	out := make(map[string][]int, s.NumFields())
	leaf := 0
	for _, f := range s.Fields() {
		n := countLeaves(f.Type)
		for k := range n {
			out[f.Name] = append(out[f.Name], leaf+k)
		}
		leaf += n
	}
	return out
}

func countLeaves(t arrow.DataType) int {
	switch t := t.(type) {
	case *arrow.ListType:
		return countLeaves(t.Elem())
	case *arrow.StructType:
		n := 0
		for _, f := range t.Fields() {
			n += countLeaves(f.Type)
		}
		return n
	case *arrow.MapType:
		return countLeaves(t.KeyType()) + countLeaves(t.ItemType())
	}
	return 1
}

// Locate locates the contract's columns in the schema of records that hold some of them:
// the records of a reader that selected columns of a file Check accepted. Unlike Check it
// requires nothing; Array then reports a required column the records lack.
func Locate(s *arrow.Schema) (*Layout, error) {
	l := &Layout{pos: make([]int, len(columns))}
	for i, c := range columns {
		is := s.FieldIndices(c.Name)
		if len(is) > 1 {
			return nil, &Error{c.Name, fmt.Sprintf("appears %d times", len(is))}
		}
		l.pos[i] = -1
		if len(is) == 1 {
			l.pos[i] = is[0]
		}
	}
	return l, nil
}
