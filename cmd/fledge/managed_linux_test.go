// SPDX-License-Identifier: MIT

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// managedMachine runs the real fledge CLI on a machine whose /etc/fledge is a directory of
// the test's: each run is in a private mount namespace the test makes (unshare), where /etc
// is an overlay over the real one (its upper layer on a tmpfs of that namespace) and the
// test's directory is bind-mounted on /etc/fledge. Nothing reaches the real /etc, and
// nothing is left on the machine: the namespace and its mounts end with the run.
type managedMachine struct {
	t      *testing.T
	fledge string
	etc    testutil.EtcFledge
	policy string // what /etc/fledge is in the runs
	home   string
	work   string
	env    []string
}

func newManagedMachine(t *testing.T) *managedMachine {
	t.Helper()
	fledge, ferr := exec.LookPath("fledge") // testscript.Main put this test binary there as "fledge"
	require.NoError(t, ferr)
	root := t.TempDir()
	m := &managedMachine{t: t, fledge: fledge,
		policy: filepath.Join(root, "etc-fledge"), home: filepath.Join(root, "home"), work: filepath.Join(root, "work")}
	for _, d := range []string{m.policy, m.home, m.work} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	// The test's temp dirs are 0700 under a sticky /tmp; /etc/fledge itself is this dir.
	require.NoError(t, os.Chmod(m.policy, 0o755))
	m.etc = testutil.NewEtcFledge(t, m.policy)
	m.env = []string{
		"HOME=" + m.home,
		"FLEDGE_CONFIG_DIR=" + filepath.Join(m.home, ".config", "fledge"),
		"FLEDGE_AUDIT_LOG=" + filepath.Join(m.home, ".local", "state", "fledge", "audit.jsonl"),
		"PATH=" + filepath.Dir(fledge) + ":/usr/local/bin:/usr/bin:/bin",
		"LANG=C.UTF-8", "NO_COLOR=1",
	}
	// Overlay support is checked once, with the real setup.
	if _, stderr, code := m.run("doctor"); code != 0 && strings.Contains(stderr, "etc-fledge-setup:") {
		testutil.SkipUnlessSupported(t, false, "cannot make the private /etc for the managed policy: "+stderr)
	}
	return m
}

