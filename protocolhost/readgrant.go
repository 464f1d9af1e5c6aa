// SPDX-License-Identifier: MIT

package protocolhost

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/core"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
)

// changeReadGrant is `plugins grant NAME read=PATH` (and revoke): one path, read-only,
// for the plugin process and its commands; recorded like every grant.
func (h *Host) changeReadGrant(name, path string, revoke bool) (*GrantChange, error) {
	e := h.Env
	log, err := h.auditLog()
	if err != nil {
		return nil, err
	}
	verb, event := "grant", audit.EventGrant
	if revoke {
		verb, event = "revoke", audit.EventRevoke
	}
	if p, err := filepath.Abs(path); err == nil {
		path = filepath.Clean(p)
	}
	dir := plugin.Dir(e.ConfigDir, name)
	paths := e.Paths(dir, filepath.Join(dir, "data"), nil)
	entry, changed, err := plugin.ChangeReadGrant(e.ConfigDir, name, path, revoke, func(p string) error {
		if revoke {
			return policy.CheckReadGrant(p, paths)
		}
		if err := e.Config.Managed.CheckGrants(name, policy.Grants{}, []string{p}); err != nil {
			return err
		}
		return vetReadGrant(p, paths)
	})
	item := policy.ReadGrantPrefix + path
	if err != nil {
		code := ExitFailure
		switch {
		case errors.Is(err, plugin.ErrNotInstalled):
			return nil, exitErr(ExitFailure, "no plugin named %q is installed", name)
		case errors.Is(err, policy.ErrReadGrant):
			code = ExitUsage
		case errors.Is(err, plugin.ErrManifestChanged), errors.Is(err, policy.ErrManaged):
			code = ExitCannotRun
		}
		_ = e.NewRecorder(log, refusedRefByName(e.ConfigDir, name), nil).RecordNow(event, audit.Deny, reason.CapabilityNotAllowed,
			map[string]any{audit.DetailCapability: item, "error": err.Error()})
		return nil, exitErr(code, "%s %s %s: %v", verb, name, item, err)
	}
	details := map[string]any{audit.DetailCapability: item, audit.DetailCapabilities: entry.Granted.Names(), "read": entry.Read, "changed": changed}
	if err := e.NewRecorder(log, entryRef(entry), nil).RecordNow(event, audit.Allow, reason.OK, details); err != nil {
		_ = ui.HostLine(h.stderr(), fmt.Sprintf("fledge: warning: the audit log could not record this %s: %v", verb, err))
	}
	if _, err := os.Stat(path); err != nil && !revoke {
		_ = ui.HostLine(h.stderr(), fmt.Sprintf("fledge: warning: %s does not exist (yet); the grant takes effect once it does", path))
	}
	after := entry.Granted.String()
	if len(entry.Read) > 0 {
		after += "; read-only: " + strings.Join(entry.Read, ", ")
	}
	return &GrantChange{Plugin: entry.Name, Item: item, Changed: changed, After: after, Unrequested: []string{}}, nil
}

// vetReadGrant is the check of a read grant on disk, for a grant and for learn's
// proposals alike: policy.CheckReadGrant on the path and on where its symlinks lead (the
// sandbox opens the path and so follows them: a link into a key store is refused like
// the store), and no device node (policy.CheckDevicePath with what the path is now).
func vetReadGrant(p string, paths policy.Paths) error {
	if err := policy.CheckReadGrant(p, paths); err != nil {
		return err
	}
	r := core.Resolved(p)
	through := func(err error) error {
		if r != p {
			return fmt.Errorf("%w (through the symlink %q)", err, p)
		}
		return err
	}
	if r != p {
		if err := policy.CheckReadGrant(r, paths); err != nil {
			return through(err)
		}
	}
	if fi, err := os.Stat(p); err == nil {
		if err := policy.CheckDevicePath(r, fi.Mode()); err != nil {
			return through(err)
		}
	}
	return nil
}
