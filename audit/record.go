// SPDX-License-Identifier: MIT

// Package audit is fledge's tamper-evident JSON audit log: a hash-chained JSONL file that
// records every decision the host makes about a plugin.
package audit

import "time"

// SchemaVersion of the record format.
const SchemaVersion = 1

// Decision of a record.
type Decision string

const (
	Allow Decision = "allow"
	Deny  Decision = "deny"
	Error Decision = "error"
)

// Event names. Keep in sync with docs/audit.md.
const (
	EventPluginStart      = "plugin_start"
	EventPluginExit       = "plugin_exit"
	EventInstall          = "install"
	EventGrant            = "grant"
	EventRevoke           = "revoke"
	EventRemove           = "remove"
	EventExecDecision     = "exec_decision"
	EventExecOutcome      = "exec_outcome"
	EventCwdRefused       = "cwd_refused"
	EventStore            = "store"
	EventLoad             = "load"
	EventMetadata         = "metadata"
	EventPrompt           = "prompt"
	EventLimit            = "limit_exceeded"
	EventMalformed        = "malformed_lines"
	EventSandboxDegraded  = "sandbox_degraded"
	EventLegacyUnconfined = "legacy_unconfined"
	// EventGitQuarantine: when a run ended, the sandbox moved aside a nested git
	// repository (or an index) it left where the user's git would run code from it.
	EventGitQuarantine = "git_repo_quarantined"
	// EventSuppressed sums up, once per session, the records of one repeated kind written
	// past the per-session bound (so a plugin cannot fill the disk through the log).
	EventSuppressed = "audit_suppressed"
	// EventLogRecovered is written by the log itself when it finds a torn tail (a write cut
	// short by a crash): it names the skipped bytes so verify can tell a crash from an edit.
	EventLogRecovered = "log_recovered"
	// Tool and hook calls of the protocols that have them (jsonrpc-2.0, ...): a decision
	// before the call is sent, an outcome after it answered (or did not).
	EventToolCall    = "tool_call"
	EventToolOutcome = "tool_outcome"
	EventHookCall    = "hook_call"
	EventHookOutcome = "hook_outcome"
	// EventToolRules: a plugin's tool rules (plugins tools NAME --allow/--deny/--reset)
	// changed, or the change was refused.
	EventToolRules = "tool_rules"
)

// Events lists every event name, in the order docs/audit.md describes them.
var Events = []string{
	EventPluginStart, EventPluginExit, EventInstall, EventGrant, EventRevoke, EventRemove,
	EventExecDecision, EventExecOutcome, EventCwdRefused, EventStore, EventLoad,
	EventMetadata, EventPrompt, EventLimit, EventMalformed, EventSandboxDegraded,
	EventLegacyUnconfined, EventGitQuarantine, EventLogRecovered, EventLogPruned, EventLogTruncated, EventSuppressed,
	EventToolCall, EventToolOutcome, EventHookCall, EventHookOutcome,
	EventHandshake, EventInvokeRequest, EventInvokeOutcome, EventPluginInfo,
	EventKernelDenied, EventToolRules,
}

// PluginRef identifies the plugin a record is about.
type PluginRef struct {
	Name           string `json:"name"`
	Version        string `json:"version,omitempty"`
	Source         string `json:"source,omitempty"`
	ManifestDigest string `json:"manifest_digest,omitempty"`
}

// SandboxInfo is the confinement in force when the record was made.
type SandboxInfo struct {
	Mode        string `json:"mode"` // landlock | seatbelt | none
	LandlockABI int    `json:"landlock_abi,omitempty"`
	CgroupMode  string `json:"cgroup_mode,omitempty"`
}

// Record is one line of the log. The writer fills Schema, Seq, Time, Host, UID, PID,
// PrevHash and Hash; callers fill the rest.
type Record struct {
	Schema   int            `json:"schema"`
	Seq      uint64         `json:"seq"`
	Time     time.Time      `json:"time"`
	Session  string         `json:"session,omitempty"`
	Host     string         `json:"host"`
	UID      int            `json:"uid"`
	PID      int            `json:"pid"`
	Plugin   *PluginRef     `json:"plugin,omitempty"`
	Event    string         `json:"event"`
	Decision Decision       `json:"decision"`
	Reason   string         `json:"reason"`
	Details  map[string]any `json:"details,omitempty"`
	Sandbox  *SandboxInfo   `json:"sandbox,omitempty"`
	// ManagedPolicy is the digest of the machine's managed policy (policy.Managed.Digest)
	// in force, on the first record of every session; "" on the others, or with none.
	ManagedPolicy string `json:"managed_policy,omitempty"`
	PrevHash      string `json:"prev_hash"`
	Hash          string `json:"hash"`
}

// Recorder appends records. durable=true returns only once the record is on disk (fsync);
// the exec decision record uses it so the record exists before the command starts.
type Recorder interface {
	Append(r *Record, durable bool) error
}
