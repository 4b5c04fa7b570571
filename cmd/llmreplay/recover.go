package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/llmreplay/llmreplay/replay"
)

func init() {
	register(&command{
		name:    "recover",
		summary: "turn the journal of a killed replay into a results file",
		run:     runRecover,
	})
}

const recoverExamples = `  # A replay writing results.parquet was killed: keep every record it journaled
  llmreplay recover results.parquet.journal -o results.parquet`

func runRecover(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("recover", "llmreplay recover JOURNAL [-o results.parquet]", recoverExamples, stdout)
	out := fs.StringP("output", "o", "", "results file to write (default: JOURNAL without its .journal suffix)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("recover: want exactly one journal file, got %d arguments", fs.NArg())
	}
	journal := fs.Arg(0)
	if *out == "" {
		if !strings.HasSuffix(journal, replay.JournalSuffix) {
			return usagef("recover: %s does not end in %s: give -o", journal, replay.JournalSuffix)
		}
		*out = strings.TrimSuffix(journal, replay.JournalSuffix)
	}
	info, err := replay.ConvertJournal(journal, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "recovered %d records of run %s into %s\n", info.Rows, info.Run.RunID, *out)
	if info.Tail != nil {
		fmt.Fprintf(stderr, "llmreplay: recover: the last batch was cut and is lost (at most the last second of records): %v\n", info.Tail)
	}
	return nil
}
