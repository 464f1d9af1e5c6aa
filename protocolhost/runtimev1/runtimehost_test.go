// SPDX-License-Identifier: MIT

package runtimev1

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/protocolhost/tools"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/testkit/adaptertest"
)

var pluginScript = func() string {
	b, err := os.ReadFile(filepath.Join("testdata", "plugin.py"))
	if err != nil {
		panic(err)
	}
	return string(b)
}()

const toolsTOML = `
[[tools]]
name = "echo"
description = "echo the input"
[[tools.parameters]]
name = "text"
type = "string"
required = true

[[tools]]
name = "readfile"
[[tools.parameters]]
name = "path"
type = "string"
required = true

[[tools]]
name = "hidden"
`

// install installs the test plugin as "rt" in the given mode with grants; extra is appended
// to [plugin] (e.g. a timeout), declared is the [capabilities] table.
func install(t *testing.T, f *adaptertest.Fixture, mode string, grants policy.Grants, extra string) {
	t.Helper()
	files := map[string]string{
		"plugin.toml": `[plugin]
name = "rt"
version = "1.0.0"
protocol = "runtime-v1"
` + extra + `
[[commands]]
name = "rt"
binary = "plugin.py"

[capabilities]
network = true
filesystem = "project"
store = true
` + toolsTOML,
		"plugin.py": pluginScript,
		"mode":      mode,
	}
	if strings.HasPrefix(mode, "interp:") {
		files["plugin.py"] = "#!/nonexistent/python3\n"
		files["mode"] = "ok"
	}
	f.Install(files, grants)
}

func call(t *testing.T, f *adaptertest.Fixture, tool string, args map[string]any) *tools.Result {
	t.Helper()
	_, res, err := f.Catalogue().Call(context.Background(), tool, args)
	require.NoError(t, err)
	require.NotNil(t, res)
	return res
}

var noGrants = policy.Grants{Filesystem: policy.FilesystemNone}
var netGrant = policy.Grants{Network: true, Filesystem: policy.FilesystemNone}

func TestToolsListed(t *testing.T) {
	f := adaptertest.New(t, nil)
	install(t, f, "ok", noGrants, "")
	ts := f.Catalogue().List(context.Background())
	var names []string
	for _, x := range ts {
		names = append(names, x.Name)
		assert.Equal(t, "runtime-v1", x.Protocol)
	}
	assert.Equal(t, []string{"plugin_rt_echo", "plugin_rt_hidden", "plugin_rt_readfile"}, names)
}

func TestCallOK(t *testing.T) {
	f := adaptertest.New(t, nil)
	install(t, f, "ok", netGrant, "")
	res := call(t, f, "plugin_rt_echo", map[string]any{"text": "hi"})
	require.True(t, res.Success, res.Message)
	assert.Equal(t, reason.OK, res.Reason)
	assert.JSONEq(t, `{"tool":"echo","input":{"text":"hi"}}`, string(res.Output))
	assert.Equal(t, 0, reason.ExitStatus(res.Reason))

	hs := f.Find(audit.EventHandshake)
	require.Len(t, hs, 2, "discovery and execute handshakes")
	assert.Equal(t, "discovery", hs[0].Details["phase"])
	assert.Equal(t, []any{"network"}, hs[0].Details["allow"])
	assert.Equal(t, []any{"network"}, hs[1].Details["capabilities"])
	calls := f.Find(audit.EventToolCall)
	require.Len(t, calls, 1)
	assert.Equal(t, audit.Allow, calls[0].Decision)
	assert.Equal(t, "echo", calls[0].Details["tool"])
	outs := f.Find(audit.EventToolOutcome)
	require.Len(t, outs, 1)
	assert.Equal(t, audit.Allow, outs[0].Decision)
	assert.Equal(t, calls[0].Session, outs[0].Session)
	assert.Less(t, calls[0].Seq, outs[0].Seq)
}

// The plugin's own error is a tool failure (exit 1), not one of fledge's reasons.
func TestPluginError(t *testing.T) {
	f := adaptertest.New(t, nil)
	install(t, f, "plugin_error", noGrants, "")
	res := call(t, f, "plugin_rt_echo", map[string]any{"text": "x"})
	assert.False(t, res.Success)
	assert.Equal(t, reason.OK, res.Reason)
	assert.Contains(t, res.Message, "bad_input: no such thing")
	assert.JSONEq(t, `{"code":"bad_input","message":"no such thing"}`, string(res.Output))
	outs := f.Find(audit.EventToolOutcome)
	require.Len(t, outs, 1)
	assert.Equal(t, audit.Error, outs[0].Decision)
	assert.Equal(t, "bad_input", outs[0].Details["error_code"])
}

