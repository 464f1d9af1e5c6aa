// SPDX-License-Identifier: MIT

package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/fledgehq/fledge/pathguard"
	"github.com/fledgehq/fledge/sandbox"
)

// ConfigFile is the policy file's name inside the config dir.
const ConfigFile = "config.toml"

// MaxConfigBytes bounds config.toml; policy files are tiny and a huge one is a mistake.
const MaxConfigBytes = 1 << 20

// Size units.
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
)

// Allowed values of the enum-like settings.
const (
	NetworkAllow = "allow"
	NetworkDeny  = "deny"
	// NetworkGrant (the default): the plugin process and every command it runs get
	// exactly the plugin's network grant (a list of destinations, everything for
	// network = true, nothing without one).
	NetworkGrant = "grant"

	LegacyConfined   = "confined"
	LegacyUnconfined = "unconfined"

	FsyncDurable = "durable"
	FsyncAlways  = "always"
	FsyncNever   = "never"
)

// ErrConfig is matched by every *ConfigError (errors.Is).
var ErrConfig = errors.New("invalid config")

// ConfigError is a bad config.toml: a syntax error, a wrong type, an invalid value or an
// unknown key. Unknown keys are errors here (unlike plugin.toml): this file is security policy,
// and a misspelt "stirct = true" must not silently leave the sandbox lax.
type ConfigError struct {
	File      string
	Line, Col int    // 1-based; 0 when unknown
	Key       string // dotted key, e.g. "sandbox.memory"; "" for syntax errors
	Msg       string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(displayKey(e.Key))
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is makes errors.Is(err, ErrConfig) true for every ConfigError.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// displayKey renders "sandbox.memory" as "[sandbox] memory", the way the file spells it.
func displayKey(k string) string {
	table, key, ok := strings.Cut(k, ".")
	if !ok {
		return k
	}
	return "[" + table + "] " + key
}

// Config is the user's policy, from <config>/config.toml.
type Config struct {
	File    string // the file it was loaded from; "" for defaults
	Sandbox SandboxConfig
	Limits  LimitsConfig
	Audit   AuditConfig
	Serve   ServeConfig
	Wasm    WasmConfig
	// Managed is the machine's managed policy this config was held to (nil: none).
	Managed *Managed
	// set are the keys the file wrote ("sandbox.strict"), so a required setting can tell a
	// value written from a default.
	set map[string]bool
}

// ServeConfig is the [serve] table: how fledge presents itself when it serves another host.
type ServeConfig struct {
	// Priority is the jsonrpc-2.0 priority `fledge serve` announces (lower runs first).
	Priority int
}

// WasmConfig is the [wasm] table: bounds of a WASM plugin's module (package wasm).
type WasmConfig struct {
	Memory  int64         // linear memory, bytes
	Timeout time.Duration // wall clock of one run
}

// SandboxConfig is the [sandbox] table.
type SandboxConfig struct {
	Memory         int64 // bytes per run; 0 = no limit
	Pids           int64 // 0 = no limit
	CPU            float64
	TimeoutDefault time.Duration
	TimeoutMax     time.Duration
	OutputCap      int64 // bytes per stream
	Network        string
	UnixSockets    string   // allow | deny (default): unix-domain sockets for confined processes
	ReadOnly       []string // absolute, cleaned
	ReadWrite      []string // absolute, cleaned
	EnvAllow       []string // exact names or PREFIX_* patterns
	// Unprotect opts out of protected paths inside writable roots: names relative to each
	// writable root (".git/config", ".git/modules/*/hooks") or "core.hooksPath" /
	// "include.path" (sandbox.ValidUnprotect). Empty: every default protected path stays.
	Unprotect []string
	Strict    bool
	Legacy    string
}

// LimitsConfig is the [limits] table.
type LimitsConfig struct {
	LineMax         int64
	ConcurrentExecs int
	ExecQueue       int
	PendingRequests int
	PromptTimeout   time.Duration
	// StartupTimeout bounds how long a plugin may take to say it is ready (invoke-v1's
	// plugin_ready); past it the start is launch_failed.
	StartupTimeout time.Duration
}

// AuditConfig is the [audit] table.
type AuditConfig struct {
	Fsync       string
	RotateBytes int64 // 0 = never rotate
	// SessionMaxBytes bounds the log bytes one plugin session may write (core.Recorder):
	// past it denials are counted, not written, and acts are refused (no record, no act).
	SessionMaxBytes int64
	// MaxTotalBytes bounds the bytes the log keeps on disk: the oldest rotated files are
	// deleted, with a log_pruned record first. 0 = keep everything.
	MaxTotalBytes int64
	// ToolArgumentValues records tool call argument values, not only their keys (off by
	// default: arguments may hold secrets).
	ToolArgumentValues bool
	// Witness receives each checkpoint of the log (its head) where the plugin's user cannot
	// rewrite it: "journald", "syslog" (optionally ":SOCKET"), or "exec:/path/to/program
	// args" (run with the last checkpoint on stdin when fledge closes the log). "" = none.
	Witness string
	// Export ships the log: "otlp" sends every record to an OpenTelemetry collector
	// (audit/otlp); "" = the log stays on this machine.
	Export string
	// OTLPEndpoint is the collector's OTLP/HTTP URL ("" = OTEL_EXPORTER_OTLP_ENDPOINT, else
	// http://localhost:4318); a URL without a path gets /v1/logs.
	OTLPEndpoint string
	// OTLPProtocol is "http/protobuf" (default) or "http/json".
	OTLPProtocol string
	// OTLPHeaders maps a request header to the name of a secret in fledge's secrets store
	// (fledge secrets set NAME) whose value it carries, such as an API key.
	OTLPHeaders map[string]string
}

// Export values of [audit] export.
const (
	ExportNone = ""
	ExportOTLP = "otlp"
)

// [audit] defaults and bounds. They mirror core.DefaultSessionBytes, core.Min/MaxSessionBytes,
// audit.DefaultRotateBytes, audit.DefaultMaxTotalBytes and audit.DefaultMaxRecordBytes
// (policy does not import the writers).
const (
	DefaultRotateBytes     = 16 * MiB
	DefaultSessionMaxBytes = 8 * MiB
	MinSessionMaxBytes     = 256 * KiB
	MaxSessionMaxBytes     = 1 * GiB
	DefaultMaxTotalBytes   = 256 * MiB
	auditMaxRecordBytes    = 256 * KiB
)

// check is the [audit] rule between keys: a total bound needs rotation, and room for two
// rotated files, so the newest rotated file is always kept. It returns the message and the
// key it is about.
func (a AuditConfig) check() (msg, key string) {
	if a.MaxTotalBytes == 0 {
		return "", ""
	}
	if a.RotateBytes == 0 {
		return fmt.Sprintf("max_total_bytes (%s) cannot be kept without rotation: set rotate_bytes, or max_total_bytes = 0 to keep everything", FormatSize(a.MaxTotalBytes)), "max_total_bytes"
	}
	if least := 2 * (a.RotateBytes + auditMaxRecordBytes); a.MaxTotalBytes < least {
		return fmt.Sprintf("max_total_bytes (%s) must hold at least two rotated files of rotate_bytes (%s) plus one record: %s or more",
			FormatSize(a.MaxTotalBytes), FormatSize(a.RotateBytes), FormatSize(least)), "max_total_bytes"
	}
	return "", ""
}

// Default returns the policy used when config.toml is absent.
func Default() *Config {
	return &Config{
		Sandbox: SandboxConfig{
			Memory:         1 * GiB,
			Pids:           256,
			TimeoutDefault: 30 * time.Second,
			TimeoutMax:     300 * time.Second,
			OutputCap:      10 * MiB,
			Network:        NetworkGrant,
			UnixSockets:    NetworkDeny,
			Legacy:         LegacyConfined,
		},
		Serve: ServeConfig{Priority: 500},
		Limits: LimitsConfig{
			LineMax:         1 * MiB,
			ConcurrentExecs: 4,
			ExecQueue:       64,
			PendingRequests: 256,
			PromptTimeout:   5 * time.Minute,
			StartupTimeout:  30 * time.Second,
		},
		Audit: AuditConfig{Fsync: FsyncDurable, RotateBytes: DefaultRotateBytes, SessionMaxBytes: DefaultSessionMaxBytes, MaxTotalBytes: DefaultMaxTotalBytes},
		Wasm:  WasmConfig{Memory: 256 * MiB, Timeout: 60 * time.Second},
	}
}

// NetworkAllowed reports whether the user's override ([sandbox] network = "allow") gives
// every confined process the whole network whatever its plugin was granted.
func (c *Config) NetworkAllowed() bool { return c.Sandbox.Network == NetworkAllow }

// NetworkOverride is the announcement of network = "allow" (every run says it), "" otherwise.
func (c *Config) NetworkOverride() string {
	if c.NetworkAllowed() {
		return `[sandbox] network = "allow": every plugin and command gets the whole network, whatever it was granted`
	}
	return ""
}

// UnixSocketsAllowed reports whether confined processes may create unix-domain sockets
// (off by default: docker.sock, D-Bus and systemd sockets are ways out of any sandbox).
func (c *Config) UnixSocketsAllowed() bool { return c.Sandbox.UnixSockets == NetworkAllow }

// Load reads <configDir>/config.toml and holds it to the machine's managed policy
// (LoadManaged; Managed.Constrain). A missing file gives Default(); anything wrong with the
// file is a *ConfigError naming the file, line and key; a managed policy fledge cannot
// trust, or a setting over it, is an error too (ErrManaged): never silently skipped.
func Load(configDir string) (*Config, error) {
	m, err := LoadManaged()
	if err != nil {
		return nil, err
	}
	c, err := loadUser(configDir)
	if err != nil {
		return nil, err
	}
	if err := m.Constrain(c); err != nil {
		return nil, err
	}
	return c, nil
}

func loadUser(configDir string) (*Config, error) {
	path := filepath.Join(configDir, ConfigFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Default(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	if len(data) > MaxConfigBytes {
		return nil, &ConfigError{File: path, Msg: fmt.Sprintf("file is larger than %d bytes", MaxConfigBytes)}
	}
	home, _ := os.UserHomeDir()
	return Parse(path, data, configDir, home)
}

// Parse parses config.toml content. file is used in errors; configDir (if not "") is checked
// against read_only/read_write so policy cannot expose fledge's own config; home expands a
// leading "~/" in paths.
func Parse(file string, data []byte, configDir, home string) (*Config, error) {
	src := string(data)
	var raw map[string]any
	if _, err := toml.Decode(src, &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &ConfigError{File: file, Line: pe.Position.Line, Col: pe.Position.Col,
				Msg: "syntax error: " + pe.Message}
		}
		return nil, &ConfigError{File: file, Msg: err.Error()}
	}
	p := &cfgParser{file: file, src: src, home: home}
	c := Default()
	c.File = file

	for _, table := range sortedKeys(raw) {
		fields, ok := p.tableFields(table, c)
		if !ok {
			return nil, p.errAt(table, "", "unknown section (known: [sandbox], [limits], [audit], [serve], [wasm])")
		}
		m, ok := raw[table].(map[string]any)
		if !ok {
			return nil, p.errAt(table, "", fmt.Sprintf("expected a table, got %s", tomlType(raw[table])))
		}
		for _, key := range sortedKeys(m) {
			set, ok := fields[key]
			if !ok {
				return nil, p.errAt(table, key, "unknown key (known: "+strings.Join(sortedKeys(fields), ", ")+")")
			}
			if msg := set(m[key]); msg != "" {
				return nil, p.errAt(table, key, msg)
			}
			if c.set == nil {
				c.set = map[string]bool{}
			}
			c.set[table+"."+key] = true
		}
	}

	s := &c.Sandbox
	if s.TimeoutDefault > s.TimeoutMax {
		key := "timeout_default"
		if _, ok := lookup(raw, "sandbox", key); !ok {
			key = "timeout_max"
		}
		return nil, p.errAt("sandbox", key, fmt.Sprintf("timeout_default (%s) is larger than timeout_max (%s)", s.TimeoutDefault, s.TimeoutMax))
	}
	if msg, key := c.Audit.check(); msg != "" {
		if _, ok := lookup(raw, "audit", key); !ok {
			key = "rotate_bytes"
		}
		return nil, p.errAt("audit", key, msg)
	}
	if configDir != "" {
		cd := filepath.Clean(configDir)
		for _, list := range []struct {
			key   string
			paths []string
		}{{"read_only", s.ReadOnly}, {"read_write", s.ReadWrite}} {
			for _, path := range list.paths {
				if Within(cd, path) || Within(path, cd) {
					return nil, p.errAt("sandbox", list.key, fmt.Sprintf("%q overlaps the fledge config dir %s, which plugins must never reach", path, cd))
				}
			}
		}
	}
	return c, nil
}

type setter func(v any) (msg string)

type cfgParser struct {
	file, src, home string
}

func (p *cfgParser) errAt(table, key string, msg string) *ConfigError {
	k := table
	if key != "" {
		k = table + "." + key
	}
	line, col := locateKey(p.src, table, key)
	return &ConfigError{File: p.file, Line: line, Col: col, Key: k, Msg: msg}
}

func (p *cfgParser) tableFields(table string, c *Config) (map[string]setter, bool) {
	s, l, a, w := &c.Sandbox, &c.Limits, &c.Audit, &c.Wasm
	switch table {
	case "sandbox":
		return map[string]setter{
			"memory":          sizeField(&s.Memory, 0, 1<<50, MiB),
			"pids":            intField(&s.Pids, 0, 1<<22),
			"cpu":             floatField(&s.CPU, 0, 4096),
			"timeout_default": durationField(&s.TimeoutDefault, 24*time.Hour),
			"timeout_max":     durationField(&s.TimeoutMax, 24*time.Hour),
			"output_cap":      sizeField(&s.OutputCap, 1, 1*GiB, 0),
			"network":         enumField(&s.Network, NetworkGrant, NetworkAllow, NetworkDeny),
			"unix_sockets":    enumField(&s.UnixSockets, NetworkAllow, NetworkDeny),
			"read_only":       p.pathsField(&s.ReadOnly),
			"read_write":      p.pathsField(&s.ReadWrite),
			"env_allow":       envAllowField(&s.EnvAllow),
			"unprotect":       unprotectField(&s.Unprotect),
			"strict":          boolField(&s.Strict),
			"legacy":          enumField(&s.Legacy, LegacyConfined, LegacyUnconfined),
		}, true
	case "limits":
		var n64 [3]int64
		return map[string]setter{
			"line_max":         sizeField(&l.LineMax, 1*KiB, 64*MiB, 0),
			"concurrent_execs": intInto(&l.ConcurrentExecs, &n64[0], 1, 64),
			"exec_queue":       intInto(&l.ExecQueue, &n64[1], 0, 4096),
			"pending_requests": intInto(&l.PendingRequests, &n64[2], 1, 65536),
			"prompt_timeout":   durationField(&l.PromptTimeout, 24*time.Hour),
			"startup_timeout":  durationField(&l.StartupTimeout, time.Hour),
		}, true
	case "wasm":
		return map[string]setter{
			"memory":  sizeField(&w.Memory, 1*MiB, 4*GiB, MiB),
			"timeout": durationField(&w.Timeout, 24*time.Hour),
		}, true
	case "audit":
		return map[string]setter{
			"fsync":                enumField(&a.Fsync, FsyncDurable, FsyncAlways, FsyncNever),
			"rotate_bytes":         sizeField(&a.RotateBytes, 0, 1<<50, 0),
			"session_max_bytes":    sizeField(&a.SessionMaxBytes, MinSessionMaxBytes, MaxSessionMaxBytes, 0),
			"max_total_bytes":      sizeField(&a.MaxTotalBytes, 0, 1<<50, 0),
			"tool_argument_values": boolField(&a.ToolArgumentValues),
			"witness":              witnessField(&a.Witness),
			"export":               enumField(&a.Export, ExportNone, ExportOTLP),
			"otlp_endpoint":        endpointField(&a.OTLPEndpoint),
			"otlp_protocol":        enumField(&a.OTLPProtocol, "http/protobuf", "http/json"),
			"otlp_headers":         headersField(&a.OTLPHeaders),
		}, true
	case "serve":
		var n int64
		return map[string]setter{
			"priority": intInto(&c.Serve.Priority, &n, -1_000_000_000, 1_000_000_000),
		}, true
	}
	return nil, false
}

func tomlType(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a datetime"
	}
	return fmt.Sprintf("%T", v)
}

func showValue(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%v", v)
}

func boolField(dst *bool) setter {
	return func(v any) string {
		b, ok := v.(bool)
		if !ok {
			return "expected true or false, got " + tomlType(v)
		}
		*dst = b
		return ""
	}
}

func intField(dst *int64, lo, hi int64) setter {
	return func(v any) string {
		n, ok := v.(int64)
		if !ok {
			return "expected an integer, got " + tomlType(v) + " " + showValue(v)
		}
		if n < lo || n > hi {
			return fmt.Sprintf("must be between %d and %d, got %d", lo, hi, n)
		}
		*dst = n
		return ""
	}
}

func intInto(dst *int, tmp *int64, lo, hi int64) setter {
	inner := intField(tmp, lo, hi)
	return func(v any) string {
		if msg := inner(v); msg != "" {
			return msg
		}
		*dst = int(*tmp)
		return ""
	}
}

func floatField(dst *float64, lo, hi float64) setter {
	return func(v any) string {
		var f float64
		switch n := v.(type) {
		case int64:
			f = float64(n)
		case float64:
			f = n
		default:
			return "expected a number of cores like 1.5, got " + tomlType(v) + " " + showValue(v)
		}
		if math.IsNaN(f) || f < lo || f > hi {
			return fmt.Sprintf("must be between %v and %v, got %v", lo, hi, f)
		}
		*dst = f
		return ""
	}
}

// endpointField is [audit] otlp_endpoint: an http:// or https:// URL without user info
// (audit/otlp.Endpoint resolves it; policy does not import the exporter).
func endpointField(dst *string) setter {
	return func(v any) string {
		s, ok := v.(string)
		if !ok {
			return "expected a URL such as \"http://collector.example:4318\", got " + tomlType(v)
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return fmt.Sprintf("expected an http:// or https:// URL with a host and no user info, got %s", showValue(v))
		}
		*dst = s
		return ""
	}
}

// headersField is [audit] otlp_headers: a table of header name = secret name. The values
// are names in the secrets store, never the secret itself, so config.toml holds no key.
func headersField(dst *map[string]string) setter {
	return func(v any) string {
		m, ok := v.(map[string]any)
		if !ok {
			return "expected a table of header = \"SECRET_NAME\", got " + tomlType(v)
		}
		out := make(map[string]string, len(m))
		for k, x := range m {
			name, ok := x.(string)
			if k == "" || strings.ContainsAny(k, " :\r\n\t") {
				return fmt.Sprintf("header name %q is not a valid HTTP header name", k)
			}
			if !ok || !ValidSecretName(name) {
				return fmt.Sprintf("header %s: expected the name of a stored secret (fledge secrets set NAME), got %s", k, showValue(x))
			}
			out[k] = name
		}
		*dst = out
		return ""
	}
}

// witnessField is [audit] witness: the syntax audit.ParseWitness accepts (policy does not
// import the writers).
func witnessField(dst *string) setter {
	return func(v any) string {
		s, ok := v.(string)
		if !ok {
			return "expected a string (journald, syslog or exec:/path/to/program), got " + showValue(v)
		}
		kind, arg, hasArg := strings.Cut(s, ":")
		switch {
		case s == "":
		case (kind == "journald" || kind == "syslog") && (!hasArg || strings.HasPrefix(arg, "/")):
		case kind == "exec" && strings.HasPrefix(strings.TrimSpace(arg), "/"):
		default:
			return fmt.Sprintf("expected journald, syslog, journald:/SOCKET, syslog:/SOCKET or exec:/path/to/program, got %s", showValue(v))
		}
		*dst = s
		return ""
	}
}

func enumField(dst *string, allowed ...string) setter {
	return func(v any) string {
		s, ok := v.(string)
		if ok {
			for _, a := range allowed {
				if s == a {
					*dst = s
					return ""
				}
			}
		}
		return fmt.Sprintf("expected one of %q, got %s", allowed, showValue(v))
	}
}

// sizeField accepts an integer byte count or a string like "512MiB". A nonzero value below
// minNonZero is refused (e.g. a memory limit of 1 byte is a typo, not a policy).
func sizeField(dst *int64, lo, hi, minNonZero int64) setter {
	return func(v any) string {
		var n int64
		switch x := v.(type) {
		case int64:
			n = x
		case string:
			var err error
			if n, err = ParseSize(x); err != nil {
				return fmt.Sprintf("expected a size like \"512MiB\", got %q", x)
			}
		default:
			return fmt.Sprintf("expected a size like \"512MiB\" or a byte count, got %s %s", tomlType(v), showValue(v))
		}
		if n < lo || n > hi || (n != 0 && n < minNonZero) {
			low := lo
			if minNonZero > low {
				low = minNonZero
			}
			return fmt.Sprintf("must be between %s and %s, got %s", FormatSize(low), FormatSize(hi), FormatSize(n))
		}
		*dst = n
		return ""
	}
}

// durationField accepts an integer number of seconds or a Go duration string ("90s", "5m").
func durationField(dst *time.Duration, hi time.Duration) setter {
	return func(v any) string {
		var d time.Duration
		switch x := v.(type) {
		case int64:
			if x <= 0 || x > int64(hi/time.Second) {
				return fmt.Sprintf("must be between 1 and %d seconds, got %d", int64(hi/time.Second), x)
			}
			d = time.Duration(x) * time.Second
		case float64:
			if math.IsNaN(x) || x <= 0 || x > hi.Seconds() {
				return fmt.Sprintf("must be a positive number of seconds up to %d, got %v", int64(hi/time.Second), x)
			}
			d = time.Duration(x * float64(time.Second))
		case string:
			var err error
			d, err = time.ParseDuration(x)
			if err != nil {
				return fmt.Sprintf("expected seconds or a duration like \"30s\", got %q", x)
			}
			if d <= 0 || d > hi {
				return fmt.Sprintf("must be positive and at most %s, got %s", hi, d)
			}
		default:
			return "expected seconds or a duration like \"30s\", got " + tomlType(v)
		}
		*dst = d
		return ""
	}
}

func stringList(v any) ([]string, string) {
	arr, ok := v.([]any)
	if !ok {
		return nil, "expected an array of strings, got " + tomlType(v)
	}
	if len(arr) > 256 {
		return nil, fmt.Sprintf("at most 256 entries, got %d", len(arr))
	}
	out := make([]string, 0, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Sprintf("entry %d: expected a string, got %s", i+1, tomlType(e))
		}
		out = append(out, s)
	}
	return out, ""
}

