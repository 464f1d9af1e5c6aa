// SPDX-License-Identifier: MIT

package main

import (
	"context"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocolhost"
)

// follow is `audit show --follow`: the records so far, then each new one as it is written,
// until the command's context ends or the run is ended (protocolhost.NotifyContext:
// SIGINT, SIGTERM, SIGHUP, its reader gone).
func (o *AuditShowOptions) follow(path string, f audit.Filter, rw audit.RecordWriter) error {
	ctx := o.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := protocolhost.NotifyContext(ctx)
	defer stop()
	// The table header shows at once, so a terminal waiting for the first record is not blank.
	if tw, ok := rw.(*audit.TableWriter); ok {
		if err := tw.Header(); err != nil {
			return err
		}
	}
	// Each record is one unbuffered write: a pipe (`| grep`, a collector) gets it as it lands.
	err := audit.Follow(ctx, path, f, audit.FollowOptions{}, rw.Write)
	if err != nil {
		return exitErr(ExitFailure, "audit show --follow: %v", err)
	}
	return nil
}