// write puts a managed policy file (relative to /etc/fledge), root's and 0644.
func (m *managedMachine) write(name, content string) string {
	m.t.Helper()
	p := filepath.Join(m.policy, name)
	require.NoError(m.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(m.t, os.WriteFile(p, []byte(content), 0o644))
	require.NoError(m.t, os.Chmod(p, 0o644))
	return "/etc/fledge/" + name
}

func (m *managedMachine) clear() {
	m.t.Helper()
	entries, err := os.ReadDir(m.policy)
	require.NoError(m.t, err)
	for _, e := range entries {
		require.NoError(m.t, os.RemoveAll(filepath.Join(m.policy, e.Name())))
	}
	require.NoError(m.t, os.Chmod(m.policy, 0o755))
	require.NoError(m.t, os.Chown(m.policy, 0, 0))
}

// run runs fledge with args under the private /etc/fledge; stdout, stderr, exit status.
func (m *managedMachine) run(args ...string) (string, string, int) {
	return m.runEnv(nil, args...)
}

func (m *managedMachine) runEnv(extra []string, args ...string) (string, string, int) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append(append(append([]string{}, m.etc.Prefix...), m.fledge), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = m.work
	cmd.Env = append(append(append([]string{}, m.env...), m.etc.Env...), extra...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(m.t, err)
	}
	return so.String(), se.String(), code
}

// records are the audit log's records (all of them, in order).
func (m *managedMachine) records() []map[string]any {
	m.t.Helper()
	data, err := os.ReadFile(filepath.Join(m.home, ".local", "state", "fledge", "audit.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(m.t, err)
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r map[string]any
		require.NoError(m.t, json.Unmarshal([]byte(l), &r), l)
		out = append(out, r)
	}
	return out
}

// plugin writes a fledge-v1 plugin dir with these [capabilities] lines.
func (m *managedMachine) plugin(name, caps string) string {
	m.t.Helper()
	dir := filepath.Join(m.work, name)
	require.NoError(m.t, os.MkdirAll(dir, 0o755))
	manifest := "[plugin]\nname = \"" + name + "\"\nversion = \"1.0.0\"\nprotocol = \"fledge-v1\"\n\n[[commands]]\nname = \"" + name +
		"\"\nbinary = \"run.sh\"\n\n[capabilities]\n" + caps + "\n"
	require.NoError(m.t, os.WriteFile(filepath.Join(dir, "plugin.toml"), []byte(manifest), 0o644))
	require.NoError(m.t, os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\nread -r line\n"), 0o755))
	return dir
}

// A managed policy is read only when root alone can write it and every directory above it;
// anything else stops every command, naming the file and why, never a file skipped. No
// variable or flag points fledge at another policy.
func TestManagedPolicyTrust(t *testing.T) {
	m := newManagedMachine(t)
	out, _, code := m.run("doctor")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "managed policy:   none (/etc/fledge)")

	file := m.write("managed.toml", "[limits]\nexec = false\n")
	out, errOut, code := m.run("doctor")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `managed policy:   sha256 [0-9a-f]{64}`, out)
	assert.Contains(t, out, file+" (sha256 ")

	host := filepath.Join(m.policy, "managed.toml")
	for _, c := range []struct {
		name  string
		setup func()
		why   string
	}{
		{"file writable by others", func() { require.NoError(t, os.Chmod(host, 0o666)) }, "managed policy /etc/fledge/managed.toml refused: writable by others than root (mode 0666)"},
		{"file writable by its group", func() { require.NoError(t, os.Chmod(host, 0o664)) }, "writable by others than root (mode 0664)"},
		{"file owned by a user", func() { require.NoError(t, os.Chown(host, 1000, 1000)) }, "managed policy /etc/fledge/managed.toml refused: owned by uid 1000, not root"},
		{"directory writable by others", func() { require.NoError(t, os.Chmod(m.policy, 0o777)) }, "its directory /etc/fledge is writable by others than root (mode 0777)"},
		{"directory owned by a user", func() { require.NoError(t, os.Chown(m.policy, 1000, 1000)) }, "its directory /etc/fledge is owned by uid 1000"},
		{"a drop-in writable by others", func() {
			p := m.write("managed.d/50-team.toml", "[limits]\nexec = false\n")
			require.NoError(t, os.Chmod(filepath.Join(m.policy, "managed.d", "50-team.toml"), 0o646))
			_ = p
		}, "managed policy /etc/fledge/managed.d/50-team.toml refused: writable by others than root"},
		{"a drop-in dir owned by a user", func() {
			m.write("managed.d/50-team.toml", "[limits]\nexec = false\n")
			require.NoError(t, os.Chown(filepath.Join(m.policy, "managed.d"), 1000, 1000))
		}, "managed policy /etc/fledge/managed.d refused: owned by uid 1000"},
		{"a symlink to a user's file", func() {
			user := filepath.Join(m.work, "mine.toml")
			require.NoError(t, os.WriteFile(user, []byte("[limits]\nexec = true\n"), 0o644))
			require.NoError(t, os.Chown(user, 1000, 1000))
			require.NoError(t, os.Remove(host))
			require.NoError(t, os.Symlink(user, host))
		}, "owned by uid 1000, not root"},
		{"an unknown key", func() { m.write("managed.toml", "[limits]\nexec = false\nnetwrok = false\n") }, "/etc/fledge/managed.toml:3: [limits] netwrok: unknown key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m.t = t
			m.clear()
			m.write("managed.toml", "[limits]\nexec = false\n")
			c.setup()
			for _, args := range [][]string{{"doctor"}, {"tools", "list"}, {"--ni", "plugins", "install", m.plugin("p", "store = true"), "--yes"}} {
				_, errOut, code := m.run(args...)
				assert.Equal(t, 126, code, "%v: %s", args, errOut)
				assert.Contains(t, errOut, c.why, "%v", args)
			}
		})
	}
	m.t = t

	// Nothing the user sets points fledge elsewhere: another config dir, XDG dirs, or
	// variables that look like they might.
	m.clear()
	m.write("managed.toml", "[sources]\nallow = [\"npm:@acme/*\"]\n")
	elsewhere := filepath.Join(m.work, "elsewhere")
	require.NoError(t, os.MkdirAll(elsewhere, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(elsewhere, "managed.toml"), []byte("[sources]\nallow = [\"dir\"]\n"), 0o644))
	_, errOut, code = m.runEnv([]string{"FLEDGE_CONFIG_DIR=" + elsewhere, "XDG_CONFIG_HOME=" + elsewhere, "XDG_CONFIG_DIRS=" + elsewhere,
		"FLEDGE_MANAGED_DIR=" + elsewhere, "FLEDGE_MANAGED_POLICY=" + filepath.Join(elsewhere, "managed.toml")},
		"--ni", "plugins", "install", m.plugin("q", "store = true"), "--yes")
	assert.Equal(t, 126, code, errOut)
	assert.Contains(t, errOut, "source dir ("+"/etc/fledge/managed.toml: [sources] allow = [\"npm:@acme/*\"])")
}

