// SPDX-License-Identifier: MIT

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/audit/report"
	"github.com/fledgehq/fledge/protocolhost"
)

// AuditReportOptions is `fledge audit report` and, with Listen, `fledge audit ui`.
type AuditReportOptions struct {
	g       *Globals
	Output  string
	Plugin  string
	Session string
	Since   string
	Witness string
	// Listen is audit ui's address (loopback only).
	Listen string
	ctx    context.Context
	now    func() time.Time
	// ready, when set, is told audit ui's URL once it serves (tests).
	ready func(url string)
}

func auditReportFlags(c *cobra.Command, o *AuditReportOptions) {
	f := c.Flags()
	f.StringVar(&o.Plugin, "plugin", "", "only records about this plugin")
	f.StringVar(&o.Session, "session", "", "only this session id")
	f.StringVar(&o.Since, "since", "", "only records from then on: a duration back from now (1h, 30m), an RFC 3339 time or a date (2026-01-02)")
	f.StringVar(&o.Witness, "witness", "", "file of witness checkpoint lines the verdict checks the log's end against (as audit verify --witness)")
}

func newAuditReportCmd(g *Globals) *cobra.Command {
	o := &AuditReportOptions{g: g}
	c := &cobra.Command{
		Use:   "report --output FILE",
		Short: "Write the log as one self-contained HTML page: verdict, sessions, timelines, destinations",
		Long: `Write one HTML file a reviewer can open offline or attach to a ticket: the verify verdict,
the sessions (plugin, start, duration, allow / deny / error counts), each session's timeline
(execs with duration bars, tool calls, connections and DNS, kernel refusals; details on a
click) and, per plugin, the destinations it reached and was refused and the paths it was
refused. Nothing is loaded from anywhere: no remote script, style, font or image. Filter
with --plugin, --session and --since as for audit show. --output - writes to stdout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return o.Run() },
	}
	c.Flags().StringVarP(&o.Output, "output", "o", "", "the HTML file to write (- for stdout)")
	auditReportFlags(c, o)
	return c
}

func newAuditUICmd(g *Globals) *cobra.Command {
	o := &AuditReportOptions{g: g, Listen: "127.0.0.1:0"}
	c := &cobra.Command{
		Use:   "ui [--listen 127.0.0.1:PORT]",
		Short: "Serve the report page on loopback, updating live as records are written",
		Long: `Serve the page of audit report on a loopback address, updating live as any fledge process
writes records (as audit show --follow does). The URL printed holds a random token: a request
without it gets no page. It is read-only: any method but GET and HEAD is refused. Ctrl-C ends it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ctx = cmd.Context()
			return o.Serve()
		},
	}
	c.Flags().StringVar(&o.Listen, "listen", o.Listen, "loopback address to listen on (port 0: any free port)")
	auditReportFlags(c, o)
	return c
}

// options resolves the flags into the page's options.
func (o *AuditReportOptions) options() (report.Options, error) {
	now := time.Now
	if o.now != nil {
		now = o.now
	}
	since, err := audit.ParseSince(o.Since, now())
	if err != nil {
		return report.Options{}, exitErr(ExitUsage, "%v", err)
	}
	path, err := audit.DefaultPath()
	if err != nil {
		return report.Options{}, exitErr(ExitCannotRun, "%v", err)
	}
	ro := report.Options{Path: path, Filter: audit.Filter{Plugin: o.Plugin, Session: o.Session, Since: since},
		Version: version, Now: now()}
	if o.Witness != "" {
		vo := &AuditVerifyOptions{g: o.g, Witness: o.Witness}
		if ro.Witness, err = vo.readWitness(path); err != nil {
			return report.Options{}, err
		}
		ro.WitnessFrom = o.Witness
	}
	return ro, nil
}

func (o *AuditReportOptions) Run() error {
	if o.Output == "" {
		return exitErr(ExitUsage, "audit report: --output FILE is required (- for stdout)")
	}
	ro, err := o.options()
	if err != nil {
		return err
	}
	if _, err := os.Stat(ro.Path); errors.Is(err, fs.ErrNotExist) {
		if _, rerr := os.Stat(ro.Path + ".1"); errors.Is(rerr, fs.ErrNotExist) {
			return exitErr(ExitFailure, "audit report: no audit log yet at %s", ro.Path)
		}
	}
	if o.Output == "-" {
		if _, err := report.Write(o.g.Streams.Out, ro); err != nil {
			return exitErr(ExitFailure, "audit report: %v", err)
		}
		return nil
	}
	// Written beside the target and renamed: a failed report leaves no half page behind.
	// 0600: the page holds the log's records.
	tmp, err := os.CreateTemp(filepath.Dir(o.Output), "."+filepath.Base(o.Output)+".*")
	if err != nil {
		return exitErr(ExitCannotRun, "audit report: %v", err)
	}
	defer os.Remove(tmp.Name())
	st, err := report.Write(tmp, ro)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), o.Output)
	}
	if err != nil {
		return exitErr(ExitFailure, "audit report: %v", err)
	}
	fmt.Fprintf(o.g.Streams.Err, "wrote %s: %d records, %d sessions\n", o.Output, st.Records, st.Sessions)
	return nil
}

// Serve is `fledge audit ui`.
func (o *AuditReportOptions) Serve() error {
	if err := report.CheckListen(o.Listen); err != nil {
		return exitErr(ExitUsage, "audit ui: --listen: %v", err)
	}
	ro, err := o.options()
	if err != nil {
		return err
	}
	token, err := report.NewToken()
	if err != nil {
		return exitErr(ExitCannotRun, "audit ui: %v", err)
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return exitErr(ExitCannotRun, "audit ui: %v", err)
	}
	// localhost may resolve to anything: what was bound must be loopback too.
	if err := report.CheckListen(ln.Addr().String()); err != nil {
		ln.Close()
		return exitErr(ExitUsage, "audit ui: --listen: %v", err)
	}
	ctx := o.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := protocolhost.NotifyContext(ctx)
	defer stop()
	h := report.NewHandler(ro, token)
	h.ErrLog = o.g.Streams.Err
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	url := fmt.Sprintf("http://%s/%s/", ln.Addr().String(), token)
	fmt.Fprintf(o.g.Streams.Out, "fledge audit ui: %s\n(Ctrl-C to stop)\n", url)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	if o.ready != nil {
		o.ready(url)
	}
	select {
	case err := <-done:
		return exitErr(ExitFailure, "audit ui: %v", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	return nil
}
