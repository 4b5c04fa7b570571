package trace

import (
	"bytes"
	_ "embed"
	"time"
)

// SampleName names the bundled sample trace: a busy window of the Azure LLM inference
// code trace (2023-11-16, Patel et al., "Splitwise", ISCA 2024; CC-BY 4.0), made by
//
//	llmreplay trace import --from azure AzureLLMInferenceTrace_code.csv -o azure-code.parquet
//	llmreplay trace slice azure-code.parquet --start 1530s --duration 600s --max-idle 2s -o azure-code-busy.parquet
//
// 1,760 requests over 228.7 s once idle gaps are cut to 2 s (7.7 req/s on average,
// bursty: inter-arrival CV 2.07). At SampleSpeedup it replays in about 30 s.
// TestSampleReproducible rebuilds it from the shared CSV and checks every byte.
const SampleName = "azure-code-busy.parquet"

// SampleSpeedup is the speedup at which the sample replays in about 30 s (228.7 s / 8).
const SampleSpeedup = 8

// SampleSlice is the slice that cuts the sample from the whole imported trace.
var SampleSlice = SliceSpec{Start: 1530 * time.Second, Duration: 600 * time.Second, MaxIdle: 2 * time.Second}

//go:embed testdata/azure-code-busy.parquet
var sample []byte

// OpenSample opens the bundled sample trace (embedded in the binary).
func OpenSample() (*Reader, error) {
	return NewReader(bytes.NewReader(sample), SampleName)
}
