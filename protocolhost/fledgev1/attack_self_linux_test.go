// SPDX-License-Identifier: MIT

package fledgev1

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/protocol"
	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The plugin process's own attacks: the plugin process itself (attack_self.py, attack_self.sh) goes for
// what it must not reach, with direct syscalls, no fledge request involved. Landlock, the
// scoped signals and the filtered environment must stop every attempt; the plugin reports
// what happened, and the test checks the disk, the listener, the canary and the audit log.
//
// What the audit log can show: plugin_start (grants, pid) and plugin_exit. A denial inside
// the kernel is invisible to fledge: Landlock (ABI >= 7) can log denials to the kernel audit
// subsystem, which is off on this machine (audit_enabled=0); collecting them would need
// audit enabled, a reader of the audit netlink socket (CAP_AUDIT_READ) or auditd, and
// matching the Landlock domain id of each sandboxed process to its session.

// loopbackListener accepts TCP connections on 127.0.0.1 and counts them.
func loopbackListener(t *testing.T) (port int, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	accepted = &atomic.Int64{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = c.SetDeadline(time.Now().Add(time.Second))
			_, _ = c.Read(make([]byte, 64))
			_ = c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, accepted
}

// selfReport is what an attack_self plugin printed: its init and each attempt's verdict.
type selfReport struct {
	init    protocol.Init
	results map[string]string // name -> "ok" | "denied"
	lines   map[string]string // name -> the whole RESULT line
	done    bool
}

func parseSelfReport(t *testing.T, stdout string) selfReport {
	t.Helper()
	r := selfReport{results: map[string]string{}, lines: map[string]string{}}
	for _, line := range strings.Split(stdout, "\n") {
		switch {
		case strings.HasPrefix(line, "INIT "):
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "INIT ")), &r.init), "init line: %s", line)
		case strings.HasPrefix(line, "RESULT "):
			verdict, _, _ := strings.Cut(strings.TrimPrefix(line, "RESULT "), " ")
			name, v, ok := strings.Cut(verdict, "=")
			require.True(t, ok, "bad result line %q", line)
			r.results[name], r.lines[name] = v, line
		case line == "DONE":
			r.done = true
		}
	}
	return r
}

func TestAttackPluginSelf(t *testing.T) {
	for _, tc := range []struct {
		plugin string
		grants protocol.Capabilities
	}{
		{"attack_self.py", protocol.Capabilities{Filesystem: "none"}},
		{"attack_self.sh", protocol.Capabilities{Filesystem: "none"}},
		{"attack_self.py", protocol.Capabilities{Filesystem: "project", Network: true}},
		{"attack_self.sh", protocol.Capabilities{Filesystem: "project", Network: true}},
	} {
		name := fmt.Sprintf("%s/fs=%s,network=%v", tc.plugin, tc.grants.Filesystem, tc.grants.Network)
		t.Run(name, func(t *testing.T) { attackPluginSelf(t, tc.plugin, tc.grants) })
	}
}

