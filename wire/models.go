package wire

import (
	"slices"
	"strings"
)

// DefaultTag is the tag Ollama gives a model name that has none: it lists "tiny:latest"
// in GET /v1/models and serves requests for "tiny" as that model.
const DefaultTag = "latest"

// ServedModel returns the entry of served (the ids of GET /models) that the model name
// names, as servers alias names: the name itself; else, for a name without a tag, the
// name with ":latest" (Ollama lists "tiny:latest" and accepts "tiny"); else, for a name
// "X:latest", X. Only ":latest" is an alias: "tiny" does not name "tiny:q4". ok is false
// when served holds no such entry.
//
// Every check of a name against the served list goes through here, and a request is
// sent with the entry returned, the name the server lists: a server that lists "X" need
// not accept "X:latest", and the listed name is one it accepts.
func ServedModel(served []string, name string) (entry string, ok bool) {
	if slices.Contains(served, name) {
		return name, true
	}
	var alias string
	if base, tagged := strings.CutSuffix(name, ":"+DefaultTag); tagged {
		alias = base
	} else if !hasTag(name) {
		alias = name + ":" + DefaultTag
	}
	if alias != "" && slices.Contains(served, alias) {
		return alias, true
	}
	return "", false
}

// hasTag reports whether a model name has a tag: a colon in its last path element
// ("host:5000/tiny" has none, "tiny:q4" has one).
func hasTag(name string) bool {
	return strings.LastIndexByte(name, ':') > strings.LastIndexByte(name, '/')
}
