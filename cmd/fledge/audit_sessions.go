// SPDX-License-Identifier: MIT

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/spf13/cobra"
)

// AuditSessionsOptions is `fledge audit sessions`.
type AuditSessionsOptions struct {
	g      *Globals
	Plugin string
	Since  string
	JSON   bool
	now    func() time.Time
}

func newAuditSessionsCmd(g *Globals) *cobra.Command {
	o := &AuditSessionsOptions{g: g}
	c := &cobra.Command{
		Use:   "sessions",
		Short: "One line per plugin session: plugin, start, end, counts of allow / deny / error",
		Long: `List the sessions in the audit log, oldest first: the plugin, its first and last record,
and how many records were allow, deny and error. An end marked … has no plugin_exit record
(still running, or its fledge process died). Show one with: fledge audit show --session ID.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return o.Run() },
	}
	f := c.Flags()
	f.StringVar(&o.Plugin, "plugin", "", "only sessions of this plugin")
	f.StringVar(&o.Since, "since", "", "only records from then on: a duration back from now (1h), an RFC 3339 time or a date")
	f.BoolVar(&o.JSON, "json", false, "one JSON object per session")
	return c
}

func (o *AuditSessionsOptions) Run() error {
	now := time.Now
	if o.now != nil {
		now = o.now
	}
	since, err := audit.ParseSince(o.Since, now())
	if err != nil {
		return exitErr(ExitUsage, "%v", err)
	}
	path, err := audit.DefaultPath()
	if err != nil {
		return exitErr(ExitCannotRun, "%v", err)
	}
	rep, err := audit.Sessions(path, audit.Filter{Plugin: o.Plugin, Since: since})
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(o.g.Streams.Err, "no audit log yet at %s\n", path)
		return nil
	}
	if err != nil {
		return exitErr(ExitFailure, "audit sessions: %v", err)
	}
	if o.JSON {
		err = audit.WriteSessionsJSON(o.g.Streams.Out, rep.Sessions)
	} else if len(rep.Sessions) == 0 {
		fmt.Fprintln(o.g.Streams.Err, "no sessions")
	} else {
		err = audit.WriteSessionsTable(o.g.Streams.Out, rep.Sessions)
	}
	if err != nil {
		return err
	}
	if rep.Dropped > 0 {
		fmt.Fprintf(o.g.Streams.Err, "%d more sessions not shown (more than %d): narrow with --since or --plugin\n", rep.Dropped, audit.MaxSessions)
	}
	return nil
}
