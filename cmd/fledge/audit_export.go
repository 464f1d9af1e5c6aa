// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocolhost"
)

// AuditExportOptions is `fledge audit export`.
type AuditExportOptions struct {
	g       *Globals
	Since   string
	Plugin  string
	Session string
	Event   string
	// ctx ends the send (Ctrl-C); now is the clock for --since.
	ctx context.Context
	now func() time.Time
}

func newAuditExportCmd(g *Globals) *cobra.Command {
	o := &AuditExportOptions{g: g}
	c := &cobra.Command{
		Use:   "export",
		Short: "Send a range of the audit log to the configured OpenTelemetry collector now",
		Long: `Send the records from --since on (every record without it), filtered by --plugin,
--session and --event, to the collector [audit] export = "otlp" names, in order, in batches,
and report how many it acknowledged. This is a resend by hand: records already sent are sent
again, and the background export's cursor does not move (it still sends what it has not).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ctx = cmd.Context()
			return o.Run()
		},
	}
	f := c.Flags()
	f.StringVar(&o.Since, "since", "", "records from then on: a duration back from now (1h, 30m), an RFC 3339 time or a date (2026-01-02)")
	f.StringVar(&o.Plugin, "plugin", "", "only records about this plugin")
	f.StringVar(&o.Session, "session", "", "only this session id")
	f.StringVar(&o.Event, "event", "", "only this event")
	return c
}

func (o *AuditExportOptions) Run() error {
	now := time.Now
	if o.now != nil {
		now = o.now
	}
	since, err := audit.ParseSince(o.Since, now())
	if err != nil {
		return exitErr(ExitUsage, "%v", err)
	}
	h, err := o.g.openHost()
	if err != nil {
		return err
	}
	defer h.Close()
	ctx := o.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := protocolhost.NotifyContext(ctx)
	defer stop()
	f := audit.Filter{Plugin: o.Plugin, Session: o.Session, Event: o.Event, Since: since}
	n, url, err := h.ExportAudit(ctx, f)
	switch {
	case errors.Is(err, protocolhost.ErrExportOff):
		return exitErr(ExitUsage, "%v", err)
	case errors.Is(err, audit.ErrNoLog):
		fmt.Fprintln(o.g.Streams.Err, "no audit log yet")
		return nil
	case err != nil:
		return exitErr(ExitFailure, "audit export: %d records acknowledged, then: %v", n, err)
	}
	fmt.Fprintf(o.g.Streams.Out, "%d records sent to %s\n", n, url)
	return nil
}