// Every failure code of the taxonomy, each with its exit status and its audit record.
func TestFailureCodes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   string
		grants policy.Grants
		extra  string
		tool   string
		code   reason.Code
		msg    string
		event  string // the record that carries the code
	}{
		{"launch_failed", "interp:", noGrants, "", "plugin_rt_echo", reason.LaunchFailed, "could not be started", audit.EventPluginExit},
		{"handshake_failed", "no_version", noGrants, "", "plugin_rt_echo", reason.HandshakeFailed, "lacks a required field", audit.EventHandshake},
		{"timeout", "slow", noGrants, `timeout = "1s"`, "plugin_rt_echo", reason.Timeout, "within 1s", audit.EventToolOutcome},
		{"timeout_handshake", "hs_sleep", noGrants, `timeout = "1s"`, "plugin_rt_echo", reason.Timeout, "handshake within 1s", audit.EventHandshake},
		{"crashed", "crash", noGrants, "", "plugin_rt_echo", reason.Crashed, "exited with status 3 before sending its response", audit.EventToolOutcome},
		{"crashed_handshake", "hs_exit", noGrants, "", "plugin_rt_echo", reason.Crashed, "exited with status 4 before sending its handshake", audit.EventHandshake},
		{"malformed_response", "garbage", noGrants, "", "plugin_rt_echo", reason.MalformedResponse, "not one complete JSON object", audit.EventToolOutcome},
		{"malformed_handshake", "hs_garbage", noGrants, "", "plugin_rt_echo", reason.MalformedResponse, "handshake is not valid", audit.EventHandshake},
		{"malformed_wrong_type", "wrongtype", noGrants, "", "plugin_rt_echo", reason.MalformedResponse, `sent type "progress"`, audit.EventToolOutcome},
		{"malformed_second_line", "second_line", noGrants, "", "plugin_rt_echo", reason.MalformedResponse, "another line after its one response", audit.EventToolOutcome},
		{"tool_not_exposed", "ok", noGrants, "", "plugin_rt_hidden", reason.ToolNotExposed, `does not expose tool "hidden"`, audit.EventHandshake},
		{"protocol_version_mismatch", "proto2", noGrants, "", "plugin_rt_echo", reason.ProtocolVersionMismatch, `version "2"`, audit.EventHandshake},
		{"capability_not_declared", "no_caps", netGrant, "", "plugin_rt_echo", reason.CapabilityNotDeclared, "declares no capabilities", audit.EventHandshake},
		{"capability_not_allowed", `caps=["network","store"]`, netGrant, "", "plugin_rt_echo", reason.CapabilityNotAllowed, `"store", which is not granted`, audit.EventHandshake},
		{"capability_empty", `caps=["network",""]`, netGrant, "", "plugin_rt_echo", reason.CapabilityNotAllowed, "empty capability", audit.EventHandshake},
		{"capability_padded", `caps=[" network"]`, netGrant, "", "plugin_rt_echo", reason.CapabilityNotAllowed, "surrounding whitespace", audit.EventHandshake},
		{"capability_duplicate", `caps=["network","network"]`, netGrant, "", "plugin_rt_echo", reason.CapabilityNotAllowed, "twice", audit.EventHandshake},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := adaptertest.New(t, nil)
			install(t, f, tc.mode, tc.grants, tc.extra)
			args := map[string]any{"text": "x"}
			if tc.tool == "plugin_rt_hidden" {
				args = map[string]any{}
			}
			res := call(t, f, tc.tool, args)
			assert.False(t, res.Success)
			assert.Equal(t, tc.code, res.Reason, res.Message)
			assert.Contains(t, res.Message, tc.msg)
			assert.Equal(t, map[reason.Code]int{
				reason.LaunchFailed: 126, reason.HandshakeFailed: 101, reason.Timeout: 124, reason.Crashed: 108,
				reason.MalformedResponse: 107, reason.ToolNotExposed: 106, reason.ProtocolVersionMismatch: 102,
				reason.CapabilityNotDeclared: 103, reason.CapabilityNotAllowed: 104,
			}[tc.code], reason.ExitStatus(res.Reason))
			var found bool
			for _, r := range f.Find(tc.event) {
				if r.Reason == string(tc.code) {
					found = true
					assert.NotEqual(t, audit.Allow, r.Decision)
				}
			}
			assert.True(t, found, "a %s record with reason %s", tc.event, tc.code)
			if tc.event == audit.EventToolOutcome {
				assert.Len(t, f.Find(audit.EventToolCall), 1, "the call was on record before it was sent")
			} else {
				assert.Empty(t, f.Find(audit.EventToolCall), "nothing was sent to a plugin that failed before execute")
			}
			// Never a success after a failure, and the plugin is gone.
			for _, r := range f.Find(audit.EventPluginExit) {
				assert.NotEmpty(t, r.Details)
			}
		})
	}
}