func attackPluginSelf(t *testing.T, plugin string, grants protocol.Capabilities) {
	f := newFixture(t, plugin, grants)
	s := plantSecrets(t, f)
	id := uniq(t)
	token := "ghp_" + strings.Repeat("Z", 10) + id
	f.setEnviron([]string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + f.home, "LANG=C.UTF-8",
		"GITHUB_TOKEN=" + token,
		"AWS_SECRET_ACCESS_KEY=aws-" + id,
		"MYVAR=https://user:pw-" + id + "@git.example.com/x.git", // allow-listed name, secret value
	}, []string{"MYVAR"})
	port, accepted := loopbackListener(t)
	canary, canaryAlive := startCanary(t)
	program := filepath.Join(f.pluginDir, plugin)
	programBytes, err := os.ReadFile(program)
	require.NoError(t, err)
	homeTarget := filepath.Join(f.home, "pwned-"+id)
	tmpTarget := filepath.Join(os.TempDir(), "fledge-pwned-"+id)
	t.Cleanup(func() { _ = os.Remove(tmpTarget) })
	args := []string{
		"home=" + f.home, "config=" + f.configDir, "other_state=" + s.otherState,
		"audit=" + f.auditPath, "host_pid=" + fmt.Sprint(os.Getpid()), "canary_pid=" + fmt.Sprint(canary),
		"home_target=" + homeTarget, "tmp_target=" + tmpTarget, "port=" + fmt.Sprint(port),
		"project=" + f.project,
	}
	if testutil.Contained() {
		args = append(args, "kill_all=1")
	}

	out := f.run(args...)
	assert.Equal(t, 0, out.ExitCode, "stderr:\n%s", f.stderr.String())
	rep := parseSelfReport(t, f.stdout.String())
	require.True(t, rep.done, "the plugin did not finish its attempts:\n%s\nstderr:\n%s", f.stdout.String(), f.stderr.String())

	// Every attempt on what the plugin was not given fails.
	project := grants.Filesystem == "project"
	want := map[string]string{
		"read_ssh": "denied", "read_aws": "denied", "list_config": "denied",
		"read_plugins_toml": "denied", "read_other_state": "denied", "read_audit": "denied",
		"read_host_environ": "denied", "write_home": "denied", "write_tmp": "denied",
		"append_plugins_toml": "denied", "rewrite_self": "denied", "plant_plugin_dir": "denied",
		"write_state": "denied", "env_token": "denied", "kill_host": "denied",
		"kill_canary": "denied", "write_project": "denied",
		"connect":      verdict(grants.Network),
		"list_project": verdict(project),
		"read_project": verdict(project),
		// What every plugin must still be able to do.
		"write_data": "ok", "write_tmpdir": "ok", "read_self": "ok", "tools": "ok",
	}
	for name, v := range want {
		assert.Equal(t, v, rep.results[name], "%s: %s", name, rep.lines[name])
	}
	assert.Contains(t, rep.lines["tools"], "two", "seq | grep | sed ran inside the plugin's sandbox")
	if grants.Network {
		assert.Positive(t, accepted.Load(), "with the network grant the plugin reaches the listener")
	} else {
		assert.Zero(t, accepted.Load(), "without the network grant nothing reached the listener")
	}

	// Nothing leaked: not the planted secrets, not the environment's credentials.
	all := f.stdout.String() + f.stderr.String()
	s.assertNoLeak(t, "the plugin's output", all)
	for _, secret := range []string{token, "aws-" + id, "pw-" + id} {
		assert.NotContains(t, all, secret)
	}

	// On disk: nothing written outside, the host's files and the plugin's code untouched.
	assert.NoFileExists(t, homeTarget)
	assert.NoFileExists(t, tmpTarget)
	assert.NoFileExists(t, filepath.Join(f.pluginDir, "planted"))
	assert.NoFileExists(t, filepath.Join(f.pluginDir, "state.json"))
	assert.NoFileExists(t, filepath.Join(f.project, "pwned"))
	assert.FileExists(t, filepath.Join(f.dataDir, "ok"), "the data dir is writable")
	fileUnchanged(t, program, programBytes)
	fileUnchanged(t, s.tomlPath, s.tomlBytes)
	fileUnchanged(t, s.otherState, []byte(`{"token":"`+s.other+`"}`))

	// The host and the bystander survived kill -9 of the host pid (and kill -9 -1 in the
	// containment harness): the test is still running, the canary still alive.
	assert.True(t, canaryAlive(), "the canary outside the sandbox was killed")

	// init told the plugin what it was actually given.
	require.NotNil(t, rep.init.Sandbox)
	assert.Equal(t, f.opts.Sandbox.Report().Confinement, rep.init.Sandbox.Confinement)
	assert.Equal(t, grants.Network, rep.init.Sandbox.Network)
	assert.Equal(t, grants.Filesystem, rep.init.Sandbox.Filesystem)
	assert.Equal(t, grants, rep.init.Capabilities)

	// The audit log: the start with the grants and the confinement, a clean exit, and no
	// exec/store records (the attacks were direct syscalls, refused by the kernel).
	starts := f.findRecords(audit.EventPluginStart)
	require.Len(t, starts, 1)
	assert.Equal(t, audit.Allow, starts[0].Decision)
	require.NotNil(t, starts[0].Sandbox)
	assert.Equal(t, rep.init.Sandbox.Confinement, starts[0].Sandbox.Mode)
	g, _ := json.Marshal(starts[0].Details["grants"])
	var recorded protocol.Capabilities
	require.NoError(t, json.Unmarshal(g, &recorded))
	assert.Equal(t, grants, recorded)
	profile, ok := starts[0].Details["profile"].(map[string]any)
	require.True(t, ok, "plugin_start records the confinement profile: %v", starts[0].Details)
	assert.Equal(t, map[bool]string{true: "all", false: "none"}[grants.Network], profile["network"])
	assert.Contains(t, profile["read_write"], f.dataDir)
	assert.NotContains(t, profile["read_write"], f.project, "the project is never writable by the plugin process")
	if project {
		assert.Contains(t, profile["read_only"], f.project)
	} else {
		assert.NotContains(t, profile["read_only"], f.project)
	}
	exits := f.findRecords(audit.EventPluginExit)
	require.Len(t, exits, 1)
	assert.EqualValues(t, 0, num(exits[0].Details[audit.DetailExitCode]))
	for _, r := range f.auditRecords() {
		assert.NotContains(t, []string{audit.EventExecDecision, audit.EventExecOutcome, audit.EventStore}, r.Event)
	}
}

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "denied"
}