func (p *cfgParser) pathsField(dst *[]string) setter {
	return func(v any) string {
		list, msg := stringList(v)
		if msg != "" {
			return msg
		}
		out := make([]string, 0, len(list))
		for _, s := range list {
			path := s
			if strings.HasPrefix(path, "~/") {
				if p.home == "" {
					return fmt.Sprintf("%q: cannot expand ~ (no home directory)", s)
				}
				path = filepath.Join(p.home, path[2:])
			}
			if !filepath.IsAbs(path) || strings.ContainsRune(path, 0) {
				return fmt.Sprintf("%q: expected an absolute path (or ~/...)", s)
			}
			path = filepath.Clean(path)
			if path == "/" {
				return fmt.Sprintf("%q: the whole filesystem cannot be granted", s)
			}
			if p.home != "" && Within(filepath.Clean(p.home), path) {
				return fmt.Sprintf("%q: covers the whole home directory", s)
			}
			// A device node, by name or by what the path is now (a symlink followed); a
			// path that does not exist yet is judged by its name.
			var mode fs.FileMode
			if fi, err := os.Stat(path); err == nil {
				mode = fi.Mode()
			}
			if err := CheckDevicePath(path, mode); err != nil {
				return strings.TrimPrefix(err.Error(), ErrReadGrant.Error()+": ")
			}
			out = append(out, path)
		}
		*dst = out
		return ""
	}
}

