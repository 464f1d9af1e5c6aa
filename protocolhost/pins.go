// SPDX-License-Identifier: MIT

package protocolhost

import (
	"errors"
	"fmt"
	"io"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/plugin/pins"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/ui"
)

// ReviewTools writes what changed in a plugin's tool definitions since they were pinned
// (what `plugins approve` would accept), sanitised for a terminal. It reports how many.
func (h *Host) ReviewTools(name string, w io.Writer) (int, error) {
	en, err := h.installed(name)
	if err != nil {
		return 0, err
	}
	changes, err := pins.Review(h.Env.ConfigDir, en.Name)
	if err != nil {
		return 0, exitErr(ExitCannotRun, "review %s: %v (approving makes fledge pin its tools afresh)", name, err)
	}
	if len(changes) == 0 {
		fmt.Fprintf(w, "%s: every tool definition is as approved\n", name)
		return 0, nil
	}
	for _, c := range changes {
		_ = ui.HostLine(w, pins.Diff(c))
	}
	fmt.Fprintf(w, "%d changed; 'fledge plugins approve %s' accepts them\n", len(changes), name)
	return len(changes), nil
}

// ApproveTools accepts a plugin's changed tool definitions, on record.
func (h *Host) ApproveTools(name string) ([]pins.Change, error) {
	en, err := h.installed(name)
	if err != nil {
		return nil, err
	}
	log, err := h.auditLog()
	if err != nil {
		return nil, err
	}
	rec := h.Env.NewRecorder(log, entryRef(en), nil)
	changes, err := pins.Approve(h.Env.ConfigDir, en.Name)
	if errors.Is(err, pins.ErrNothingPending) {
		return nil, exitErr(ExitFailure, "approve %s: nothing changed since its tools were approved", name)
	}
	if err != nil {
		_ = rec.RecordNow(audit.EventToolsApproved, audit.Deny, reason.LaunchFailed, map[string]any{"error": err.Error()})
		return nil, exitErr(ExitCannotRun, "approve %s: %v", name, err)
	}
	var approved []map[string]string
	for _, c := range changes {
		approved = append(approved, map[string]string{"tool": c.Tool, "old_hash": c.Old, "new_hash": c.New})
	}
	if err := rec.RecordNow(audit.EventToolsApproved, audit.Allow, reason.OK, map[string]any{"tools": approved}); err != nil {
		_ = ui.HostLine(h.stderr(), fmt.Sprintf("fledge: warning: the audit log could not record this approval: %v", err))
	}
	return changes, nil
}

// installed is the registry entry of an installed plugin, or the CLI's error for none.
func (h *Host) installed(name string) (*plugin.Entry, error) {
	reg, err := h.registry()
	if err != nil {
		return nil, err
	}
	en := reg.Find(name)
	if en == nil {
		return nil, exitErr(ExitFailure, "no plugin named %q is installed", name)
	}
	return en, nil
}
