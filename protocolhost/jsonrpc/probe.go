// SPDX-License-Identifier: MIT

package jsonrpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/reason"
)

// ProbeOptions run the handshake of a plugin that is not installed yet.
type ProbeOptions struct {
	Env *core.Env
	// Dir holds the plugin; Binary is its executable, relative to Dir.
	Dir    string
	Binary string
	// Ref names the plugin in the audit records.
	Ref    *audit.PluginRef
	Stderr io.Writer
	Warn   func(string)
}

// Probe starts the plugin confined with nothing granted (no project, no network, a
// throwaway HOME), runs the initialize handshake once, validates the manifest, and shuts it
// down. Install uses it to learn (and show) what the plugin is before anything is granted.
func Probe(ctx context.Context, o ProbeOptions) (*Manifest, error) {
	warn := o.Warn
	if warn == nil {
		warn = func(string) {}
	}
	stderr := o.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	log, err := o.Env.Audit()
	if err != nil {
		return nil, fmt.Errorf("%w: %w: %v", core.ErrLaunch, core.ErrAudit, err)
	}
	program, err := core.BinaryPath(o.Dir, o.Binary, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", core.ErrLaunch, err)
	}
	home, err := os.MkdirTemp("", "fledge-probe-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	if err := prepareHome(home); err != nil {
		return nil, err
	}
	none := policy.Grants{Filesystem: policy.FilesystemNone}
	paths := o.Env.Paths(o.Dir, home, nil)
	prof := o.Env.Config.Build(policy.ProfileInput{
		Paths: paths, Grants: none, Environ: os.Environ(),
		PluginEnv: PluginEnv(o.Ref.Name, home),
	})
	rec := o.Env.NewRecorder(log, o.Ref, warn)
	proc, c, err := spawn(o.Env, rec, prof, o.Ref.Name, program, home, stderr, warn)
	if err != nil {
		return nil, err
	}
	m, err := handshake(ctx, c, HandshakeTimeout)
	if err != nil {
		rec.Record(audit.EventPluginStart, audit.Deny, reason.HandshakeFailed, map[string]any{"error": err.Error(), "probe": true}, true)
	}
	s := &session{proc: proc, conn: c, rec: rec}
	if err != nil {
		proc.Stop(string(reason.HandshakeFailed), false, nil)
		proc.Stop(string(reason.HandshakeFailed), false, nil)
		c.recordMalformed()
		proc.Finish(map[string]any{"protocol": "jsonrpc-2.0", "probe": true})
		if hint := o.Env.InterpreterHint(paths, program, prof.Plugin.Access); hint != "" && errors.Is(err, ErrGone) {
			err = fmt.Errorf("%w: %s", err, hint)
		}
		return nil, err
	}
	s.stop()
	return m, nil
}
