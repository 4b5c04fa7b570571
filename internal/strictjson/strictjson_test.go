package strictjson

import (
	"reflect"
	"strings"
	"testing"
)

type inner struct {
	Rate float64 `json:"rate"`
}

type doc struct {
	Name  string           `json:"name"`
	Items []inner          `json:"items"`
	ByKey map[string]inner `json:"by_key"`
	Ptr   *inner           `json:"ptr,omitempty"`
	Plain int              // no tag: matched by its Go name, ignoring case
	Skip  int              `json:"-"` //
}

// TestDecode: a good document decodes; each fault is refused with the file's name and
// where the fault is, as a path of JSON names.
func TestDecode(t *testing.T) {
	var d doc
	if err := Decode("f.json", []byte(`{"name":"a","items":[{"rate":1}],"by_key":{"x":{"rate":2}},"ptr":{"rate":3},"PLAIN":4}`), &d, true); err != nil ||
		d.Name != "a" || d.Items[0].Rate != 1 || d.ByKey["x"].Rate != 2 || d.Ptr.Rate != 3 || d.Plain != 4 {
		t.Fatalf("%+v %v", d, err)
	}
	for _, c := range []struct{ in, want string }{
		{`{"nam":"a"}`, `f.json: unknown field "nam"`},
		{`{"items":[{"rate":1},{"rate":1,"rat":2}]}`, `f.json: items[1]: unknown field "rat"`},
		{`{"by_key":{"x":{"rat":2}}}`, `f.json: by_key.x: unknown field "rat"`},
		{`{"ptr":{"r":3}}`, `f.json: ptr: unknown field "r"`},
		{`{"Skip":1}`, `f.json: unknown field "Skip"`},
		{`{"items":[{"rate":"1"}]}`, `f.json: items.rate: a JSON string where a number belongs`},
		{"{\n\"name\":\"a\",\n}", `f.json: line 3: invalid character '}'`},
		{`{"name":"a"} 1`, `f.json: line 1: more after the JSON value`},
		{"  \n", `f.json: empty`},
		{`{"name":`, `f.json: cut short`},
	} {
		err := Decode("f.json", []byte(c.in), new(doc), true)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.in, err, c.want)
		}
	}
	if err := Decode("f.json", []byte(`{"nam":"a"}`), new(doc), false); err != nil {
		t.Errorf("not strict: %v", err)
	}
}

type withOpt struct {
	A     int      `json:"a"`
	B     int      `json:"b,omitempty"`
	In    inner    `json:"in"`
	Items []inner  `json:"items"`
	P     *inner   `json:"p,omitempty"`
	Q     *inner   `json:"q,string,omitempty"`
	Tags  []string `json:"tags"`
}

// TestMissing: a field without omitempty must be there, at every depth; one with it may
// be left out; keys match as encoding/json matches them.
func TestMissing(t *testing.T) {
	for _, c := range []struct{ in, where, key string }{
		{`{"a":1,"in":{"rate":1},"items":[],"tags":[]}`, "", ""},
		{`{"A":1,"IN":{"Rate":1},"items":[{"rate":2}],"tags":null,"p":null}`, "", ""},
		{`{"in":{"rate":1},"items":[],"tags":[]}`, "", "a"},
		{`{"a":1,"in":{},"items":[],"tags":[]}`, "in", "rate"},
		{`{"a":1,"in":{"rate":1},"items":[{"rate":1},{}],"tags":[]}`, "items[1]", "rate"},
		{`{"a":1,"in":{"rate":1},"items":[],"tags":[],"p":{}}`, "p", "rate"},
		{`{"a":1,"in":{"rate":1},"items":[]}`, "", "tags"},
	} {
		where, key, ok := Missing([]byte(c.in), reflect.TypeFor[withOpt]())
		if where != c.where || key != c.key || ok != (c.key != "") {
			t.Errorf("%s: %q %q %v, want %q %q", c.in, where, key, ok, c.where, c.key)
		}
	}
}
