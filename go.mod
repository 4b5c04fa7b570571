module github.com/llmreplay/llmreplay

go 1.26.8

require (
	github.com/pkoukk/tiktoken-go v0.1.8
	github.com/pkoukk/tiktoken-go-loader v0.0.2
	github.com/spf13/pflag v1.1.0
)

require (
	github.com/dlclark/regexp2 v1.10.0 // indirect
	github.com/google/uuid v1.3.1 // indirect
	github.com/stretchr/testify v1.8.4 // indirect
)
