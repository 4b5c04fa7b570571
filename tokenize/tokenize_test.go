package tokenize

import "testing"

func TestCountOffline(t *testing.T) {
	for _, tc := range []struct {
		enc, text string
		want      int
	}{
		{CL100kBase, "hello world", 2},
		{O200kBase, "hello world", 2},
		{CL100kBase, "", 0},
	} {
		e, err := Get(tc.enc)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.Count(tc.text); got != tc.want {
			t.Errorf("%s Count(%q) = %d, want %d", tc.enc, tc.text, got, tc.want)
		}
		if got := e.Decode(e.Encode(tc.text)); got != tc.text {
			t.Errorf("%s round trip of %q gave %q", tc.enc, tc.text, got)
		}
	}
	if _, err := Get("gpt2-nope"); err == nil {
		t.Error("Get of an unknown encoding succeeded")
	}
}
