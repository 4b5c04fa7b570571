// Package duckdbtest runs SQL in DuckDB for the Parquet interop tests: an independent
// engine reading the files llmreplay writes. It runs node on testdata/duckdb/query.mjs
// from the module root (npm ci --prefix testdata/duckdb installs it; scripts/test does).
package duckdbtest

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Query runs one SQL statement and returns its rows. Without node or the npm package the
// test is skipped, or fails under CI.
func Query(t *testing.T, sql string) []map[string]any {
	t.Helper()
	rows := Rows(t, sql)
	if rows == nil {
		t.SkipNow()
	}
	return rows
}

// Rows is Query for a test that goes on without DuckDB: it returns nil (and logs the
// reason) when DuckDB is not installed, under CI it fails the test instead; a query's
// result, even of no rows, is never nil.
func Rows(t *testing.T, sql string) []map[string]any {
	t.Helper()
	root, err := moduleRoot()
	var node string
	if err == nil {
		node, err = exec.LookPath("node")
	}
	if err == nil {
		_, err = os.Stat(filepath.Join(root, "testdata", "duckdb", "node_modules", "@duckdb", "node-api"))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("DuckDB interop needs node and testdata/duckdb/node_modules: %v", err)
		}
		t.Logf("DuckDB not available, its checks skipped: %v", err)
		return nil
	}
	cmd := exec.Command(node, "testdata/duckdb/query.mjs", sql)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("duckdb %q: %v %s", sql, err, msg)
	}
	rows := []map[string]any{}
	if err := json.Unmarshal(out, &rows); err != nil {
		t.Fatalf("duckdb output %q: %v", out, err)
	}
	return rows
}

// moduleRoot is the nearest folder above the test's working folder that holds go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's folder")
		}
		dir = parent
	}
}
