package prom

import (
	"net/http"
	"strings"
	"testing"
)

const text = `# HELP vllm:num_requests_running Requests in the running batch.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m"} 1200
# TYPE lat histogram
lat_bucket{le="0.1"} 1
lat_bucket{le="+Inf"} 2
lat_sum 0.3
lat_count 2
# TYPE q summary
q{quantile="0.5"} 7
q_sum 10
q_count 2
`

const openMetrics = `# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{model_name="m"} 1200
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3
# EOF
`

func TestParseText(t *testing.T) {
	got, err := Parse(strings.NewReader(text), http.Header{"Content-Type": {"text/plain; version=0.0.4"}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.Name+"/"+s.Type)
	}
	want := "lat_bucket/histogram lat_bucket/histogram lat_count/histogram lat_sum/histogram q/summary q_count/summary q_sum/summary vllm:num_requests_running/gauge vllm:prompt_tokens_total/counter"
	if g := strings.Join(names, " "); g != want {
		t.Fatalf("samples:\n got %s\nwant %s", g, want)
	}
	if le, _ := got[0].Label("le"); le != "+Inf" || got[0].Value != 2 {
		t.Errorf("first bucket (sorted by le as text): le=%q value %v", le, got[0].Value)
	}
	if m, ok := got[8].Label("model_name"); !ok || m != "m" || got[8].Value != 1200 {
		t.Errorf("counter: %+v", got[8])
	}
}

func TestParseOpenMetricsKeepsTotal(t *testing.T) {
	got, err := Parse(strings.NewReader(openMetrics), http.Header{"Content-Type": {"application/openmetrics-text; version=1.0.0; charset=utf-8"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1].Name != "vllm:prompt_tokens_total" || got[1].Type != "counter" || got[1].Value != 1200 {
		t.Fatalf("got %+v", got)
	}
}

func TestParseNoContentTypeIsText(t *testing.T) {
	got, err := Parse(strings.NewReader(text), http.Header{})
	if err != nil || len(got) != 9 {
		t.Fatalf("got %d samples, err %v", len(got), err)
	}
}

func TestParseErrorNamesFormat(t *testing.T) {
	_, err := Parse(strings.NewReader("not a metric line {\n"), http.Header{})
	if err == nil || !strings.Contains(err.Error(), "Prometheus text exposition") {
		t.Fatalf("err = %v", err)
	}
}
