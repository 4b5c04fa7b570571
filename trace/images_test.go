package trace

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
)

// imageRequests are rows of every image shape: none, unknown sizes (0x0), known sizes,
// image_tokens recorded (0 included) or not, beside tools.
func imageRequests() []Request {
	return []Request{
		{ID: 0, PromptTokens: 100, OutputTokens: 5},
		{ID: 1, Arrival: 1, PromptTokens: 100, OutputTokens: 5, Images: make([]Image, 3)},
		{ID: 2, Arrival: 2, PromptTokens: 900, OutputTokens: 5, Images: []Image{{640, 480}, {1, 16384}}, ImageTokens: 800, HasImageTokens: true},
		{ID: 3, Arrival: 3, PromptTokens: 100, OutputTokens: 5, Images: []Image{{16384, 1}}, ImageTokens: 60, HasImageTokens: true, ToolTokens: 40, HasToolTokens: true},
		{ID: 4, Arrival: 4, PromptTokens: 100, OutputTokens: 5, ImageTokens: 0, HasImageTokens: true},
		{ID: 5, Arrival: 5, PromptTokens: 100, OutputTokens: 5, Images: make([]Image, 1), ImageTokens: 100, HasImageTokens: true},
	}
}

// TestImagesRoundTrip: the image columns are written and read back as they were, a file
// without images says so from its footer, and a trace written before the columns existed
// (the embedded sample) reads as one whose requests send none.
func TestImagesRoundTrip(t *testing.T) {
	reqs := imageRequests()
	path := filepath.Join(t.TempDir(), "i.parquet")
	writeFile(t, path, Meta{Source: "test"}, reqs)
	got, _ := readAll(t, path)
	if !reflect.DeepEqual(got, reqs) {
		t.Fatalf("read back\n%+v\nwant\n%+v", got, reqs)
	}
	none := filepath.Join(t.TempDir(), "n.parquet")
	writeFile(t, none, Meta{}, reqs[:1])
	for file, want := range map[string]bool{path: true, none: false} {
		r, err := Open(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []string{ColImages, ColImageWidths, ColImageHeights, ColImageTokens} {
			if r.HasValues(c) != want {
				t.Errorf("%s: HasValues(%s) = %v", file, c, !want)
			}
		}
		r.Close()
	}

	// A file written before the image columns existed: the trace/v1 core only.
	i64, i32 := arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Int32
	md := arrow.NewMetadata([]string{MetaFormat}, []string{Format})
	sc := arrow.NewSchema([]arrow.Field{{Name: ColRequestID, Type: i64}, {Name: ColArrivalNS, Type: i64},
		{Name: ColPromptTokens, Type: i32}, {Name: ColOutputTokens, Type: i32}}, &md)
	old := filepath.Join(t.TempDir(), "old.parquet")
	writeForeign(t, old, sc, func(b *array.RecordBuilder) {
		b.Field(0).(*array.Int64Builder).AppendValues([]int64{0, 1}, nil)
		b.Field(1).(*array.Int64Builder).AppendValues([]int64{0, 1}, nil)
		b.Field(2).(*array.Int32Builder).AppendValues([]int32{10, 10}, nil)
		b.Field(3).(*array.Int32Builder).AppendValues([]int32{1, 1}, nil)
	})
	rows, _ := readAll(t, old)
	for _, q := range rows {
		if q.Images != nil || q.HasImageTokens {
			t.Fatalf("a row of a file without image columns has images: %+v", q)
		}
	}
}

// TestImagesKeptByTransforms: slice (with speedup) and shard keep every image field.
func TestImagesKeptByTransforms(t *testing.T) {
	reqs := imageRequests()
	dir := t.TempDir()
	in := filepath.Join(dir, "in.parquet")
	writeFile(t, in, Meta{}, reqs)
	out := filepath.Join(dir, "out.parquet")
	if _, err := SliceFile(context.Background(), in, out, SliceSpec{Start: 1, Speedup: 2}); err != nil {
		t.Fatal(err)
	}
	got, _ := readAll(t, out)
	if len(got) != len(reqs)-1 {
		t.Fatalf("slice kept %d rows", len(got))
	}
	for i, g := range got {
		w := reqs[i+1]
		if !reflect.DeepEqual(g.Images, w.Images) || g.ImageTokens != w.ImageTokens || g.HasImageTokens != w.HasImageTokens {
			t.Errorf("slice row %d: %+v, want the images of %+v", i, g, w)
		}
	}
	var n int
	for i := range 3 {
		src := NewShardSource(NewSliceSource(reqs), Shard{Index: i, Count: 3})
		for src.Next() {
			g := src.Request()
			if !reflect.DeepEqual(g, reqs[g.ID]) {
				t.Errorf("shard %d: %+v, want %+v", i, g, reqs[g.ID])
			}
			n++
		}
	}
	if n != len(reqs) {
		t.Errorf("shards yield %d rows", n)
	}
}

// TestImagesWriterRejects: the writer refuses bad image fields, naming the file, the row,
// the request_id and the column.
func TestImagesWriterRejects(t *testing.T) {
	cases := []struct {
		r    Request
		want string
	}{
		{Request{Images: []Image{{640, 480}, {}}}, "image_widths: image 1 is 0x0 but image 0 is 640x480"},
		{Request{Images: []Image{{}, {640, 480}}}, "image_widths: image 1 is 640x480 but image 0 is 0x0"},
		{Request{Images: []Image{{0, 480}}}, "image_widths: image 0 is 0 pixels wide, want 1..16384"},
		{Request{Images: []Image{{16385, 480}}}, "image_widths: image 0 is 16385 pixels wide, want 1..16384"},
		{Request{Images: []Image{{640, -1}}}, "image_heights: image 0 is -1 pixels high, want 1..16384"},
		{Request{Images: make([]Image, MaxImages+1)}, "images: 65537, at most 65536"},
		{Request{Images: make([]Image, 1), ImageTokens: 101, HasImageTokens: true}, "image_tokens: 101 not in [0, prompt_tokens 100]"},
		{Request{Images: make([]Image, 1), ImageTokens: -1, HasImageTokens: true}, "image_tokens: -1 not in [0, prompt_tokens 100]"},
		{Request{ImageTokens: 5, HasImageTokens: true}, "image_tokens: 5 but the request has no images"},
		{Request{Images: make([]Image, 1), ImageTokens: 61, HasImageTokens: true, ToolTokens: 40, HasToolTokens: true}, "image_tokens: 61 and tool_tokens 40 are more than prompt_tokens 100 together"},
	}
	for _, c := range cases {
		c.r.ID, c.r.PromptTokens, c.r.OutputTokens = 7, 100, 1
		path, err := writeOne(t, c.r)
		if err == nil || !strings.Contains(err.Error(), path+": row 0 (request_id 7): "+c.want) {
			t.Errorf("Write: %v, want an error naming the file, row and %q", err, c.want)
		}
	}
}

// TestImagesReaderRejects: a file another tool wrote with inconsistent image columns is
// refused at the bad row, naming the file, the row, the request_id and the column.
func TestImagesReaderRejects(t *testing.T) {
	i32 := arrow.PrimitiveTypes.Int32
	sc := foreignSchema([]arrow.Field{
		{Name: ColImages, Type: i32, Nullable: true},
		// "element", as some writers name a list's items: read all the same.
		{Name: ColImageWidths, Type: arrow.ListOfField(arrow.Field{Name: "element", Type: i32, Nullable: true}), Nullable: true},
		{Name: ColImageHeights, Type: arrow.ListOf(i32), Nullable: true},
		{Name: ColImageTokens, Type: i32, Nullable: true}})
	type bad struct {
		n      int32 // -100: null
		ws, hs []int32
		wNull  bool
		hNull  bool
		tokens int32 // -100: null
		want   string
	}
	cases := []bad{
		{n: -1, wNull: true, hNull: true, tokens: -100, want: "images: -1 not in [0, 65536]"},
		{n: 2, ws: []int32{3}, hs: []int32{4}, tokens: -100, want: "image_widths has 1 values and image_heights 1, want images = 2 of each"},
		{n: 1, ws: []int32{3}, hNull: true, tokens: -100, want: "image_widths and image_heights: one is null and the other is not"},
		{n: -100, ws: []int32{3}, hs: []int32{4}, tokens: -100, want: "image_widths has 1 values and image_heights 1, want images = 0 of each"},
		{n: 1, ws: []int32{0}, hs: []int32{0}, tokens: -100, want: "image_widths/image_heights: image 0 is 0x0 in a size list"},
		{n: 1, ws: []int32{20000}, hs: []int32{4}, tokens: -100, want: "image_widths: image 0 is 20000 pixels wide"},
		{n: 1, wNull: true, hNull: true, tokens: 101, want: "image_tokens: 101 not in [0, prompt_tokens 100]"},
		{n: -100, wNull: true, hNull: true, tokens: 3, want: "image_tokens: 3 but the request has no images"},
	}
	for _, c := range cases {
		foreign := filepath.Join(t.TempDir(), "f.parquet")
		writeForeign(t, foreign, sc, func(b *array.RecordBuilder) {
			appendCore(b)
			// Row 0 is a good one with sized images.
			b.Field(4).(*array.Int32Builder).Append(1)
			for k, v := range []int32{640, 480} {
				lb := b.Field(5 + k).(*array.ListBuilder)
				lb.Append(true)
				lb.ValueBuilder().(*array.Int32Builder).Append(v)
			}
			b.Field(7).(*array.Int32Builder).Append(50)
			opt := func(f int, v int32) {
				if v == -100 {
					b.Field(f).AppendNull()
				} else {
					b.Field(f).(*array.Int32Builder).Append(v)
				}
			}
			list := func(f int, null bool, vs []int32) {
				lb := b.Field(f).(*array.ListBuilder)
				if null {
					lb.AppendNull()
					return
				}
				lb.Append(true)
				lb.ValueBuilder().(*array.Int32Builder).AppendValues(vs, nil)
			}
			opt(4, c.n)
			list(5, c.wNull, c.ws)
			list(6, c.hNull, c.hs)
			opt(7, c.tokens)
		})
		rows, err := readRows(t, foreign)
		if len(rows) != 1 || !reflect.DeepEqual(rows[0].Images, []Image{{640, 480}}) || rows[0].ImageTokens != 50 {
			t.Errorf("%q: the good row read as %+v", c.want, rows)
		}
		if err == nil || !strings.Contains(err.Error(), foreign+" row 1: request_id 7: "+c.want) {
			t.Errorf("read: %v, want %q", err, c.want)
		}
	}
}

// TestImportImageColumns: the generic importers take images and image_tokens through --map
// (empty or null: none; the images' sizes unknown, 0x0) and refuse bad values, naming the
// line and the source column.
func TestImportImageColumns(t *testing.T) {
	m := map[string]string{"arrival": "t", "prompt_tokens": "p", "output_tokens": "o", "tool_tokens": "tl", "images": "n", "image_tokens": "k"}
	want := []Request{
		{ID: 0, PromptTokens: 100, OutputTokens: 5, Images: make([]Image, 2), ImageTokens: 60, HasImageTokens: true, ToolTokens: 40, HasToolTokens: true},
		{ID: 1, Arrival: time.Second, PromptTokens: 100, OutputTokens: 5, Images: make([]Image, 1)},
		{ID: 2, Arrival: 2 * time.Second, PromptTokens: 100, OutputTokens: 5, ImageTokens: 0, HasImageTokens: true},
		{ID: 3, Arrival: 3 * time.Second, PromptTokens: 100, OutputTokens: 5},
	}
	csvGood := "t,p,o,tl,n,k\n0,100,5,40,2,60\n1,100,5,,1,\n2,100,5,,0,0\n3,100,5,,,\n"
	jsonGood := `{"t":0,"p":100,"o":5,"tl":40,"n":2,"k":60}` + "\n" + `{"t":1,"p":100,"o":5,"n":"1","k":null}` + "\n" +
		`{"t":2,"p":100,"o":5,"n":0,"k":0}` + "\n" + `{"t":3,"p":100,"o":5,"n":null}` + "\n"
	for format, src := range map[string]string{FormatCSV: csvGood, FormatJSONL: jsonGood} {
		rows, _, _, err := importString(t, src, ImportOptions{Format: format, Map: m})
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if !reflect.DeepEqual(rows, want) {
			t.Errorf("%s:\n%+v\nwant\n%+v", format, rows, want)
		}
	}
	bad := []struct {
		csv, json, want string
	}{
		{"0,100,5,,-1,", `{"t":0,"p":100,"o":5,"n":-1}`, `n: "-1" is not a non-negative integer`},
		{"0,100,5,,65537,", `{"t":0,"p":100,"o":5,"n":65537}`, "n: 65537, at most 65536"},
		{"0,100,5,,1,101", `{"t":0,"p":100,"o":5,"n":1,"k":101}`, "k: 101 is more than prompt_tokens 100"},
		{"0,100,5,,0,5", `{"t":0,"p":100,"o":5,"k":5}`, "k: 5 but the row sends no images"},
		{"0,100,5,50,1,51", `{"t":0,"p":100,"o":5,"tl":50,"n":1,"k":51}`, "k: 51 and tool_tokens 50 are more than prompt_tokens 100 together"},
		{"0,100,5,,x,", `{"t":0,"p":100,"o":5,"n":"x"}`, `n: "x" is not a non-negative integer`},
	}
	for _, c := range bad {
		for format, src := range map[string]string{FormatCSV: "t,p,o,tl,n,k\n3,100,5,,,\n" + c.csv + "\n", FormatJSONL: `{"t":3,"p":100,"o":5}` + "\n" + c.json + "\n"} {
			_, _, _, err := importString(t, src, ImportOptions{Format: format, Map: m, Sort: true})
			line := map[string]string{FormatCSV: "line 3: ", FormatJSONL: "line 2: "}[format] // the CSV has a header
			if err == nil || !strings.Contains(err.Error(), "in.txt "+line+c.want) {
				t.Errorf("%s %q: %v, want %q", format, c.want, err, c.want)
			}
		}
	}
}
