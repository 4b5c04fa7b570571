package trace

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var updateInfo = flag.Bool("update-info", false, "rewrite testdata/info-*.golden from the current trace info")

// TestInfoGoldenPlain pins what `trace info` prints, text and JSON, for traces without
// agent columns: the bundled Azure sample and a synthetic multi-turn trace with sessions
// and prefix blocks. The agent figures must leave these outputs byte for byte as they were.
func TestInfoGoldenPlain(t *testing.T) {
	turns, _ := ParseDist("uniform:1,6")
	chat := baseSpec()
	chat.Count, chat.Turns, chat.Sessions, chat.BlockTokens = 400, &turns, 8, 16
	for _, c := range []struct {
		name string
		open func() (*Reader, error)
	}{
		{"sample", OpenSample},
		{"chat", func() (*Reader, error) { return NewReader(bytes.NewReader(synthBytes(t, chat)), "chat") }},
	} {
		r, err := c.open()
		if err != nil {
			t.Fatal(err)
		}
		info, err := ComputeInfo(context.Background(), r, r.Meta())
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := info.WriteText(&got, c.name); err != nil {
			t.Fatal(err)
		}
		enc := json.NewEncoder(&got)
		enc.SetIndent("", "  ")
		if err := enc.Encode(info); err != nil {
			t.Fatal(err)
		}
		golden := filepath.Join("testdata", "info-"+c.name+".golden")
		if *updateInfo {
			if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (run go test -run TestInfoGoldenPlain -update-info to write it)", err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("trace info of %s changed:\n%s\nwant:\n%s", c.name, got.Bytes(), want)
		}
	}
}