// [sources] allow: a source it does not name is refused before anything is fetched, on
// record, naming the file and the rule.
func TestManagedPolicySources(t *testing.T) {
	m := newManagedMachine(t)
	file := m.write("managed.toml", "[sources]\nallow = [\"npm:@modelcontextprotocol/*\", \"git:https://github.com/acme/*\"]\n")
	rule := file + `: [sources] allow = ["npm:@modelcontextprotocol/*", "git:https://github.com/acme/*"]`
	for _, c := range []struct{ source, item string }{
		{m.plugin("local", "store = true"), "source dir"},
		{"npm:@evil/server@1.0.0", "source npm:@evil/server"},
		{"npm:modelcontextprotocol-server", "source npm:modelcontextprotocol-server"},
		{"https://github.com/evil/plugin.git", "source git:https://github.com/evil/plugin.git"},
		{"pypi:mcp-server-fetch", "source pypi:mcp-server-fetch"},
		{"oci:ghcr.io/evil/server:1", "source oci:ghcr.io/evil/server:1"},
	} {
		_, errOut, code := m.run("--ni", "plugins", "install", c.source, "--yes")
		assert.Equal(t, 126, code, "%s: %s", c.source, errOut)
		assert.Contains(t, errOut, c.item+" ("+rule+")", c.source)
	}
	var denies int
	for _, r := range m.records() {
		if r["event"] == "install" && r["decision"] == "deny" {
			denies++
			assert.Equal(t, "capability_not_allowed", r["reason"])
		}
	}
	assert.Equal(t, 6, denies, "every refused source is on record")
	out, _, _ := m.run("plugins", "list")
	assert.NotContains(t, out, "local")

	// "dir" admits local directories.
	m.write("managed.toml", "[sources]\nallow = [\"dir\"]\n")
	out, errOut, code := m.run("--ni", "plugins", "install", filepath.Join(m.work, "local"), "--yes")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "installed local 1.0.0")
}

