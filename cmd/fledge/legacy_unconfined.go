package main

import (
	"context"
	"errors"
	"os"
	"os/exec"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/reason"
)

// runUnconfined is the explicit escape hatch for legacy plugins (policy legacy = "unconfined").
func runUnconfined(ctx context.Context, g *Globals, program string, args []string, dir string,
	rec func(string, audit.Decision, reason.Code, map[string]any, bool)) error {
	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Dir = dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = g.Streams.In, g.Streams.Out, g.Streams.Err
	cmd.Env = os.Environ()
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
		if code < 0 {
			code = 128 + 9
		}
	default:
		rec(audit.EventPluginExit, audit.Error, reason.LaunchFailed, map[string]any{"error": err.Error()}, true)
		return exitErr(ExitCannotRun, "%v", err)
	}
	rec(audit.EventPluginExit, audit.Allow, reason.OK, map[string]any{"exit_code": code, "unconfined": true}, true)
	if code != 0 {
		return &ExitError{Code: code}
	}
	return nil
}
