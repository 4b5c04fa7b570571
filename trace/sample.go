package trace

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"time"
)

// SampleName names the bundled sample trace: a busy window of the Azure LLM inference
// code trace (2023-11-16, Patel et al., "Splitwise", ISCA 2024; CC-BY 4.0), made by
//
//	llmreplay trace import --from azure AzureLLMInferenceTrace_code.csv -o azure-code.parquet
//	llmreplay trace slice azure-code.parquet --start 1530s --duration 200s --max-idle 2s -o azure-code-busy.parquet
//
// 523 requests over 61.4 s once idle gaps are cut to 2 s (8.5 req/s on average, bursty).
// At SampleSpeedup it replays in about 30 s. (At 2x its mean prompt load, about 36k
// prompt tokens/s, stays well within the in-process tiny engine's prefill rate, so the
// first run shows an endpoint that keeps up; a larger speedup shows one that does not.)
// TestSampleReproducible rebuilds it from the Azure CSV in testdata/traces and checks every byte.
const SampleName = "azure-code-busy.parquet"

// SampleSpeedup is the speedup at which the sample replays in about 30 s (61.4 s / 2).
const SampleSpeedup = 2

// SampleSlice is the slice that cuts the sample from the whole imported trace.
var SampleSlice = SliceSpec{Start: 1530 * time.Second, Duration: 200 * time.Second, MaxIdle: 2 * time.Second}

//go:embed testdata/azure-code-busy.parquet
var sample []byte

// SampleSHA256 returns the hex sha256 of the bundled sample's Parquet bytes, for run metadata.
func SampleSHA256() string {
	h := sha256.Sum256(sample)
	return hex.EncodeToString(h[:])
}

// OpenSample opens the bundled sample trace (embedded in the binary).
func OpenSample() (*Reader, error) {
	return NewReader(bytes.NewReader(sample), SampleName)
}