// Each ceiling of [limits]: an install over it is refused (whatever --yes or --grant say),
// a grant over it too, and what is within it is installed; each refusal names the file and
// the rule and is on record.
func TestManagedPolicyCeilings(t *testing.T) {
	m := newManagedMachine(t)
	file := m.write("managed.toml", `[limits]
exec = false
filesystem = "plugin"
network = ["*.acme.internal:443"]
secrets = ["GITHUB_TOKEN"]
`)
	for _, c := range []struct {
		name, caps, grant, want string
	}{
		{"exec", "exec = true\nfilesystem = \"none\"", "", `exec (` + file + `: [limits] exec = false)`},
		{"filesystem", "filesystem = \"project\"", "", `filesystem=project (` + file + `: [limits] filesystem = "plugin")`},
		{"network", "filesystem = \"none\"\nnetwork = [\"api.example.org:443\"]", "", `network=api.example.org:443 (` + file + `: [limits] network = ["*.acme.internal:443"])`},
		{"wholenet", "filesystem = \"none\"\nnetwork = true", "", `network (` + file + `: [limits] network = ["*.acme.internal:443"])`},
		{"secret", "filesystem = \"none\"\nsecrets = [\"AWS_SECRET_ACCESS_KEY\"]", "", `secret=AWS_SECRET_ACCESS_KEY (` + file + `: [limits] secrets = ["GITHUB_TOKEN"])`},
		{"grantflag", "exec = true\nfilesystem = \"none\"", "exec", `exec (` + file + `: [limits] exec = false)`},
	} {
		args := []string{"--ni", "plugins", "install", m.plugin(c.name, c.caps)}
		if c.grant != "" {
			args = append(args, "--grant", c.grant)
		} else {
			args = append(args, "--yes")
		}
		_, errOut, code := m.run(args...)
		assert.Equal(t, 126, code, "%s: %s", c.name, errOut)
		assert.Contains(t, errOut, "plugin "+c.name+": over the managed policy's ceiling: "+c.want, c.name)
	}
	out, _, _ := m.run("plugins", "list")
	assert.Contains(t, out, "no plugins installed", "nothing over the ceiling was installed")

	// Within the ceiling: installed, and a grant over it afterwards refused.
	out, errOut, code := m.run("--ni", "plugins", "install", m.plugin("ok", "filesystem = \"plugin\"\nexec = true\nnetwork = [\"git.acme.internal:443\", \"api.example.org:443\"]"),
		"--grant", "filesystem=plugin,network=git.acme.internal:443")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "installed ok 1.0.0")
	for _, item := range []string{"exec", "network=api.example.org:443", "filesystem=project"} {
		_, errOut, code = m.run("plugins", "grant", "ok", item)
		assert.Equal(t, 126, code, "%s: %s", item, errOut)
		assert.Contains(t, errOut, "over the managed policy's ceiling", item)
	}
	_, errOut, code = m.run("plugins", "grant", "ok", "read="+m.work)
	assert.NotEqual(t, 0, code, "a read grant beyond the filesystem level is over a filesystem ceiling: %s", errOut)
	var grantDenies int
	for _, r := range m.records() {
		if r["event"] == "grant" && r["decision"] == "deny" && r["reason"] == "capability_not_allowed" {
			grantDenies++
		}
	}
	assert.GreaterOrEqual(t, grantDenies, 3, "each refused grant is on record")

	// A plugin without a protocol runs as a whole program: held to the exec ceiling.
	legacy := filepath.Join(m.work, "legacy")
	require.NoError(t, os.MkdirAll(legacy, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(legacy, "plugin.toml"), []byte("[plugin]\nname = \"legacy\"\nversion = \"1.0.0\"\n\n[[commands]]\nname = \"legacy\"\nbinary = \"run.sh\"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(legacy, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	_, errOut, code = m.run("--ni", "plugins", "install", legacy, "--yes")
	assert.Equal(t, 126, code, errOut)
	assert.Contains(t, errOut, "exec (a plugin without a protocol runs as a whole program")
}

// A user config trying every loosening the managed policy forbids: each is refused, naming
// the setting and the rule, and no command runs under it.
func TestManagedPolicyUserConfigCannotLoosen(t *testing.T) {
	m := newManagedMachine(t)
	file := m.write("managed.toml", `[limits]
exec = true
filesystem = "project"
network = ["api.github.com:443"]
network_override = false
unix_sockets = false
[require]
strict = true
witness = "journald"
`)
	cfgDir := filepath.Join(m.home, ".config", "fledge")
	require.NoError(t, os.MkdirAll(cfgDir, 0o700))
	for _, c := range []struct{ cfg, want string }{
		{"[sandbox]\nnetwork = \"allow\"\n", `[sandbox] network = "allow" is not permitted (` + file + `: [limits] network_override = false)`},
		{"[sandbox]\nunix_sockets = \"allow\"\n", `[sandbox] unix_sockets = "allow" is not permitted (` + file + `: [limits] unix_sockets = false)`},
		{"[sandbox]\nread_write = [\"/opt\"]\n", `[sandbox] read_write (more places to write) is not permitted (` + file + `: [limits] filesystem = "project")`},
		{"[sandbox]\nread_only = [\"/opt\"]\n", `[sandbox] read_only (more places to read) is not permitted`},
		{"[sandbox]\nunprotect = [\".git/config\"]\n", `[sandbox] unprotect (protected paths opened) is not permitted`},
		{"[sandbox]\nlegacy = \"unconfined\"\n", `[sandbox] legacy = "unconfined" (runs legacy plugins outside every ceiling) is not permitted`},
		{"[sandbox]\nstrict = false\n", `[sandbox] strict = false is not permitted (` + file + `: [require] strict = true)`},
		{"[audit]\nwitness = \"exec:/bin/true\"\n", `[audit] witness = "exec:/bin/true" is not permitted (` + file + `: [require] witness = "journald")`},
	} {
		require.NoError(t, os.WriteFile(filepath.Join(cfgDir, "config.toml"), []byte(c.cfg), 0o600))
		for _, args := range [][]string{{"doctor"}, {"--ni", "plugins", "install", m.plugin("p", "store = true"), "--yes"}} {
			_, errOut, code := m.run(args...)
			assert.Equal(t, 126, code, "%q %v: %s", c.cfg, args, errOut)
			assert.Contains(t, errOut, c.want, "%q %v", c.cfg, args)
		}
	}
	// Narrowing is fine, and what the policy requires is in force.
	require.NoError(t, os.WriteFile(filepath.Join(cfgDir, "config.toml"), []byte("[sandbox]\nnetwork = \"deny\"\n"), 0o600))
	out, errOut, code := m.run("doctor", "--json")
	require.Equal(t, 0, code, errOut)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	assert.Equal(t, true, doc["strict"], "[require] strict = true")
	mp, _ := doc["managed_policy"].(map[string]any)
	require.NotNil(t, mp, out)
	assert.Len(t, mp["digest"], 64)
}

// A plugin installed before the ceiling was lowered: refused at run time, on record, the
// same way; plugins info shows which grant is over. Every session's first record carries
// the managed policy's digest.
func TestManagedPolicyLoweredCeilingRefusesInstalled(t *testing.T) {
	m := newManagedMachine(t)
	_, errOut, code := m.run("plugins", "new", "hello", "--lang", "bash")
	require.Equal(t, 0, code, errOut)
	_, errOut, code = m.run("--ni", "plugins", "install", filepath.Join(m.work, "hello"), "--yes")
	require.Equal(t, 0, code, errOut)
	out, errOut, code := m.run("--ni", "hello")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "Hello, world!")

	file := m.write("managed.toml", "[limits]\nfilesystem = \"plugin\"\n")
	m.write("managed.d/10-team.toml", "[limits]\nexec = false\n")
	out, errOut, code = m.run("--ni", "hello")
	assert.Equal(t, 126, code, "out: %s\nerr: %s", out, errOut)
	assert.NotContains(t, out, "Hello, world!")
	assert.Contains(t, errOut, `plugin hello: over the managed policy's ceiling: filesystem=project (`+file+`: [limits] filesystem = "plugin")`)

	recs := m.records()
	last := recs[len(recs)-1]
	assert.Equal(t, "plugin_start", last["event"])
	assert.Equal(t, "deny", last["decision"])
	assert.Equal(t, "capability_not_allowed", last["reason"])
	details, _ := last["details"].(map[string]any)
	assert.Equal(t, "over_managed_ceiling", details["refusal"])
	out, errOut, code = m.run("doctor", "--json")
	require.Equal(t, 0, code, errOut)
	var doc struct {
		Managed struct {
			Digest string `json:"digest"`
			Files  []struct {
				Path string `json:"path"`
			} `json:"files"`
		} `json:"managed_policy"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Len(t, doc.Managed.Files, 2)
	assert.Equal(t, "/etc/fledge/managed.toml", doc.Managed.Files[0].Path)
	assert.Equal(t, "/etc/fledge/managed.d/10-team.toml", doc.Managed.Files[1].Path)
	assert.Equal(t, doc.Managed.Digest, last["managed_policy"], "the refusal's session carries the digest")

	out, errOut, code = m.run("plugins", "info", "hello")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `OVER THE MANAGED CEILING: filesystem=project (`+file+`: [limits] filesystem = "plugin")`)

	// Narrowed to the ceiling, it runs again; its session's first record carries the digest,
	// the records after it do not.
	_, errOut, code = m.run("plugins", "revoke", "hello", "filesystem")
	require.Equal(t, 0, code, errOut)
	out, errOut, code = m.run("--ni", "hello")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "Hello, world!")
	seen := map[string]bool{}
	var firsts int
	for _, r := range m.records() {
		s, _ := r["session"].(string)
		if s == "" || r["seq"].(float64) <= last["seq"].(float64) {
			if s != "" {
				seen[s] = true
			}
			continue
		}
		if !seen[s] {
			seen[s] = true
			firsts++
			assert.Equal(t, doc.Managed.Digest, r["managed_policy"], "first record of session %s: %v", s, r)
		} else {
			assert.Nil(t, r["managed_policy"], "later records of a session do not repeat it")
		}
	}
	assert.GreaterOrEqual(t, firsts, 2, "the revoke and the run are sessions")
}

// A fledge.lock (one that came with a cloned repository, or one written before the policy)
// cannot take `plugins sync` over the managed ceiling: a plugin whose locked grants or
// source the policy forbids is refused before anything is fetched or installed, on record.
func TestManagedPolicySyncHeldToCeiling(t *testing.T) {
	m := newManagedMachine(t)
	require.NoError(t, os.MkdirAll(filepath.Join(m.work, ".git"), 0o755))
	m.plugin("ex", "exec = true\nfilesystem = \"none\"")
	m.plugin("st", "store = true")
	for _, name := range []string{"ex", "st"} {
		_, errOut, code := m.run("--ni", "plugins", "install", filepath.Join(m.work, name), "--yes")
		require.Equal(t, 0, code, errOut)
	}
	_, errOut, code := m.run("plugins", "lock")
	require.Equal(t, 0, code, errOut)
	for _, name := range []string{"ex", "st"} {
		_, errOut, code = m.run("plugins", "remove", name)
		require.Equal(t, 0, code, errOut)
	}

	m.write("managed.toml", "[sources]\nallow = [\"npm:*\"]\n")
	_, errOut, code = m.run("--ni", "plugins", "sync")
	assert.Equal(t, 126, code, errOut)
	assert.Contains(t, errOut, "sync ex: over the managed policy's ceiling: source dir (/etc/fledge/managed.toml")
	assert.Contains(t, errOut, "sync st: over the managed policy's ceiling: source dir (/etc/fledge/managed.toml")
	out, _, _ := m.run("plugins", "list")
	assert.Contains(t, out, "no plugins installed", "sync installed nothing from a source the policy forbids")

	// Local dirs allowed, exec not: the exec plugin is refused, the other synced.
	file := m.write("managed.toml", "[sources]\nallow = [\"dir\"]\n[limits]\nexec = false\n")
	_, errOut, code = m.run("--ni", "plugins", "sync")
	assert.Equal(t, 126, code, errOut)
	assert.Contains(t, errOut, "sync ex: plugin ex: over the managed policy's ceiling: exec ("+file+": [limits] exec = false)")
	out, _, _ = m.run("plugins", "list")
	assert.NotContains(t, out, "ex ", "sync installed nothing over the ceiling")
	assert.Contains(t, out, "st ")
	var denies int
	for _, r := range m.records() {
		d, _ := r["details"].(map[string]any)
		if r["event"] == "install" && r["decision"] == "deny" && d["sync"] == true {
			denies++
			assert.Equal(t, "capability_not_allowed", r["reason"])
		}
	}
	assert.Equal(t, 3, denies, "each refused lock entry is on record")
}

// A managed [tools] rule names a package's plugin by its default name; installing the
// package under another name (--name) does not take its tools out of the rule.
func TestManagedToolRulesFollowRenamedPackage(t *testing.T) {
	if _, err := exec.LookPath("npm"); err != nil {
		testutil.SkipUnlessSupported(t, false, "npm is not installed")
	}
	m := newManagedMachine(t)
	require.NoError(t, os.MkdirAll(filepath.Join(m.work, ".git"), 0o755))
	file := m.write("managed.toml", "[tools]\ndeny = [\"server-filesystem:write_*\"]\n")
	_, errOut, code := m.run("--ni", "plugins", "install", "npm:@modelcontextprotocol/server-filesystem", "--version", "2026.8.31", "--name", "fs", "--yes")
	if code != 0 && strings.Contains(errOut, "registry") {
		testutil.SkipUnlessSupported(t, false, "npm cannot reach the registry: "+errOut)
	}
	require.Equal(t, 0, code, errOut)
	out, errOut, code := m.run("tools", "list")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "read_text_file", "the server's other tools are listed")
	assert.NotContains(t, out, "write_file", "a managed deny is not escaped by renaming the plugin")
	_, errOut, code = m.run("tools", "call", "plugin_fs_write_file", "path="+filepath.Join(m.work, "x"), "content=x")
	assert.Equal(t, 115, code, errOut)
	assert.Contains(t, errOut, "denied by the managed policy ("+file)
	assert.NoFileExists(t, filepath.Join(m.work, "x"))
}
