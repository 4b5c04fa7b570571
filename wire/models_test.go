package wire

import "testing"

// TestServedModel: a name is served when the list holds it, or holds it with or without
// the default tag ":latest", and only then; the entry returned is the listed one.
func TestServedModel(t *testing.T) {
	ollama := []string{"tiny:latest", "llama3:8b", "ns/qwen:latest"}
	vllm := []string{"Qwen/Qwen3-8B", "tiny", "my-lora"}
	cases := []struct {
		served []string
		name   string
		entry  string
		ok     bool
	}{
		{ollama, "tiny:latest", "tiny:latest", true},
		{ollama, "tiny", "tiny:latest", true},
		{ollama, "llama3:8b", "llama3:8b", true},
		{ollama, "llama3", "", false}, // no llama3:latest listed
		{ollama, "tiny:q4", "", false},
		{ollama, "ns/qwen", "ns/qwen:latest", true},
		{ollama, "Tiny", "", false},
		{vllm, "tiny:latest", "tiny", true},
		{vllm, "Qwen/Qwen3-8B", "Qwen/Qwen3-8B", true},
		{vllm, "Qwen/Qwen3-8B:latest", "Qwen/Qwen3-8B", true},
		{vllm, "my-lora:v2", "", false},
		{[]string{"host:5000/tiny:latest"}, "host:5000/tiny", "host:5000/tiny:latest", true},
		{[]string{"host:5000/tiny:latest"}, "host:5000", "", false},
		{[]string{""}, ":latest", "", false},
		{nil, "tiny", "", false},
	}
	for _, c := range cases {
		entry, ok := ServedModel(c.served, c.name)
		if entry != c.entry || ok != c.ok {
			t.Errorf("ServedModel(%q, %q) = %q, %v; want %q, %v", c.served, c.name, entry, ok, c.entry, c.ok)
		}
	}
}
