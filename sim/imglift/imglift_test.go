package imglift

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestLift: a data URL and a "data" key's base64 are cut out and resolve back to their
// bytes through the parsed placeholder; a short string, an escaped one and a data URL
// that is not base64 stay in the body; the lifted body is still the same JSON with the
// placeholders in the images' place.
func TestLift(t *testing.T) {
	b64 := strings.Repeat("QUJD", 40)
	url := "data:image/png;base64," + b64
	body := `{"a":"` + url + `","src":{"data" : "` + b64 + `"},"short":"data:image/png;base64,QQ==",` +
		`"esc":"` + strings.Repeat(`a\/`, 40) + `","plain":"data:text/plain,` + strings.Repeat("x", 80) + `"}`
	small, blobs := Lift([]byte(body))
	if len(blobs) != 2 || string(blobs[0]) != url || string(blobs[1]) != b64 {
		t.Fatalf("blobs %q", blobs)
	}
	var v struct {
		A     string                `json:"a"`
		Src   struct{ Data string } `json:"src"`
		Short string
		Esc   string
		Plain string
	}
	if err := json.Unmarshal(small, &v); err != nil {
		t.Fatalf("lifted body is not JSON: %v\n%s", err, small)
	}
	for i, s := range []string{v.A, v.Src.Data} {
		src, lifted, ok := Blob(s, blobs)
		if !lifted || !ok || !bytes.Equal(src, blobs[i]) {
			t.Errorf("placeholder %d resolved to %.20q (lifted %v ok %v)", i, src, lifted, ok)
		}
	}
	if v.Short != "data:image/png;base64,QQ==" || !strings.HasPrefix(v.Plain, "data:text/plain,") || !strings.HasPrefix(v.Esc, "a/a/") {
		t.Errorf("strings that are not lifted images changed: %+v", v)
	}
	if src, lifted, ok := Blob("text", blobs); lifted || !ok || string(src) != "text" {
		t.Errorf("Blob of a plain string: %q %v %v", src, lifted, ok)
	}
	for _, bad := range []string{MarkDecoded + "2", MarkDecoded + "-1", MarkDecoded + "x"} {
		if _, lifted, ok := Blob(bad, blobs); !lifted || ok {
			t.Errorf("Blob(%q): lifted %v ok %v; want a placeholder naming no blob", bad, lifted, ok)
		}
	}
	if s, b := Lift([]byte(`{"a":"` + url)); string(s) != `{"a":"`+url || b != nil {
		t.Errorf("an unterminated string must leave the body as it is")
	}
}
