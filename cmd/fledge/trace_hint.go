package main

import (
	"fmt"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/ui"
)

// traceHint tells the user, after a traced run, how many refusals it left and how to see
// them.
func traceHint(g *Globals, session string) {
	if session == "" {
		return
	}
	path, err := audit.DefaultPath()
	if err != nil {
		return
	}
	n := 0
	_ = audit.Read(path, func(r *audit.Record) error {
		if r.Session == session && r.Event == audit.EventKernelDenied {
			n++
		}
		return nil
	})
	_ = ui.HostLine(g.Streams.Err, fmt.Sprintf("fledge: trace: %d kernel_denied record(s) in session %s (fledge audit show --session %s --event kernel_denied)", n, session, session))
}
