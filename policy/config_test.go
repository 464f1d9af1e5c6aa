// SPDX-License-Identifier: MIT

package policy

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadMissingFileGivesDefaults(t *testing.T) {
	c, err := Load(t.TempDir())
	require.NoError(t, err)
	assert.Equal(t, Default(), c)
	assert.Equal(t, 1*GiB, c.Sandbox.Memory)
	assert.Equal(t, int64(256), c.Sandbox.Pids)
	assert.Equal(t, 30*time.Second, c.Sandbox.TimeoutDefault)
	assert.Equal(t, 300*time.Second, c.Sandbox.TimeoutMax)
	assert.Equal(t, 10*MiB, c.Sandbox.OutputCap)
	// The default gives each plugin (and its commands) exactly its network grant.
	assert.False(t, c.NetworkAllowed())
	assert.Equal(t, NetworkGrant, c.Sandbox.Network)
	assert.Equal(t, LegacyConfined, c.Sandbox.Legacy)
	assert.Equal(t, 1*MiB, c.Limits.LineMax)
	assert.Equal(t, 4, c.Limits.ConcurrentExecs)
	assert.Equal(t, 64, c.Limits.ExecQueue)
	assert.Equal(t, 256, c.Limits.PendingRequests)
	assert.Equal(t, 5*time.Minute, c.Limits.PromptTimeout)
	assert.Equal(t, 30*time.Second, c.Limits.StartupTimeout)
	assert.Equal(t, FsyncDurable, c.Audit.Fsync)
}

