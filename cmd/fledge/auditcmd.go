// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
)

func newAuditCmd(g *Globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "audit",
		Short: "Read and verify the tamper-evident audit log",
	}
	c.AddCommand(newAuditShowCmd(g), newAuditVerifyCmd(g), newAuditSessionsCmd(g), newAuditReportCmd(g), newAuditUICmd(g), newAuditExportCmd(g))
	return c
}

// AuditShowOptions is `fledge audit show`.
type AuditShowOptions struct {
	g        *Globals
	Plugin   string
	Decision string
	Event    string
	Session  string
	Since    string
	JSON     bool
	Format   string
	// Follow keeps printing new records as they are written, until interrupted.
	Follow bool
	// ctx ends --follow (the command's context: Ctrl-C); now is the clock for --since.
	ctx context.Context
	now func() time.Time
}

func newAuditShowCmd(g *Globals) *cobra.Command {
	o := &AuditShowOptions{g: g}
	c := &cobra.Command{
		Use:   "show",
		Short: "Show audit records (a table, JSON lines as stored, or OCSF/ECS JSON lines)",
		Long: `Show audit records, oldest first, filtered by --plugin, --decision, --event, --session
and --since (every filter works with every format). --since takes a duration back from now
(1h, 30m), an RFC 3339 time (2026-01-02T15:04:05Z) or a date (2026-01-02, midnight UTC).
--follow then keeps printing new records as any fledge process writes them, until Ctrl-C.

--format text (default) is a sanitised table; json prints the lines exactly as stored (same
as --json); ocsf maps each record to an OCSF Process Activity event (class_uid 1007) and ecs
to an Elastic Common Schema document, one JSON object per line, so a log collector can ship
the output unchanged. The mappings are described in docs/audit.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ctx = cmd.Context()
			return o.Run()
		},
	}
	f := c.Flags()
	f.StringVar(&o.Plugin, "plugin", "", "only records about this plugin")
	f.StringVar(&o.Decision, "decision", "", "only allow, deny or error")
	f.StringVar(&o.Event, "event", "", "only this event (e.g. exec_decision, cwd_refused)")
	f.StringVar(&o.Session, "session", "", "only this session id")
	f.StringVar(&o.Since, "since", "", "only records from then on: a duration back from now (1h, 30m), an RFC 3339 time or a date (2026-01-02)")
	f.BoolVarP(&o.Follow, "follow", "f", false, "keep printing new records as they are written (Ctrl-C ends)")
	f.BoolVar(&o.JSON, "json", false, "print JSON lines, as stored (same as --format json)")
	f.StringVar(&o.Format, "format", "", "output format: text, json, ocsf or ecs (default text)")
	return c
}

// format resolves --format and --json; --json with another --format is a contradiction.
func (o *AuditShowOptions) format() (audit.Format, error) {
	if o.Format == "" {
		if o.JSON {
			return audit.FormatJSON, nil
		}
		return audit.FormatText, nil
	}
	f, err := audit.ParseFormat(o.Format)
	if err != nil {
		return "", exitErr(ExitUsage, "--format must be text, json, ocsf or ecs, not %q", o.Format)
	}
	if o.JSON && f != audit.FormatJSON {
		return "", exitErr(ExitUsage, "--json contradicts --format %s", f)
	}
	return f, nil
}

func (o *AuditShowOptions) Run() error {
	switch o.Decision {
	case "", string(audit.Allow), string(audit.Deny), string(audit.Error):
	default:
		return exitErr(ExitUsage, "--decision must be allow, deny or error, not %q", o.Decision)
	}
	now := time.Now
	if o.now != nil {
		now = o.now
	}
	since, err := audit.ParseSince(o.Since, now())
	if err != nil {
		return exitErr(ExitUsage, "%v", err)
	}
	format, err := o.format()
	if err != nil {
		return err
	}
	path, err := audit.DefaultPath()
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	f := audit.Filter{Plugin: o.Plugin, Event: o.Event, Session: o.Session, Decision: audit.Decision(o.Decision), Since: since}
	rw, err := audit.NewRecordWriter(o.g.Streams.Out, format, audit.ExportOptions{ProductVersion: version})
	if err != nil {
		return exitErr(ExitUsage, "%v", err)
	}
	if o.Follow {
		return o.follow(path, f, rw)
	}
	n := 0
	err = audit.Query(path, f, func(r *audit.Record) error {
		n++
		return rw.Write(r)
	})
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(o.g.Streams.Err, "no audit log yet at %s\n", path)
		return nil
	}
	if err != nil {
		return exitErr(ExitFailure, "audit show: %v", err)
	}
	// Machine formats stay empty on no match: a collector must not ingest a message.
	if n == 0 && format == audit.FormatText {
		fmt.Fprintln(o.g.Streams.Err, "no matching records")
		if hint := o.pluginHint(); hint != "" {
			fmt.Fprintln(o.g.Streams.Err, hint)
		}
	}
	return nil
}

// pluginHint: records name the plugin, not the command a user types (the published
// fledge-plugin-hello is plugin fledge-hello, run as `fledge hello`). When --plugin names a
// command and not a plugin, say which plugin to ask for.
func (o *AuditShowOptions) pluginHint() string {
	if o.Plugin == "" {
		return ""
	}
	dir, err := o.g.configDir()
	if err != nil {
		return ""
	}
	reg, err := plugin.LoadRegistry(dir)
	if err != nil || reg.Find(o.Plugin) != nil {
		return ""
	}
	e, err := reg.FindCommand(o.Plugin)
	if err != nil || e == nil {
		return ""
	}
	return fmt.Sprintf("%q is a command of plugin %q: records name the plugin (fledge audit show --plugin %s)", o.Plugin, e.Name, e.Name)
}
