package prom

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
)

// page is an exposition the size of the simulated engine's: 40 families, a histogram.
func page(openMetrics bool) []byte {
	var b bytes.Buffer
	for i := range 40 {
		fmt.Fprintf(&b, "# HELP vllm:g%d A gauge.\n# TYPE vllm:g%d gauge\nvllm:g%d{model_name=\"m\"} %d\n", i, i, i, i)
	}
	b.WriteString("# TYPE lat histogram\n")
	for _, le := range []string{"0.001", "0.01", "0.1", "1", "+Inf"} {
		fmt.Fprintf(&b, "lat_bucket{le=%q} 3\n", le)
	}
	b.WriteString("lat_sum 0.3\nlat_count 3\n")
	if openMetrics {
		b.WriteString("# EOF\n")
	}
	return b.Bytes()
}

// BenchmarkParse compares the two formats expfmt decodes: its OpenMetrics parser is a
// reference (ABNF) parser, far slower than the text one, which is why Accept asks for text.
func BenchmarkParse(b *testing.B) {
	for _, c := range []struct {
		name string
		om   bool
		ct   string
	}{{"text", false, "text/plain; version=0.0.4"}, {"openmetrics", true, "application/openmetrics-text; version=1.0.0"}} {
		body := page(c.om)
		h := http.Header{"Content-Type": {c.ct}}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := Parse(bytes.NewReader(body), h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
