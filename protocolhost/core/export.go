// SPDX-License-Identifier: MIT

package core

import (
	"errors"
	"fmt"
	"os"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/audit/otlp"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
)

// ErrExportSecret: an [audit] otlp_headers secret is not in the secrets store.
var ErrExportSecret = errors.New("audit export: a header's secret is not stored")

// ExportClient is the OTLP client [audit] export configures, nil when export is off.
// Header values are read from the secrets store here and go nowhere but the requests.
func (e *Env) ExportClient() (*otlp.Client, error) {
	if e.Config == nil || e.Config.Audit.Export != policy.ExportOTLP {
		return nil, nil
	}
	a := e.Config.Audit
	u, err := otlp.Endpoint(a.OTLPEndpoint, os.Getenv)
	if err != nil {
		return nil, err
	}
	headers := make(map[string]string, len(a.OTLPHeaders))
	for h, name := range a.OTLPHeaders {
		v, ok, err := plugin.LookupSecret(e.StateDir, name)
		if err != nil {
			return nil, fmt.Errorf("audit export: header %s: %w", h, err)
		}
		if !ok {
			return nil, fmt.Errorf("%w: header %s wants secret %s (fledge secrets set %s)", ErrExportSecret, h, name, name)
		}
		headers[h] = v
	}
	return otlp.NewClient(otlp.Config{URL: u, Protocol: a.OTLPProtocol, Headers: headers, ServiceVersion: FledgeVersion()})
}

// startExport starts the background sender of the open log l when [audit] export is on.
// It only reads the log, so no decision waits for it; Close gives it a bounded last round.
func (e *Env) startExport(l *audit.Log) error {
	c, err := e.ExportClient()
	if err != nil || c == nil {
		return err
	}
	e.export = otlp.NewExporter(e.AuditPath, c, otlp.Options{
		Append: func(r *audit.Record) error { return l.Append(r, true) },
		Warn:   func(msg string) { fmt.Fprintf(os.Stderr, "fledge: warning: %s\n", msg) },
	})
	e.export.Start()
	return nil
}