func TestLoadFullConfig(t *testing.T) {
	dir := t.TempDir()
	src := `# policy
[sandbox]
memory = "512MiB"
pids = 64
cpu = 1.5
timeout_default = 10
timeout_max = "2m"
output_cap = 1048576
network = "deny"
read_only = ["/srv/data", "~/datasets"]
read_write = ["/var/tmp/work/"]
env_allow = ["GOPATH", "MYAPP_*"]
unprotect = [".git/config", ".git/modules/*/hooks", "core.hooksPath"]
strict = true
legacy = "unconfined"

[limits]
line_max = "64KiB"
concurrent_execs = 2
exec_queue = 8
pending_requests = 32
prompt_timeout = "90s"
startup_timeout = "45s"

[audit]
fsync = "always"
rotate_bytes = "100MiB"
session_max_bytes = "2MiB"
max_total_bytes = "1GiB"
tool_argument_values = true
witness = "journald"
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigFile), []byte(src), 0o600))
	home, err := os.UserHomeDir()
	require.NoError(t, err)
	c, err := Load(dir)
	require.NoError(t, err)
	s := c.Sandbox
	assert.Equal(t, filepath.Join(dir, ConfigFile), c.File)
	assert.Equal(t, 512*MiB, s.Memory)
	assert.Equal(t, int64(64), s.Pids)
	assert.InDelta(t, 1.5, s.CPU, 1e-9)
	assert.Equal(t, 10*time.Second, s.TimeoutDefault)
	assert.Equal(t, 2*time.Minute, s.TimeoutMax)
	assert.Equal(t, MiB, s.OutputCap)
	assert.False(t, c.NetworkAllowed())
	assert.Equal(t, []string{"/srv/data", filepath.Join(home, "datasets")}, s.ReadOnly)
	assert.Equal(t, []string{"/var/tmp/work"}, s.ReadWrite)
	assert.Equal(t, []string{"GOPATH", "MYAPP_*"}, s.EnvAllow)
	assert.Equal(t, []string{".git/config", ".git/modules/*/hooks", "core.hooksPath"}, s.Unprotect)
	assert.True(t, s.Strict)
	assert.Equal(t, LegacyUnconfined, s.Legacy)
	assert.Equal(t, 64*KiB, c.Limits.LineMax)
	assert.Equal(t, 2, c.Limits.ConcurrentExecs)
	assert.Equal(t, 8, c.Limits.ExecQueue)
	assert.Equal(t, 32, c.Limits.PendingRequests)
	assert.Equal(t, 90*time.Second, c.Limits.PromptTimeout)
	assert.Equal(t, 45*time.Second, c.Limits.StartupTimeout)
	assert.Equal(t, 45*time.Second, c.SessionLimits().StartupTimeout)
	assert.Equal(t, FsyncAlways, c.Audit.Fsync)
	assert.Equal(t, 100*MiB, c.Audit.RotateBytes)
	assert.Equal(t, 2*MiB, c.Audit.SessionMaxBytes)
	assert.Equal(t, 1*GiB, c.Audit.MaxTotalBytes)
	assert.True(t, c.Audit.ToolArgumentValues)
	assert.Equal(t, "journald", c.Audit.Witness)

	el := c.ExecLimits()
	assert.Equal(t, 512*MiB, el.MemoryBytes)
	assert.Equal(t, int64(64), el.Pids)
	assert.Equal(t, 10*time.Second, el.Timeout)
	assert.Equal(t, DefaultKillGrace, el.KillGrace)
	assert.Equal(t, uint64(DefaultNoFile), el.NoFile)
	pl := c.PluginLimits()
	assert.Zero(t, pl.Timeout)
	assert.Equal(t, el.MemoryBytes, pl.MemoryBytes)
}

func TestConfigErrors(t *testing.T) {
	const file = "/cfg/config.toml"
	cases := []struct {
		name, src string
		want      string // full Error() text
		line      int
		key       string
	}{
		{
			name: "bad size",
			src:  "[sandbox]\n# comment\n\npids = 10\n\n\nmemory = \"lots\"\n",
			want: `/cfg/config.toml:7: [sandbox] memory: expected a size like "512MiB", got "lots"`,
			line: 7, key: "sandbox.memory",
		},
		{
			name: "unknown key is an error",
			src:  "[sandbox]\nstirct = true\n",
			want: `/cfg/config.toml:2: [sandbox] stirct: unknown key (known: cpu, env_allow, legacy, memory, network, output_cap, pids, read_only, read_write, strict, timeout_default, timeout_max, unix_sockets, unprotect)`,
			line: 2, key: "sandbox.stirct",
		},
		{
			name: "unknown section",
			src:  "[sandbox]\npids = 1\n[sandbx]\nx = 1\n",
			want: `/cfg/config.toml:3: sandbx: unknown section (known: [sandbox], [limits], [audit], [serve], [wasm])`,
			line: 3, key: "sandbx",
		},
		{
			name: "session budget too small",
			src:  "[audit]\nsession_max_bytes = \"4KiB\"\n",
			want: `/cfg/config.toml:2: [audit] session_max_bytes: must be between 256KiB and 1GiB, got 4KiB`,
			line: 2, key: "audit.session_max_bytes",
		},
		{
			name: "total bound without rotation",
			src:  "[audit]\nrotate_bytes = 0\nmax_total_bytes = \"64MiB\"\n",
			want: `/cfg/config.toml:3: [audit] max_total_bytes: max_total_bytes (64MiB) cannot be kept without rotation: set rotate_bytes, or max_total_bytes = 0 to keep everything`,
			line: 3, key: "audit.max_total_bytes",
		},
		{
			name: "default total bound too small for the rotation",
			src:  "[audit]\nrotate_bytes = \"200MiB\"\n",
			want: `/cfg/config.toml:2: [audit] rotate_bytes: max_total_bytes (256MiB) must hold at least two rotated files of rotate_bytes (200MiB) plus one record: 410112KiB or more`,
			line: 2, key: "audit.rotate_bytes",
		},
		{
			name: "unknown witness",
			src:  "[audit]\nwitness = \"sylog\"\n",
			want: `/cfg/config.toml:2: [audit] witness: expected journald, syslog, journald:/SOCKET, syslog:/SOCKET or exec:/path/to/program, got "sylog"`,
			line: 2, key: "audit.witness",
		},
		{
			name: "witness program not absolute",
			src:  "[audit]\nwitness = \"exec:upload.sh\"\n",
			want: `/cfg/config.toml:2: [audit] witness: expected journald, syslog, journald:/SOCKET, syslog:/SOCKET or exec:/path/to/program, got "exec:upload.sh"`,
			line: 2, key: "audit.witness",
		},
		{
			name: "wrong type",
			src:  "[sandbox]\nstrict = \"yes\"\n",
			want: `/cfg/config.toml:2: [sandbox] strict: expected true or false, got a string`,
			line: 2, key: "sandbox.strict",
		},
		{
			name: "bad enum",
			src:  "[sandbox]\nnetwork = \"maybe\"\n",
			want: `/cfg/config.toml:2: [sandbox] network: expected one of ["grant" "allow" "deny"], got "maybe"`,
			line: 2, key: "sandbox.network",
		},
		{
			name: "dotted key form",
			src:  "sandbox.pids = -1\n",
			want: `/cfg/config.toml:1: [sandbox] pids: must be between 0 and 4194304, got -1`,
			line: 1, key: "sandbox.pids",
		},
		{
			name: "quoted key",
			src:  "[limits]\n\"concurrent_execs\" = 0\n",
			want: `/cfg/config.toml:2: [limits] concurrent_execs: must be between 1 and 64, got 0`,
			line: 2, key: "limits.concurrent_execs",
		},
		{
			name: "relative path",
			src:  "[sandbox]\nread_only = [\"/ok\", \"rel/path\"]\n",
			want: `/cfg/config.toml:2: [sandbox] read_only: "rel/path": expected an absolute path (or ~/...)`,
			line: 2, key: "sandbox.read_only",
		},
		{
			name: "path exposing config dir",
			src:  "[sandbox]\nread_write = [\"/cfg\"]\n",
			want: `/cfg/config.toml:2: [sandbox] read_write: "/cfg" overlaps the fledge config dir /cfg, which plugins must never reach`,
			line: 2, key: "sandbox.read_write",
		},
		{
			name: "parent of config dir",
			src:  "[sandbox]\nread_only = [\"/\"]\n",
			want: `/cfg/config.toml:2: [sandbox] read_only: "/": the whole filesystem cannot be granted`,
			line: 2, key: "sandbox.read_only",
		},
		{
			name: "home dir",
			src:  "[sandbox]\nread_only = [\"~/\"]\n",
			want: `/cfg/config.toml:2: [sandbox] read_only: "~/": covers the whole home directory`,
			line: 2, key: "sandbox.read_only",
		},
		{
			name: "device directory",
			src:  "[sandbox]\nread_only = [\"/dev\"]\n",
			want: `/cfg/config.toml:2: [sandbox] read_only: "/dev" is /dev or under it: a device is never granted`,
			line: 2, key: "sandbox.read_only",
		},
		{
			name: "device by name",
			src:  "[sandbox]\nread_write = [\"/dev/null\", \"/dev/sda\"]\n",
			want: `/cfg/config.toml:2: [sandbox] read_write: "/dev/sda" is /dev or under it: a device is never granted`,
			line: 2, key: "sandbox.read_write",
		},
		{
			name: "credential in env_allow",
			src:  "[sandbox]\nenv_allow = [\"GITHUB_TOKEN\"]\n",
			want: `/cfg/config.toml:2: [sandbox] env_allow: "GITHUB_TOKEN" looks like a credential; fledge never passes credentials to plugins`,
			line: 2, key: "sandbox.env_allow",
		},
		{
			name: "bad env pattern",
			src:  "[sandbox]\nenv_allow = [\"*\"]\n",
			want: `/cfg/config.toml:2: [sandbox] env_allow: "*": expected a variable name or a PREFIX_* pattern`,
			line: 2, key: "sandbox.env_allow",
		},
		{
			name: "unprotect absolute",
			src:  "[sandbox]\nunprotect = [\"/repo/.git/config\"]\n",
			want: `/cfg/config.toml:2: [sandbox] unprotect: "/repo/.git/config": expected a path relative to a writable root, like ".git/config"`,
			line: 2, key: "sandbox.unprotect",
		},
		{
			name: "unprotect leaving the root",
			src:  "[sandbox]\nunprotect = [\"../other/.git/config\"]\n",
			want: `/cfg/config.toml:2: [sandbox] unprotect: "../other/.git/config": ".." would leave the writable root`,
			line: 2, key: "sandbox.unprotect",
		},
		{
			name: "unprotect unknown",
			src:  "[sandbox]\nunprotect = [\".git/HEAD\"]\n",
			want: `/cfg/config.toml:2: [sandbox] unprotect: ".git/HEAD": git writes it in ordinary work, so fledge never protects it`,
			line: 2, key: "sandbox.unprotect",
		},
		{
			name: "unprotect not a list",
			src:  "[sandbox]\nunprotect = \".git/config\"\n",
			want: `/cfg/config.toml:2: [sandbox] unprotect: expected an array of strings, got a string`,
			line: 2, key: "sandbox.unprotect",
		},
		{
			name: "timeouts inconsistent",
			src:  "[sandbox]\ntimeout_max = 20\ntimeout_default = 60\n",
			want: `/cfg/config.toml:3: [sandbox] timeout_default: timeout_default (1m0s) is larger than timeout_max (20s)`,
			line: 3, key: "sandbox.timeout_default",
		},
		{
			name: "timeout_max below default default",
			src:  "[sandbox]\ntimeout_max = 5\n",
			want: `/cfg/config.toml:2: [sandbox] timeout_max: timeout_default (30s) is larger than timeout_max (5s)`,
			line: 2, key: "sandbox.timeout_max",
		},
		{
			name: "bad duration",
			src:  "[limits]\nprompt_timeout = \"soon\"\n",
			want: `/cfg/config.toml:2: [limits] prompt_timeout: expected seconds or a duration like "30s", got "soon"`,
			line: 2, key: "limits.prompt_timeout",
		},
		{
			name: "tiny memory",
			src:  "[sandbox]\nmemory = 12\n",
			want: `/cfg/config.toml:2: [sandbox] memory: must be between 1MiB and 1024TiB, got 12B`,
			line: 2, key: "sandbox.memory",
		},
		{
			name: "section not a table",
			src:  "audit = 3\n",
			want: `/cfg/config.toml:1: audit: expected a table, got an integer`,
			line: 1, key: "audit",
		},
		{
			name: "key after multi-line string is located",
			src:  "[audit]\nfsync = \"\"\"\nnever\n\"\"\"\n",
			want: "/cfg/config.toml:2: [audit] fsync: expected one of [\"durable\" \"always\" \"never\"], got \"never\\n\"",
			line: 2, key: "audit.fsync",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(file, []byte(tc.src), "/cfg", "/home/u")
			require.Error(t, err)
			var ce *ConfigError
			require.ErrorAs(t, err, &ce)
			assert.True(t, errors.Is(err, ErrConfig))
			assert.Equal(t, tc.want, err.Error())
			assert.Equal(t, tc.line, ce.Line)
			assert.Equal(t, tc.key, ce.Key)
		})
	}
}

// TestConfigRefusesDeviceOnDisk: a [sandbox] path that is a device on disk, wherever it
// lies (a symlink to one, a node made with mknod), is refused like /dev itself; the
// harmless devices every process has are accepted by their own names.
func TestConfigRefusesDeviceOnDisk(t *testing.T) {
	const file = "/cfg/config.toml"
	link := filepath.Join(t.TempDir(), "nul")
	require.NoError(t, os.Symlink("/dev/null", link))
	_, err := Parse(file, []byte("[sandbox]\nread_only = [\""+link+"\"]\n"), "/cfg", "/home/u")
	require.ErrorIs(t, err, ErrConfig)
	assert.Equal(t, fmt.Sprintf(`%s:2: [sandbox] read_only: %q is a device (a character device node): a device is never granted`, file, link), err.Error())
	c, err := Parse(file, []byte("[sandbox]\nread_write = [\"/dev/null\", \"/dev/shm\"]\nread_only = [\"/dev/urandom\"]\n"), "/cfg", "/home/u")
	require.NoError(t, err)
	assert.Equal(t, []string{"/dev/null", "/dev/shm"}, c.Sandbox.ReadWrite)
}

func TestConfigSyntaxError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ConfigFile)
	require.NoError(t, os.WriteFile(path, []byte("[sandbox]\nmemory = \n"), 0o600))
	_, err := Load(dir)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, path, ce.File)
	assert.Equal(t, 2, ce.Line)
	assert.Positive(t, ce.Col)
	assert.Contains(t, err.Error(), path+":2: syntax error: ")
}

func TestConfigTooLarge(t *testing.T) {
	dir := t.TempDir()
	big := make([]byte, MaxConfigBytes+10)
	for i := range big {
		big[i] = '\n'
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, ConfigFile), big, 0o600))
	_, err := Load(dir)
	require.ErrorIs(t, err, ErrConfig)
	assert.Contains(t, err.Error(), "larger than")
}

func TestParseSize(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"1048576", MiB, true}, {"512MiB", 512 * MiB, true}, {"1GiB", GiB, true},
		{"1.5G", GiB + GiB/2, true}, {"64k", 64 * KiB, true}, {"2 MB", 2_000_000, true},
		{"10b", 10, true}, {"1tib", 1 << 40, true},
		{"", 0, false}, {"lots", 0, false}, {"5 parsecs", 0, false}, {"-1", 0, false},
		{"1e3", 0, false}, {"99999999999TiB", 0, false}, {"1..2M", 0, false},
	}
	for _, tc := range cases {
		got, err := ParseSize(tc.in)
		if !tc.ok {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	assert.Equal(t, "1GiB", FormatSize(GiB))
	assert.Equal(t, "1536KiB", FormatSize(1536*KiB))
	assert.Equal(t, "10B", FormatSize(10))
	assert.Equal(t, "0B", FormatSize(0))
}

func TestExecTimeout(t *testing.T) {
	c := Default()
	f := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		in      *float64
		want    time.Duration
		clamped bool
	}{
		{nil, 30 * time.Second, false},
		{f(2.5), 2500 * time.Millisecond, false},
		{f(300), 300 * time.Second, false},
		// Above timeout_max: clamped, as the Rust fledge host does, not refused.
		{f(301), 300 * time.Second, true},
		{f(600), 300 * time.Second, true},
	} {
		d, clamped, err := ExecTimeout(tc.in, c.Sandbox.TimeoutDefault, c.Sandbox.TimeoutMax)
		require.NoError(t, err)
		assert.Equal(t, tc.want, d)
		assert.Equal(t, tc.clamped, clamped)
	}
	for _, bad := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		_, _, err := ExecTimeout(f(bad), c.Sandbox.TimeoutDefault, c.Sandbox.TimeoutMax)
		assert.Error(t, err, bad)
	}
}

func TestConfigServePriority(t *testing.T) {
	c, err := Parse("/cfg/config.toml", []byte("[serve]\npriority = 42\n"), "/cfg", "/home/u")
	require.NoError(t, err)
	assert.Equal(t, 42, c.Serve.Priority)
	assert.Equal(t, 500, Default().Serve.Priority)
	_, err = Parse("/cfg/config.toml", []byte("[serve]\npriority = \"high\"\n"), "/cfg", "/home/u")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "serve] priority")
}

func TestCallTimeout(t *testing.T) {
	lim := SessionLimits{ExecTimeoutDefault: 30 * time.Second, ExecTimeoutMax: time.Minute}
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"", 30 * time.Second, false},
		{"5s", 5 * time.Second, false},
		{" 5s ", 5 * time.Second, false}, // one rule for every protocol: whitespace around is no error
		{"10m", time.Minute, false},      // clamped to the maximum, as execs are
		{"soon", 30 * time.Second, true},
		{"-1s", 30 * time.Second, true},
	} {
		d, err := CallTimeout(tc.in, lim)
		assert.Equal(t, tc.want, d, tc.in)
		assert.Equal(t, tc.err, err != nil, tc.in)
	}
}

func TestWasmSection(t *testing.T) {
	c, err := Parse("/cfg/config.toml", []byte("[wasm]\nmemory = \"64MiB\"\ntimeout = \"5s\"\n"), "", "")
	require.NoError(t, err)
	assert.Equal(t, 64*MiB, c.Wasm.Memory)
	assert.Equal(t, 5*time.Second, c.Wasm.Timeout)
	d := Default().Wasm
	assert.Equal(t, 256*MiB, d.Memory)
	assert.Equal(t, 60*time.Second, d.Timeout)
	_, err = Parse("/cfg/config.toml", []byte("[wasm]\nmemory = \"10GiB\"\n"), "", "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "[wasm] memory")
}

func TestConfigAuditExport(t *testing.T) {
	c, err := Parse("/cfg/config.toml", []byte(`[audit]
export = "otlp"
otlp_endpoint = "https://collector.example:4318"
otlp_protocol = "http/json"
otlp_headers = { "x-api-key" = "OTLP_KEY", "Authorization" = "OTLP_BEARER" }
`), "/cfg", "/home/u")
	require.NoError(t, err)
	assert.Equal(t, ExportOTLP, c.Audit.Export)
	assert.Equal(t, "https://collector.example:4318", c.Audit.OTLPEndpoint)
	assert.Equal(t, "http/json", c.Audit.OTLPProtocol)
	assert.Equal(t, map[string]string{"x-api-key": "OTLP_KEY", "Authorization": "OTLP_BEARER"}, c.Audit.OTLPHeaders)
	assert.Empty(t, Default().Audit.Export, "export is off unless asked for")

	for src, want := range map[string]string{
		"export = \"kafka\"\n":                                `[audit] export: expected one of ["" "otlp"]`,
		"otlp_endpoint = \"collector:4318\"\n":                `[audit] otlp_endpoint: expected an http:// or https:// URL`,
		"otlp_endpoint = \"http://u:pw@c:4318\"\n":            `[audit] otlp_endpoint: expected an http:// or https:// URL with a host and no user info`,
		"otlp_protocol = \"grpc\"\n":                          `[audit] otlp_protocol: expected one of ["http/protobuf" "http/json"]`,
		"otlp_headers = { \"x-api-key\" = \"sk-123 456\" }\n": `[audit] otlp_headers: header x-api-key: expected the name of a stored secret`,
		"otlp_headers = { \"bad name\" = \"KEY\" }\n":         `[audit] otlp_headers: header name "bad name" is not a valid HTTP header name`,
		"otlp_headers = \"KEY\"\n":                            `[audit] otlp_headers: expected a table of header = "SECRET_NAME"`,
	} {
		_, err := Parse("/cfg/config.toml", []byte("[audit]\n"+src), "/cfg", "/home/u")
		require.Error(t, err, src)
		assert.Contains(t, err.Error(), want, src)
	}
}
