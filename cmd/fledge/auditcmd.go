package main

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/spf13/cobra"
)

func newAuditCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "audit",
		Short: "Read and verify the tamper-evident audit log",
	}
	c.AddCommand(newAuditShowCmd(g), newAuditVerifyCmd(g))
	return c
}

// AuditShowOptions is `fledge audit show`.
type AuditShowOptions struct {
	g        *Globals
	Plugin   string
	Decision string
	Event    string
	Session  string
	Since    time.Duration
	JSON     bool
}

func newAuditShowCmd(g *Globals) *cobra.Command {
	o := &AuditShowOptions{g: g}
	c := &cobra.Command{
		Use:   "show",
		Short: "Show audit records (a table, or JSON lines with --json)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return o.Run() },
	}
	f := c.Flags()
	f.StringVar(&o.Plugin, "plugin", "", "only records about this plugin")
	f.StringVar(&o.Decision, "decision", "", "only allow, deny or error")
	f.StringVar(&o.Event, "event", "", "only this event (e.g. exec_decision, cwd_refused)")
	f.StringVar(&o.Session, "session", "", "only this session id")
	f.DurationVar(&o.Since, "since", 0, "only records newer than this (e.g. 1h, 30m)")
	f.BoolVar(&o.JSON, "json", false, "print JSON lines, as stored")
	return c
}

func (o *AuditShowOptions) Run() error {
	switch o.Decision {
	case "", string(audit.Allow), string(audit.Deny), string(audit.Error):
	default:
		return exitErr(ExitUsage, "--decision must be allow, deny or error, not %q", o.Decision)
	}
	if o.Since < 0 {
		return exitErr(ExitUsage, "--since must be positive")
	}
	path, err := audit.DefaultPath()
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	f := audit.Filter{Plugin: o.Plugin, Event: o.Event, Session: o.Session, Decision: audit.Decision(o.Decision)}
	if o.Since > 0 {
		f.Since = time.Now().Add(-o.Since)
	}
	w := o.g.Streams.Out
	tw := audit.NewTableWriter(w)
	n := 0
	err = audit.Query(path, f, func(r *audit.Record) error {
		n++
		if o.JSON {
			line, err := audit.JSONLine(r)
			if err != nil {
				return err
			}
			_, err = w.Write(append(line, '\n'))
			return err
		}
		return tw.Write(r)
	})
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(o.g.Streams.Err, "no audit log yet at %s\n", path)
		return nil
	}
	if err != nil {
		return exitErr(ExitFailure, "audit show: %v", err)
	}
	if n == 0 && !o.JSON {
		fmt.Fprintln(o.g.Streams.Err, "no matching records")
	}
	return nil
}

func newAuditVerifyCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "verify",
		Short: "Verify the hash chain; non-zero exit on any edit, deletion, reorder or torn tail",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := audit.DefaultPath()
			if err != nil {
				return exitErr(ExitCannotRun, "%v", err)
			}
			rep, err := audit.Verify(path)
			if err != nil {
				return exitErr(ExitFailure, "audit verify: %v", err)
			}
			w := g.Streams.Out
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
				// Deleting records from the end keeps a valid chain: only a copy of this
				// anchor kept elsewhere can tell. Print it so it can be kept.
				fmt.Fprintf(w, "last: seq %d hash %s\n", rep.LastSeq, rep.LastHash)
				return nil
			}
			b := rep.Break
			fmt.Fprintf(w, "BROKEN: %s at %s line %d (seq %d): %s\n", b.Kind, b.File, b.Line, b.Seq, b.Detail)
			fmt.Fprintf(w, "%d records verified before the break; last good: seq %d hash %s\n", rep.Records, rep.LastSeq, rep.LastHash)
			return &ExitError{Code: ExitFailure}
		},
	}
}
