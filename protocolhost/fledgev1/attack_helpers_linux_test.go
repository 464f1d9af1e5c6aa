// SPDX-License-Identifier: MIT

package fledgev1

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Shared by the attack tests: a fixture with secrets planted where an attacker would look,
// unique markers, a process-table scan and an outside canary process.

// uniq returns a random hex string; markers built from it identify one test's processes and
// files even with other test runs on the same machine.
func uniq(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// sleepMarker is a sleep duration unique to one test: `sleep <marker>` puts the marker in the
// command line of the sleeper itself, which survivors() finds in /proc.
func sleepMarker(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, err := rand.Read(b)
	require.NoError(t, err)
	n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return fmt.Sprintf("777.%010d", n)
}

// notSelf turns a marker into a grep pattern that matches the marker but not its own
// command line ("777.12[3]" matches "777.123"), for scans run inside the sandbox.
func notSelf(m string) string { return m[:len(m)-1] + "[" + m[len(m)-1:] + "]" }

// spell writes marker m for a shell command line without m appearing in it literally
// ("777.12""34"): the plugin carries its commands in its own argv, and only the processes a
// command starts may match a scan.
func spell(m string) string { return `"` + m[:len(m)-2] + `""` + m[len(m)-2:] + `"` }

// survivors lists live processes whose command line contains m.
func survivors(m string) []int { return testutil.ProcessesMatching(m) }

// secrets are planted where a plugin must never reach: keys in the fake home, the fledge
// config dir, another installed plugin's state. Each value is unique to the test.
type secrets struct {
	ssh, aws, toml, config, other string // the secret strings
	sshPath, awsPath, tomlPath    string
	configPath, otherState        string
	tomlBytes                     []byte
}

func (s secrets) all() []string { return []string{s.ssh, s.aws, s.toml, s.config, s.other} }

// assertNoLeak fails when any planted secret appears in text.
func (s secrets) assertNoLeak(t *testing.T, where, text string) {
	t.Helper()
	for _, sec := range s.all() {
		assert.NotContains(t, text, sec, "%s leaked a planted secret", where)
	}
}

func plantSecrets(t *testing.T, f *fixture) secrets {
	t.Helper()
	id := uniq(t)
	s := secrets{
		ssh:        "SSH-PRIVATE-" + id,
		aws:        "AWS-SECRET-" + id,
		toml:       "TOML-DIGEST-" + id,
		config:     "CONFIG-SECRET-" + id,
		other:      "OTHER-PLUGIN-SECRET-" + id,
		sshPath:    filepath.Join(f.home, ".ssh", "id_rsa"),
		awsPath:    filepath.Join(f.home, ".aws", "credentials"),
		tomlPath:   filepath.Join(f.configDir, "plugins.toml"),
		configPath: filepath.Join(f.configDir, "config.toml"),
		otherState: filepath.Join(f.configDir, "plugins", "other", "state.json"),
	}
	s.tomlBytes = []byte("# fledge registry\n[[plugin]]\nname = \"tp\"\nmanifest_sha256 = \"" + s.toml + "\"\n[plugin.granted]\nexec = false\n")
	files := map[string][]byte{
		s.sshPath:    []byte("-----BEGIN OPENSSH PRIVATE KEY-----\n" + s.ssh + "\n-----END OPENSSH PRIVATE KEY-----\n"),
		s.awsPath:    []byte("[default]\naws_secret_access_key = " + s.aws + "\n"),
		s.tomlPath:   s.tomlBytes,
		s.configPath: []byte("# " + s.config + "\n[sandbox]\n"),
		s.otherState: []byte(`{"token":"` + s.other + `"}`),
		filepath.Join(f.configDir, "plugins", "other", "plugin.toml"): []byte("[plugin]\nname = \"other\"\n"),
	}
	for p, b := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, b, 0o600))
	}
	return s
}

// setEnviron replaces the environment the fixture's plugin and execs are built from, with
// an extra policy allow-list, the way cmd/fledge builds them from os.Environ().
func (f *fixture) setEnviron(environ, allow []string) {
	f.opts.PluginSpec.Env = policy.ChildEnv(environ, allow, map[string]string{"FLEDGE_PLUGIN": "tp"})
	f.opts.ExecSpec.Env = policy.ChildEnv(environ, allow, nil)
	f.opts.MetadataEnv = policy.MetadataEnv(environ, allow)
}

// startCanary starts a process outside any sandbox that a kill escaping confinement would
// reach; alive reports whether it still runs (Wait reaps it the moment it dies, so a kill
// cannot hide behind a zombie).
func startCanary(t *testing.T) (pid int, alive func() bool) {
	t.Helper()
	c := exec.Command("sleep", "1000")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, c.Start())
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	t.Cleanup(func() { _ = c.Process.Kill(); <-done })
	return c.Process.Pid, func() bool {
		select {
		case <-done:
			return false
		default:
			return true
		}
	}
}

// execValue is the value of an exec reply.
func (f *fixture) execValue(rep scriptReport, id string) map[string]any {
	f.t.Helper()
	r := f.reply(rep, id)
	require.Equal(f.t, "response", r["type"], "reply %s: %v", id, r)
	v, ok := r["value"].(map[string]any)
	require.True(f.t, ok, "reply %s has no exec result: %v", id, r)
	return v
}

// outcomeFor finds the exec_outcome record of a command (commands are unique per test).
func (f *fixture) outcomeFor(command string) *audit.Record {
	f.t.Helper()
	for _, r := range f.findRecords(audit.EventExecOutcome) {
		if r.Details["command"] == command {
			return r
		}
	}
	f.t.Fatalf("no exec_outcome record for %q", command)
	return nil
}

// decisionFor finds the exec_decision record of a command.
func (f *fixture) decisionFor(command string) *audit.Record {
	f.t.Helper()
	for _, r := range f.findRecords(audit.EventExecDecision) {
		if r.Details["command"] == command {
			return r
		}
	}
	f.t.Fatalf("no exec_decision record for %q", command)
	return nil
}

// num reads a JSON number from a decoded map (audit details, replies).
func num(v any) float64 {
	switch n := v.(type) {
	case float64:
		return n
	case int:
		return float64(n)
	case int64:
		return float64(n)
	}
	f, _ := strconv.ParseFloat(strings.TrimSpace(fmt.Sprint(v)), 64)
	return f
}

// fileUnchanged asserts path still holds exactly want.
func fileUnchanged(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "%s was modified", path)
}
