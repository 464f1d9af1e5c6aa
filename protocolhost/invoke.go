// SPDX-License-Identifier: MIT

package protocolhost

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/protocolhost/invokev1"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
)

// InvokeEvent is one message of an invoke-v1 request (info, plugin_response, end, error).
type InvokeEvent = invokev1.Event

// Types of InvokeEvent a caller prints.
const (
	InvokeResponse = invokev1.TypeResponse
	InvokeInfo     = invokev1.TypeInfo
)

// CheckInvoke checks --type and --action before anything starts (nil when they are fine).
func CheckInvoke(typ, action string) error {
	if f := invokev1.CheckRequest(typ, action); f != nil {
		return exitErr(ExitUsage, "%s: give --type and --action (see 'fledge invoke --help')", f.Msg)
	}
	return nil
}

// Invoke starts the invoke-v1 plugin name, sends it one request and hands each message to
// emit as it arrives. stdout and stderr receive the plugin's bytes shown to the user.
func (h *Host) Invoke(ctx context.Context, name, typ, action string, request json.RawMessage, emit func(InvokeEvent) error) error {
	reg, err := h.registry()
	if err != nil {
		return err
	}
	entry := reg.Find(name)
	if entry == nil {
		return exitErr(ExitUnknownCmd, "no plugin named %q is installed (see 'fledge plugins list')", name)
	}
	proj, err := h.project()
	if err != nil {
		return err
	}
	if _, err := h.auditLog(); err != nil {
		return err
	}
	b, err := h.Env.Bind(entry, proj)
	if err != nil {
		return exitErr(ExitCannotRun, "plugin %s: %v", entry.Name, err)
	}
	if b.Manifest.Plugin.Protocol != plugin.ProtocolInvoke {
		return exitErr(ExitUsage, "plugin %s speaks %s, not %s: 'fledge invoke' is for invoke-v1 plugins", entry.Name, ProtocolName(b.Manifest.Plugin.Protocol), plugin.ProtocolInvoke)
	}
	// On a terminal, plugin text is stripped of escape sequences (as everywhere).
	stderr, flush := pluginStream(h.stderr())
	defer flush()
	sess, f := invokev1.Start(ctx, invokev1.Options{Host: &tools.Host{Env: h.Env, Project: proj, Stderr: stderr}, Binding: b})
	if f != nil {
		return reasonExit(f.Code, f.Msg)
	}
	defer sess.Close()
	out := sess.Invoke(ctx, typ, action, request, emit)
	switch {
	case out.Failure != nil:
		return reasonExit(out.Failure.Code, out.Failure.Msg)
	case out.PluginError != "":
		return &ExitError{Code: reason.ToolFailed, Msg: fmt.Sprintf("plugin %s: %s", entry.Name, out.PluginError)}
	}
	return nil
}
