package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/fledgehq/fledge/audit"
)

// follow is `audit show --follow`: the records so far, then each new one as it is written,
// until the command's context ends or SIGINT/SIGTERM.
func (o *AuditShowOptions) follow(path string, f audit.Filter, rw audit.RecordWriter) error {
	ctx := o.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
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
