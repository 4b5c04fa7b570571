package trace

type Params struct {
	API          string
	MaxTokens, N int32
	Stream       bool
	HasStream    bool
}
