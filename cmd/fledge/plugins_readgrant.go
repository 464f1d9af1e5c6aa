package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
)

// runRead is `plugins grant NAME read=PATH` (and revoke): one path, read-only, for the
// plugin process and its commands; recorded like every grant.
func (o *GrantOptions) runRead(e *env, log *audit.Log, path string) error {
	verb, event := "grant", audit.EventGrant
	if o.Revoke {
		verb, event = "revoke", audit.EventRevoke
	}
	if p, err := filepath.Abs(path); err == nil {
		path = filepath.Clean(p)
	}
	dir := plugin.Dir(e.configDir, o.Name)
	paths := e.paths(dir, filepath.Join(dir, "data"), nil)
	entry, changed, err := plugin.ChangeReadGrant(e.configDir, o.Name, path, o.Revoke, func(p string) error {
		return policy.CheckReadGrant(p, paths)
	})
	item := policy.ReadGrantPrefix + path
	if err != nil {
		code := ExitFailure
		switch {
		case errors.Is(err, plugin.ErrNotInstalled):
			return exitErr(ExitFailure, "no plugin named %q is installed", o.Name)
		case errors.Is(err, policy.ErrReadGrant):
			code = ExitUsage
		case errors.Is(err, plugin.ErrManifestChanged):
			code = ExitCannotRun
		}
		_ = e.NewRecorder(log, refusedRefByName(e.configDir, o.Name), nil).RecordNow(event, audit.Deny, reason.CapabilityNotAllowed,
			map[string]any{audit.DetailCapability: item, "error": err.Error()})
		return exitErr(code, "%s %s %s: %v", verb, o.Name, item, err)
	}
	ref := &audit.PluginRef{Name: entry.Name, Version: entry.Version, Source: entry.Source, ManifestDigest: entry.ManifestSHA256}
	details := map[string]any{audit.DetailCapability: item, audit.DetailCapabilities: entry.Granted.Names(), "read": entry.Read, "changed": changed}
	if err := e.NewRecorder(log, ref, nil).RecordNow(event, audit.Allow, reason.OK, details); err != nil {
		_ = ui.HostLine(o.g.Streams.Err, fmt.Sprintf("fledge: warning: the audit log could not record this %s: %v", verb, err))
	}
	if _, err := os.Stat(path); err != nil && !o.Revoke {
		fmt.Fprintf(o.g.Streams.Err, "fledge: warning: %s does not exist (yet); the grant takes effect once it does\n", path)
	}
	switch {
	case !changed && o.Revoke:
		fmt.Fprintf(o.g.Streams.Out, "%s did not hold %s\n", entry.Name, item)
	case !changed:
		fmt.Fprintf(o.g.Streams.Out, "%s already held %s\n", entry.Name, item)
	case o.Revoke:
		fmt.Fprintf(o.g.Streams.Out, "revoked %s from %s\n", item, entry.Name)
	default:
		fmt.Fprintf(o.g.Streams.Out, "granted %s to %s (read-only)\n", item, entry.Name)
	}
	return nil
}
