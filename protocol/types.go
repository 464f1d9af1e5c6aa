// SPDX-License-Identifier: MIT

// Package protocol holds the fledge-v1 wire types and a bounded NDJSON reader and writer,
// shared by the host (protocolhost) and the Go SDK for plugin authors.
package protocol

import "encoding/json"

// Version is the only protocol this host speaks.
const Version = "fledge-v1"

// Message type discriminators.
const (
	TypeInit        = "init"
	TypeResponse    = "response"
	TypeCancel      = "cancel"
	TypePrompt      = "prompt"
	TypeConfirm     = "confirm"
	TypeSelect      = "select"
	TypeMultiSelect = "multi_select"
	TypeProgress    = "progress"
	TypeLog         = "log"
	TypeOutput      = "output"
	TypeStore       = "store"
	TypeLoad        = "load"
	TypeExec        = "exec"
	TypeMetadata    = "metadata"
)

// Cancel reasons sent to the plugin.
const (
	CancelUserInterrupt  = "user_interrupt"
	CancelTimeout        = "timeout"
	CancelNonInteractive = "non_interactive"
	CancelLimit          = "limit_exceeded"
)

// ID is a request id exactly as the plugin wrote it (a JSON string, or a number from a
// sloppy plugin); it is echoed back byte for byte so the plugin's own matching works.
type ID = json.RawMessage

// ---- inbound (fledge -> plugin) ----

// Init is the first message a plugin receives.
type Init struct {
	Type         string       `json:"type"` // "init"
	Protocol     string       `json:"protocol"`
	Command      string       `json:"command,omitempty"`
	Args         []string     `json:"args"`
	Project      *Project     `json:"project"` // null outside a project
	Plugin       PluginInfo   `json:"plugin"`
	Fledge       FledgeInfo   `json:"fledge"`
	Capabilities Capabilities `json:"capabilities"`
	// Sandbox tells the plugin what it was actually given (fledge extension; plugins that do
	// not know it ignore it).
	Sandbox *SandboxInfo `json:"sandbox,omitempty"`
}

type Project struct {
	Name     string   `json:"name"`
	Root     string   `json:"root"`
	Language string   `json:"language"`
	Git      *GitInfo `json:"git"` // null when not a git repo
}

type GitInfo struct {
	Branch    string `json:"branch"`
	Dirty     bool   `json:"dirty"`
	Remote    string `json:"remote,omitempty"`
	RemoteURL string `json:"remote_url,omitempty"` // credentials stripped
}

type PluginInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Dir     string `json:"dir"`
	DataDir string `json:"data_dir,omitempty"`
}

type FledgeInfo struct {
	Version string `json:"version"`
}

// Capabilities is the GRANTED set, as sent in init.
type Capabilities struct {
	Exec       bool   `json:"exec"`
	Store      bool   `json:"store"`
	Metadata   bool   `json:"metadata"`
	Network    bool   `json:"network"`
	Filesystem string `json:"filesystem"` // none | plugin | project | project-rw
}

// The filesystem levels as init spells them (the grant of the same name in policy).
const (
	FilesystemNone    = "none"
	FilesystemPlugin  = "plugin"
	FilesystemProject = "project"
	// FilesystemProjectRW: the plugin process may write the project (its commands always
	// could); the git metadata stays read-only.
	FilesystemProjectRW = "project-rw"
)

// SandboxInfo describes the confinement the plugin process and its execs run under.
type SandboxInfo struct {
	Confinement string `json:"confinement"` // landlock | seatbelt | none
	LandlockABI int    `json:"landlock_abi,omitempty"`
	Cgroup      string `json:"cgroup,omitempty"` // v2 | hybrid | v1 | none
	Network     bool   `json:"network"`
	Filesystem  string `json:"filesystem"`
}

// Response answers one id-bearing request.
type Response struct {
	Type  string `json:"type"` // "response"
	ID    ID     `json:"id"`
	Value any    `json:"value"`
}

// Cancel withdraws one pending request (ID set) or the whole session (ID empty).
type Cancel struct {
	Type   string `json:"type"` // "cancel"
	ID     ID     `json:"id,omitempty"`
	Reason string `json:"reason"`
}

// ExecResult is the value of an exec response. Stdout and stderr are text: bytes that are not
// valid UTF-8 are replaced by U+FFFD (see docs), and the *_truncated flags say a cap was hit.
type ExecResult struct {
	Code            int    `json:"code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	TimedOut        bool   `json:"timed_out,omitempty"`
	Reason          string `json:"reason,omitempty"` // reason code when not ok
}

// ---- outbound (plugin -> fledge) ----

// Prompt asks for text input.
type Prompt struct {
	ID       ID      `json:"id"`
	Message  string  `json:"message"`
	Default  *string `json:"default,omitempty"`
	Validate string  `json:"validate,omitempty"` // non_empty | integer | path_exists | url
}

type Confirm struct {
	ID      ID     `json:"id"`
	Message string `json:"message"`
	Default *bool  `json:"default,omitempty"`
}

type Select struct {
	ID      ID       `json:"id"`
	Message string   `json:"message"`
	Options []string `json:"options"`
	Default *int     `json:"default,omitempty"`
}

type MultiSelect struct {
	ID       ID       `json:"id"`
	Message  string   `json:"message"`
	Options  []string `json:"options"`
	Defaults []int    `json:"defaults,omitempty"`
}

type Progress struct {
	Message string   `json:"message,omitempty"`
	Current *float64 `json:"current,omitempty"`
	Total   *float64 `json:"total,omitempty"`
	Done    bool     `json:"done,omitempty"`
}

type Log struct {
	Level   string `json:"level"` // debug | info | warn | error
	Message string `json:"message"`
}

type Output struct {
	Text string `json:"text"`
}

type Store struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type Load struct {
	ID  ID     `json:"id"`
	Key string `json:"key"`
}

type Exec struct {
	ID      ID       `json:"id"`
	Command string   `json:"command"`
	Cwd     string   `json:"cwd,omitempty"`
	Timeout *float64 `json:"timeout,omitempty"` // seconds
}

type Metadata struct {
	ID   ID       `json:"id"`
	Keys []string `json:"keys"`
}

// Message is one decoded outbound line: Type plus exactly one non-nil payload pointer for a
// known type. Unknown types have Type set and every payload nil.
type Message struct {
	Type string
	// Line is the 1-based line number in the stream (for warnings).
	Line int

	Prompt      *Prompt
	Confirm     *Confirm
	Select      *Select
	MultiSelect *MultiSelect
	Progress    *Progress
	Log         *Log
	Output      *Output
	Store       *Store
	Load        *Load
	Exec        *Exec
	Metadata    *Metadata
	// Response and Cancel are what a plugin receives; the SDK decodes them with the same
	// reader.
	Response *InboundResponse
	Cancel   *Cancel
	Init     *Init
}

// InboundResponse is a response as decoded by a plugin: Value kept raw for typed decoding.
type InboundResponse struct {
	ID    ID              `json:"id"`
	Value json.RawMessage `json:"value"`
}

// RequiresID reports whether messages of type t expect a response and so must carry an id.
func RequiresID(t string) bool {
	switch t {
	case TypePrompt, TypeConfirm, TypeSelect, TypeMultiSelect, TypeLoad, TypeExec, TypeMetadata:
		return true
	}
	return false
}
