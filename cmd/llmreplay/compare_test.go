package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestCompareFlagsAndBadInput(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.parquet")
	if err := os.WriteFile(junk, []byte("not a parquet file"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"compare"}, "give at least two runs"},
		{[]string{"compare", "a.parquet"}, "a.parquet: one run only"},
		{[]string{"compare", "a.parquet", "b.parquet", "--confidence", "1.5"}, "--confidence 1.5"},
		{[]string{"compare", "a.parquet", "b.parquet", "--resamples", "10"}, "--resamples 10"},
		{[]string{"compare", "a.parquet", "b.parquet", "--slo", "ttft=fast"}, "--slo"},
		{[]string{"compare", junk, junk}, junk},
		{[]string{"compare", junk, filepath.Join(dir, "missing.parquet")}, junk},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), c.args, &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one naming %q", c.args, err, c.want)
		}
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"compare", "--help"}, &out, &errb); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("--help: %v, want pflag.ErrHelp", err)
	}
	for _, want := range []string{"--confidence", "--resamples", "--allow-different", "llmreplay compare old.parquet new.parquet"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("compare --help lacks %q", want)
		}
	}
}