// The run's sandbox is built from what the handshake declared: granted network and the
// project, declaring only network, the plugin cannot read the project.
func TestProfileFromDeclaredCapabilities(t *testing.T) {
	f := adaptertest.New(t, nil)
	grants := policy.Grants{Network: true, Filesystem: policy.FilesystemProject}
	secret := filepath.Join(f.Project.Root, "secret.txt")

	install(t, f, "narrow", grants, "")
	res := call(t, f, "plugin_rt_readfile", map[string]any{"path": secret})
	require.True(t, res.Success, res.Message)
	var out map[string]string
	require.NoError(t, json.Unmarshal(res.Output, &out))
	// Refused by Landlock, or absent from the private filesystem view: never read.
	assert.Contains(t, []string{"Permission denied", "No such file or directory"}, out["error"], "declared network only: no project access")
	starts := f.Find(audit.EventPluginStart)
	require.Len(t, starts, 2)
	prof := starts[1].Details["profile"].(map[string]any)
	assert.Equal(t, "all", prof["network"])
	assert.NotContains(t, prof["read_only"], f.Project.Root)

	// Declaring both, it can.
	f2 := adaptertest.New(t, nil)
	install(t, f2, "ok", grants, "")
	secret2 := filepath.Join(f2.Project.Root, "secret.txt")
	res = call(t, f2, "plugin_rt_readfile", map[string]any{"path": secret2})
	require.True(t, res.Success, res.Message)
	require.NoError(t, json.Unmarshal(res.Output, &out))
	assert.Equal(t, "project secret\n", out["read"])
}

func TestCheckManifestTable(t *testing.T) {
	base := func() *Manifest {
		return &Manifest{PluginID: "p", PluginVersion: "1", ProtocolVersion: "1", ExposedTools: []string{"a"}, Capabilities: []string{"exec"}}
	}
	for _, tc := range []struct {
		name  string
		edit  func(m *Manifest)
		allow []string
		tool  string
		code  reason.Code
	}{
		{"ok", func(*Manifest) {}, []string{"exec"}, "a", ""},
		{"no allow-list, none declared", func(m *Manifest) { m.Capabilities = nil }, nil, "a", ""},
		{"declared without allow-list", func(*Manifest) {}, nil, "a", reason.CapabilityNotAllowed},
		{"id mismatch", func(m *Manifest) { m.PluginID = "q" }, []string{"exec"}, "a", reason.HandshakeFailed},
		{"missing exposed_tools", func(m *Manifest) { m.ExposedTools = nil }, []string{"exec"}, "a", reason.HandshakeFailed},
		{"bad tool name", func(m *Manifest) { m.ExposedTools = []string{"../x"} }, []string{"exec"}, "a", reason.HandshakeFailed},
		{"version", func(m *Manifest) { m.ProtocolVersion = "1.0" }, []string{"exec"}, "a", reason.ProtocolVersionMismatch},
		{"not declared", func(m *Manifest) { m.Capabilities = []string{} }, []string{"exec"}, "a", reason.CapabilityNotDeclared},
		{"not allowed", func(m *Manifest) { m.Capabilities = []string{"filesystem:project"} }, []string{"exec", "filesystem:plugin"}, "a", reason.CapabilityNotAllowed},
		{"tool", func(*Manifest) {}, []string{"exec"}, "b", reason.ToolNotExposed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base()
			tc.edit(m)
			f := CheckManifest(m, "p", tc.tool, tc.allow)
			if tc.code == "" {
				assert.Nil(t, f)
				return
			}
			require.NotNil(t, f)
			assert.Equal(t, tc.code, f.Code)
			assert.ErrorIs(t, f, ErrRuntime)
		})
	}
}

// Without [[tools]] in plugin.toml, the tools are the exposed_tools of a discovery
// handshake (tool ""), run with no capabilities; the discovery is done once per invocation.
func TestToolsFromHandshake(t *testing.T) {
	f := adaptertest.New(t, nil)
	f.Install(map[string]string{
		"plugin.toml": "[plugin]\nname = \"rt\"\nversion = \"1.0.0\"\nprotocol = \"runtime-v1\"\n\n[[commands]]\nname = \"rt\"\nbinary = \"plugin.py\"\n",
		"plugin.py":   pluginScript,
		"mode":        "ok",
	}, noGrants)
	c := f.Catalogue()
	var names []string
	for _, x := range c.List(context.Background()) {
		names = append(names, x.Name)
	}
	assert.Equal(t, []string{"plugin_rt_echo", "plugin_rt_readfile", "plugin_rt_slow"}, names)
	_, res, err := c.Call(context.Background(), "plugin_rt_echo", map[string]any{"anything": true})
	require.NoError(t, err)
	require.True(t, res.Success, res.Message)
	hs := f.Find(audit.EventHandshake)
	require.Len(t, hs, 2, "one discovery (listing and call share it), one execute")
	assert.Equal(t, "discovery", hs[0].Details["phase"])
	assert.Equal(t, "", hs[0].Details["tool"])
	assert.Equal(t, "execute", hs[1].Details["phase"])
}

// The caller's --timeout (tools.WithCallTimeout) bounds the execute.
func TestCallerTimeout(t *testing.T) {
	f := adaptertest.New(t, nil)
	install(t, f, "slow", noGrants, "")
	ctx := tools.WithCallTimeout(context.Background(), time.Second)
	_, res, err := f.Catalogue().Call(ctx, "plugin_rt_echo", map[string]any{"text": "x"})
	require.NoError(t, err)
	assert.Equal(t, reason.Timeout, res.Reason)
	assert.Contains(t, res.Message, "within 1s")
}
