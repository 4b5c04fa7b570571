package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEEngines keeps README.md's table of the engines llmreplay is tested against
// true: every test a row names is a test function of this module, and the Ollama version
// it names is the one scripts/ollama builds.
func TestREADMEEngines(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "## Engines it is tested against")
	if !ok {
		t.Fatal(`README.md has no "## Engines it is tested against" section`)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	tests := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
				tests[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| engine") {
			continue
		}
		rows++
		cells := strings.Split(strings.Trim(line, "|"), "|")
		named := regexp.MustCompile("`(Test\\w+)`").FindAllStringSubmatch(cells[len(cells)-1], -1)
		if len(named) == 0 {
			t.Errorf("README engines row %q names no test", strings.TrimSpace(cells[0]))
		}
		for _, m := range named {
			if !tests[m[1]] {
				t.Errorf("README engines row %q names %s, which is no test of this module", strings.TrimSpace(cells[0]), m[1])
			}
		}
	}
	if rows == 0 {
		t.Fatal("README's engines table has no rows")
	}
	script, err := os.ReadFile("../../scripts/ollama")
	if err != nil {
		t.Fatal(err)
	}
	v := regexp.MustCompile(`(?m)^version=(v[0-9.]+)$`).FindSubmatch(script)
	if v == nil {
		t.Fatal("scripts/ollama: no version= line")
	}
	if !strings.Contains(table, "| Ollama "+string(v[1])+" ") {
		t.Errorf("README's engines table does not name Ollama %s, the version scripts/ollama builds", v[1])
	}
}
