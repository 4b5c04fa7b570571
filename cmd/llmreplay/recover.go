package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/llmreplay/llmreplay/record"
	"github.com/llmreplay/llmreplay/replay/results"
)

func init() {
	register(&command{
		name:    "recover",
		summary: "turn the journal of a killed replay into a results file",
		run:     runRecover,
	})
}

const recoverExamples = `  # A replay writing results.parquet was killed: keep every record it journaled (and every
  # scrape of results.metrics.parquet.journal beside it, into results.metrics.parquet)
  llmreplay recover results.parquet.journal -o results.parquet

  # A recording was killed: its rotation's trace and results (the results journal beside)
  llmreplay recover rec/trace-0001.parquet.journal

  # A metrics journal alone
  llmreplay recover results.metrics.parquet.journal -o results.metrics.parquet`

func runRecover(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("recover", "llmreplay recover JOURNAL [-o results.parquet]", recoverExamples, stdout)
	out := fs.StringP("output", "o", "", "file to write (default: JOURNAL without its .journal suffix); for a results journal, a metrics journal beside it becomes OUTPUT's metrics file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("recover: want exactly one journal file, got %d arguments", fs.NArg())
	}
	journal := fs.Arg(0)
	if base := filepath.Base(journal); strings.HasPrefix(base, "trace-") && strings.HasSuffix(base, ".parquet"+record.JournalSuffix) {
		files, err := record.RecoverRotation(journal)
		for _, f := range files {
			fmt.Fprintf(stdout, "recovered %s\n", f)
		}
		return err
	}
	if *out == "" {
		if !strings.HasSuffix(journal, results.JournalSuffix) {
			return usagef("recover: %s does not end in %s: give -o", journal, results.JournalSuffix)
		}
		*out = strings.TrimSuffix(journal, results.JournalSuffix)
	}
	format, err := results.JournalFormat(journal)
	if err != nil {
		return err
	}
	if format == results.MetricsFormat {
		return recoverMetrics(journal, *out, stdout, stderr)
	}
	info, err := results.ConvertJournal(journal, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "recovered %d records of run %s into %s\n", info.Rows, info.Run.RunID, *out)
	if info.Tail != nil {
		fmt.Fprintf(stderr, "llmreplay: recover: the last batch was cut and is lost (at most the last second of records): %v\n", info.Tail)
	}
	// The run's metrics journal, when it scraped: beside the results journal, named after
	// the results file it was for (results.MetricsPath + .journal).
	mj := results.MetricsPath(strings.TrimSuffix(journal, results.JournalSuffix)) + results.JournalSuffix
	if _, err := os.Stat(mj); err == nil {
		return recoverMetrics(mj, results.MetricsPath(*out), stdout, stderr)
	}
	return nil
}

// recoverMetrics converts a metrics journal.
func recoverMetrics(journal, out string, stdout, stderr io.Writer) error {
	info, err := results.ConvertMetricsJournal(journal, out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "recovered %d metric samples of run %s into %s\n", info.Rows, info.Run.RunID, out)
	if info.Tail != nil {
		fmt.Fprintf(stderr, "llmreplay: recover: the last batch of samples was cut and is lost: %v\n", info.Tail)
	}
	return nil
}
