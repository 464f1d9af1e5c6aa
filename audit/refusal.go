// SPDX-License-Identifier: MIT

package audit

import (
	"errors"
	"fmt"

	"github.com/fledgehq/fledge/reason"
)

// Why the host refused to run a plugin before starting it: the value of
// details.refusal in the deny record RecordRefusal writes (docs/audit.md).
const (
	// RefusalManifestChanged: plugin.toml differs from the manifest approved at install.
	RefusalManifestChanged = "manifest_changed"
	// RefusalContentChanged: a plugin pinned by content (a PyPI package) has files that
	// differ from the digest recorded at install.
	RefusalContentChanged = "content_changed"
	// RefusalBinaryUnusable: the command's binary is missing, not an executable regular
	// file, or resolves outside the plugin directory.
	RefusalBinaryUnusable = "binary_unusable"
	// RefusalSandboxUnavailable: strict policy, and the OS cannot enforce the sandbox.
	RefusalSandboxUnavailable = "strict_sandbox_unavailable"
	// RefusalOverCeiling: the plugin holds a grant over the machine's managed policy
	// (lowered since it was installed); Message names the grant and the rule.
	RefusalOverCeiling = "over_managed_ceiling"
	// RefusalOther: any other refusal before start; Message says what.
	RefusalOther = "other"
)

// refusalReasons is the reason code each refusal kind is recorded with.
var refusalReasons = map[string]reason.Code{
	RefusalManifestChanged:    reason.LaunchFailed,
	RefusalContentChanged:     reason.LaunchFailed,
	RefusalBinaryUnusable:     reason.LaunchFailed,
	RefusalSandboxUnavailable: reason.SandboxUnavailable,
	RefusalOverCeiling:        reason.CapabilityNotAllowed,
	RefusalOther:              reason.LaunchFailed,
}

// ErrInvalidRefusal is returned by RecordRefusal for a refusal it cannot record faithfully.
var ErrInvalidRefusal = errors.New("audit: invalid refusal")

// Refusal describes a run the host refused before starting the plugin.
type Refusal struct {
	Session string
	Plugin  *PluginRef   // required: which plugin was refused
	Sandbox *SandboxInfo // the confinement that would have applied, if known
	Command string       // the plugin command the user asked for (details.command)
	Kind    string       // one of the Refusal* constants
	// Reason overrides the reason code of Kind (e.g. reason.Cancelled); empty = Kind's.
	Reason reason.Code
	// Message is the user-facing error, as printed (details.message).
	Message string
	// ManagedPolicy is the managed policy's digest (Record.ManagedPolicy): the refusal is
	// its session's only record.
	ManagedPolicy string
	// Details are extra facts (e.g. the approved and current manifest digests); they cannot
	// override command, message or refusal.
	Details map[string]any
}

// RecordRefusal writes the deny record of a refused run: event plugin_start, decision
// deny, the Kind's reason code (launch_failed, or sandbox_unavailable for strict), and
// details {command, message, refusal, ...}. It is durable (fsynced): the log then says
// that the plugin was asked for and did not run, and why. A nil rec (the log could not be
// opened) is ErrNoLog, so the caller can say the refusal went unrecorded.
func RecordRefusal(rec Recorder, ref Refusal) error {
	if rec == nil {
		return fmt.Errorf("%w: refusal of %s not recorded", ErrNoLog, pluginName(ref.Plugin))
	}
	if ref.Plugin == nil || ref.Plugin.Name == "" {
		return fmt.Errorf("%w: no plugin", ErrInvalidRefusal)
	}
	code, ok := refusalReasons[ref.Kind]
	if !ok {
		return fmt.Errorf("%w: unknown kind %q", ErrInvalidRefusal, ref.Kind)
	}
	if ref.Reason != "" {
		if !ref.Reason.Valid() || ref.Reason == reason.OK {
			return fmt.Errorf("%w: reason %q", ErrInvalidRefusal, ref.Reason)
		}
		code = ref.Reason
	}
	d := make(map[string]any, len(ref.Details)+3)
	for k, v := range ref.Details {
		d[k] = v
	}
	d[DetailRefusal] = ref.Kind
	if ref.Command != "" {
		d[DetailCommand] = ref.Command
	}
	if ref.Message != "" {
		d[DetailMessage] = ref.Message
	}
	return rec.Append(&Record{
		Session:       ref.Session,
		Plugin:        ref.Plugin,
		Sandbox:       ref.Sandbox,
		ManagedPolicy: ref.ManagedPolicy,
		Event:         EventPluginStart,
		Decision:      Deny,
		Reason:        string(code),
		Details:       d,
	}, true)
}

func pluginName(p *PluginRef) string {
	if p == nil {
		return "a plugin"
	}
	return p.Name
}