func unprotectField(dst *[]string) setter {
	return func(v any) string {
		list, msg := stringList(v)
		if msg != "" {
			return msg
		}
		for _, s := range list {
			if err := sandbox.ValidUnprotect(s); err != nil {
				return strings.TrimPrefix(err.Error(), sandbox.ErrUnprotect.Error()+": ")
			}
		}
		*dst = list
		return ""
	}
}

// Compiled on first use: package init runs in every fledge process, the sandbox's
// helper processes included, and most never match these.
var envPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\*?$`) })

func envAllowField(dst *[]string) setter {
	return func(v any) string {
		list, msg := stringList(v)
		if msg != "" {
			return msg
		}
		for _, s := range list {
			if !envPattern().MatchString(s) {
				return fmt.Sprintf("%q: expected a variable name or a PREFIX_* pattern", s)
			}
			if CredentialName(strings.TrimSuffix(s, "*")) {
				return fmt.Sprintf("%q looks like a credential; fledge never passes credentials to plugins", s)
			}
		}
		*dst = list
		return ""
	}
}

// ParseSize parses "1048576", "512MiB", "1GiB", "1.5G", "64k". Binary units (KiB, MiB,
// GiB, TiB, and the short K/M/G/T as docker and ulimit read them) and decimal ones (KB, MB,
// GB, TB). Case-insensitive; the result must fit in int64 and not be negative.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	mult := map[string]float64{
		"": 1, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
		"g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
		"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("invalid size unit in %q", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	v := f * mult
	if v < 0 || v >= math.MaxInt64 || math.IsNaN(v) {
		return 0, fmt.Errorf("size %q out of range", s)
	}
	return int64(v), nil
}

// FormatSize renders bytes with the largest exact binary unit ("1GiB", "1536KiB", "10B").
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func lookup(raw map[string]any, table, key string) (any, bool) {
	m, ok := raw[table].(map[string]any)
	if !ok {
		return nil, false
	}
	v, ok := m[key]
	return v, ok
}

// locateKey finds where table.key (or the table itself when key is "") is written in src, so
// errors can name a line: BurntSushi/toml reports positions for syntax errors only. It
// understands [table] headers, dotted keys and quoted keys, and skips multi-line strings. It
// returns 0, 0 when it cannot tell (e.g. a key inside an inline table).
func locateKey(src, table, key string) (line, col int) {
	want := []string{table}
	if key != "" {
		want = append(want, key)
	}
	var current []string
	inMulti := ""
	for i, l := range strings.Split(src, "\n") {
		if inMulti != "" {
			if strings.Count(l, inMulti)%2 == 1 {
				inMulti = ""
			}
			continue
		}
		trimmed := strings.TrimLeft(l, " \t")
		indent := len(l) - len(trimmed)
		switch {
		case strings.HasPrefix(trimmed, "#") || trimmed == "":
		case strings.HasPrefix(trimmed, "["):
			h := strings.Trim(trimmed, "[] \t\r")
			if j := strings.Index(h, "]"); j >= 0 {
				h = h[:j]
			}
			current = splitKey(h)
			if key == "" && equalKey(current, want) {
				return i + 1, indent + 1
			}
		default:
			k, _, ok := strings.Cut(trimmed, "=")
			if !ok {
				continue
			}
			full := append(append([]string{}, current...), splitKey(k)...)
			if equalKey(full, want) || (key == "" && len(full) > 1 && equalKey(full[:1], want)) {
				return i + 1, indent + 1
			}
			for _, q := range []string{`"""`, `'''`} {
				if strings.Count(l, q)%2 == 1 {
					inMulti = q
				}
			}
		}
	}
	return 0, 0
}

func splitKey(k string) []string {
	parts := strings.Split(k, ".")
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if len(p) >= 2 && (p[0] == '"' || p[0] == '\'') && p[len(p)-1] == p[0] {
			if uq, err := strconv.Unquote(`"` + p[1:len(p)-1] + `"`); err == nil {
				p = uq
			} else {
				p = p[1 : len(p)-1]
			}
		}
		out = append(out, p)
	}
	return out
}

func equalKey(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Within reports whether path is root or inside it (both absolute; compared lexically after
// Clean). Callers that need symlink-safety resolve first.
func Within(path, root string) bool { return pathguard.Within(path, root) }
