// SPDX-License-Identifier: MIT

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/spf13/cobra"
)

// AuditVerifyOptions is `fledge audit verify`.
type AuditVerifyOptions struct {
	g *Globals
	// Witness is a file of checkpoint lines a witness kept ("-": stdin), e.g. the output
	// of `journalctl -t fledge-audit -o cat`.
	Witness string
}

func newAuditVerifyCmd(g *Globals) *cobra.Command {
	o := &AuditVerifyOptions{g: g}
	c := &cobra.Command{
		Use:   "verify",
		Short: "Verify the hash chain; non-zero exit on any edit, deletion, reorder, truncation or torn tail",
		Long: `Verify the hash chain of the audit log, rotated files first, and check that the log
reaches its head (the file <log>.head, advanced by every durable append) and, with --witness,
the newest checkpoint a witness kept: records deleted from the end are reported as BROKEN
truncated with the missing seqs. Exit 0 when intact, 1 on any break.

--witness reads checkpoint lines from a file or stdin (-), e.g.
  journalctl -t fledge-audit -o cat | fledge audit verify --witness -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return o.Run() },
	}
	c.Flags().StringVar(&o.Witness, "witness", "", "file of witness checkpoint lines to check the log's end against (- for stdin)")
	return c
}

func (o *AuditVerifyOptions) Run() error {
	path, err := audit.DefaultPath()
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	var vo audit.VerifyOptions
	if o.Witness != "" {
		if vo.Witness, err = o.readWitness(path); err != nil {
			return err
		}
	}
	rep, err := audit.VerifyWith(path, vo)
	if err != nil {
		return exitErr(ExitFailure, "audit verify: %v", err)
	}
	w := o.g.Streams.Out
	// Crashes the writer recovered from do not break the chain, but an auditor should
	// know about them.
	for _, r := range rep.Recovered {
		fmt.Fprintf(w, "recovered: %s line %d: %s\n", r.File, r.Line, r.Detail)
	}
	if n := rep.RecoveredCount - len(rep.Recovered); n > 0 {
		fmt.Fprintf(w, "recovered: %d more\n", n)
	}
	if rep.OK {
		fmt.Fprintf(w, "ok: %d records in %d file(s), chain intact\n", rep.Records, len(rep.Files))
		if rep.PrunedThrough > 0 {
			// The start of the chain was deleted to keep the log within max_total_bytes;
			// the log_pruned record says so and holds the hash the kept part chains to.
			fmt.Fprintf(w, "pruned: seq 1..%d deleted by fledge ([audit] max_total_bytes), recorded by log_pruned seq %d\n", rep.PrunedThrough, rep.PrunedBy)
		}
		printAnchor(w, "head", rep.Head, "none yet (written at the first durable append)")
		if o.Witness != "" {
			printAnchor(w, "witness", rep.Witness, "no checkpoint of this log in "+o.Witness)
		}
		// The head lives beside the log, where its user may rewrite both: print the end so
		// it can be kept elsewhere too.
		fmt.Fprintf(w, "last: seq %d hash %s\n", rep.LastSeq, rep.LastHash)
		return nil
	}
	b := rep.Break
	where := fmt.Sprintf(" at %s line %d", b.File, b.Line)
	if b.File == "" {
		where = ""
	}
	fmt.Fprintf(w, "BROKEN: %s%s (seq %d): %s\n", b.Kind, where, b.Seq, b.Detail)
	fmt.Fprintf(w, "%d records verified before the break; last good: seq %d hash %s\n", rep.Records, rep.LastSeq, rep.LastHash)
	return &ExitError{Code: ExitFailure}
}

func printAnchor(w io.Writer, name string, h *audit.Head, none string) {
	if h == nil {
		fmt.Fprintf(w, "%s: %s\n", name, none)
		return
	}
	fmt.Fprintf(w, "%s: seq %d (%s), reached\n", name, h.Seq, h.Time.UTC().Format(time.RFC3339))
}

func (o *AuditVerifyOptions) readWitness(path string) (*audit.Head, error) {
	if o.Witness == "-" && o.g.Streams.In == nil {
		return nil, exitErr(ExitUsage, "audit verify: --witness -: no stdin")
	}
	var r io.Reader = o.g.Streams.In
	if o.Witness != "-" {
		f, err := os.Open(o.Witness)
		if err != nil {
			return nil, exitErr(ExitCannotRun, "audit verify: --witness: %v", err)
		}
		defer f.Close()
		r = f
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, exitErr(ExitCannotRun, "audit verify: %v", err)
	}
	h, err := audit.ParseCheckpoints(r, abs)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, exitErr(ExitCannotRun, "audit verify: --witness: %v", err)
	}
	return h, nil
}
