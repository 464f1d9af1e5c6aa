// SPDX-License-Identifier: MIT

package mcp

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/reason"
)

// exitCode is the fledge CLI's exit status in err (-1: it did not exit).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// recordPackage packs the npm package of testdata/recordmcp: a dependency-free MCP server
// whose install script rewrites (or plants) fledge-npm.json at the top of the plugin dir it
// runs in, asking for the whole network, INJECTED=pwned-by-install-script and
// --injected-arg.
func recordPackage(t *testing.T, c *fledgeCLI) string {
	t.Helper()
	src := filepath.Join(c.f.base, "record-mcp")
	require.NoError(t, os.MkdirAll(src, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "package.json"), []byte(`{"name":"record-mcp","version":"1.0.0",
  "bin":{"record-mcp":"server.js"},"scripts":{"postinstall":"node ./rewrite.js"}}`), 0o644))
	for _, n := range []string{"server.js", "rewrite.js"} {
		copyFile(t, filepath.Join("testdata", "recordmcp", n), filepath.Join(src, n), 0o644)
	}
	return npmPack(t, c, src, "record-mcp-1.0.0.tgz")
}

// listedJSON is `fledge plugins list --json`'s entry for name.
func listedJSON(t *testing.T, c *fledgeCLI, dir, name string) map[string]any {
	t.Helper()
	out, errOut, err := c.run(dir, "plugins", "list", "--json")
	require.NoError(t, err, errOut)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	for _, en := range list {
		if en["name"] == name {
			return en
		}
	}
	t.Fatalf("%s is not listed: %s", name, out)
	return nil
}

// An npm package's install script rewrites the file in which fledge remembered how the
// user asked for the plugin, asking for the whole network, an environment variable and a
// server argument. The next `plugins update --yes` fetches the package the way the user
// asked, not the way the script wrote: no grant beyond the user's, no variable, no
// argument (what the user sees: plugins list, the server's own words in the tool listing,
// the installed plugin.toml and wrapper, the audit log's grant records).
func TestAttackNPMInstallScriptRewritesInstallRecord(t *testing.T) {
	npmInstall(t, pkgSDK) // npm present and working, or a skip that says why
	fledge := buildFledge(t)
	f := newFixture(t, nil)
	c := &fledgeCLI{t: t, f: f, fledge: fledge}
	tgz := recordPackage(t, c)

	out, errOut, err := c.run(f.project, "--ni", "plugins", "install", "npm:record-mcp", "--version", "file:"+tgz,
		"--filesystem", "none", "--yes")
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
	assert.Contains(t, out, "env=none args=none", "the server started as the user asked")
	dir := filepath.Join(f.configDir, "plugins", "record-mcp")
	ran, _ := os.ReadFile(filepath.Join(dir, "node_modules", "record-mcp", "script-ran.txt"))
	require.Equal(t, "yes", string(ran), "the install script ran (confined, in the staged plugin dir)")
	assert.Equal(t, "none", listedJSON(t, c, f.project, "record-mcp")["granted"].(map[string]any)["filesystem"])

	out, errOut, err = c.run(f.project, "--ni", "plugins", "update", "record-mcp", "--yes")
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
	assert.Contains(t, errOut, "asks for no more than before; keeping its grants: none")
	assert.Contains(t, out, "env=none args=none", "the updated server starts as the user asked")
	assert.NotContains(t, out+errOut, "pwned-by-install-script")

	granted := listedJSON(t, c, f.project, "record-mcp")["granted"].(map[string]any)
	assert.NotEqual(t, true, granted["network"], "update granted the network the script asked for: %v", granted)
	man, err := os.ReadFile(filepath.Join(dir, "plugin.toml"))
	require.NoError(t, err)
	assert.NotContains(t, string(man), "network = true", "the updated manifest declares the network the script asked for")
	wrapper, err := os.ReadFile(filepath.Join(dir, "bin", "server"))
	require.NoError(t, err)
	assert.NotContains(t, string(wrapper), "INJECTED")
	assert.NotContains(t, string(wrapper), "--injected-arg")
	for _, r := range f.records(audit.EventGrant) {
		assert.NotContains(t, r.Details[audit.DetailCapabilities], "network", "a grant record names the network")
	}
}

// installRecordMCP installs testdata/recordmcp from tgz with filesystem none, as the user
// asked: no network, no environment, no arguments.
func installRecordMCP(t *testing.T, c *fledgeCLI, tgz string) {
	t.Helper()
	out, errOut, err := c.run(c.f.project, "--ni", "plugins", "install", "npm:record-mcp", "--version", "file:"+tgz,
		"--filesystem", "none", "--yes")
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
}

// assertAsInstalled: plugins.toml still holds what the user asked for, and the installed
// wrapper and manifest are untouched.
func assertAsInstalled(t *testing.T, c *fledgeCLI, wrapper, manifest []byte) {
	t.Helper()
	dir := filepath.Join(c.f.configDir, "plugins", "record-mcp")
	granted := listedJSON(t, c, c.f.project, "record-mcp")["granted"].(map[string]any)
	assert.NotEqual(t, true, granted["network"], "%v", granted)
	w, err := os.ReadFile(filepath.Join(dir, "bin", "server"))
	require.NoError(t, err)
	assert.Equal(t, string(wrapper), string(w))
	m, err := os.ReadFile(filepath.Join(dir, "plugin.toml"))
	require.NoError(t, err)
	assert.Equal(t, string(manifest), string(m))
}

// An install by an older fledge kept its record in the plugin dir, where the install
// script rewrote it (simulated: the record leaves plugins.toml, the script's file stays).
// The update takes the capabilities from the approved manifest, never from that file,
// shows the rest for the user to confirm once, and under --yes or --ni refuses: nothing
// changes, and the refusal is on record.
func TestNPMUpdateLegacyRecordNotTrusted(t *testing.T) {
	npmInstall(t, pkgSDK)
	fledge := buildFledge(t)
	f := newFixture(t, nil)
	c := &fledgeCLI{t: t, f: f, fledge: fledge}
	tgz := recordPackage(t, c)
	installRecordMCP(t, c, tgz)
	dir := filepath.Join(f.configDir, "plugins", "record-mcp")
	wrapper, err := os.ReadFile(filepath.Join(dir, "bin", "server"))
	require.NoError(t, err)
	manifest, err := os.ReadFile(filepath.Join(dir, "plugin.toml"))
	require.NoError(t, err)
	planted, err := os.ReadFile(filepath.Join(dir, "fledge-npm.json"))
	require.NoError(t, err, "the install script planted its record")
	// The older fledge's file held the version too; the script kept it and added its own.
	var legacy map[string]any
	require.NoError(t, json.Unmarshal(planted, &legacy))
	require.Equal(t, true, legacy["network"])
	legacy["version"] = "file:" + tgz
	planted, _ = json.Marshal(legacy)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "fledge-npm.json"), planted, 0o644))

	reg, err := plugin.LoadRegistry(f.configDir)
	require.NoError(t, err)
	require.NotNil(t, reg.Find("record-mcp").NPM, "the record is in plugins.toml")
	reg.Find("record-mcp").NPM = nil
	require.NoError(t, reg.Save())

	for _, args := range [][]string{{"--ni", "plugins", "update", "record-mcp", "--yes"}, {"--ni", "plugins", "update", "record-mcp"}} {
		out, errOut, err := c.run(f.project, args...)
		require.Error(t, err, "stdout: %s\nstderr: %s", out, errOut)
		assert.Equal(t, 126, exitCode(err), errOut)
		assert.Contains(t, errOut, "kept by an older fledge inside its plugin dir")
		assert.Contains(t, errOut, "the update needs your approval")
		assert.Contains(t, errOut, "network: false", "the capabilities are the approved manifest's")
		assert.Contains(t, errOut, `"INJECTED=pwned-by-install-script"`, "the file's environment is shown for review")
		assert.NotContains(t, out, "installed record-mcp")
		assertAsInstalled(t, c, wrapper, manifest)
	}
	var refused int
	for _, r := range f.records(audit.EventInstall) {
		if r.Decision == audit.Deny && r.Reason == string(reason.NonInteractive) {
			refused++
		}
	}
	assert.Equal(t, 2, refused, "both refusals are on record")
}

// A new version of a package (here: the same tarball path packed again) whose server.json
// adds an environment variable would start the server with something the user never gave:
// `plugins update --yes` refuses and says what; nothing changes.
func TestNPMUpdateServerJSONChangeNeedsApproval(t *testing.T) {
	npmInstall(t, pkgSDK)
	fledge := buildFledge(t)
	f := newFixture(t, nil)
	c := &fledgeCLI{t: t, f: f, fledge: fledge}
	tgz := recordPackage(t, c)
	installRecordMCP(t, c, tgz)
	dir := filepath.Join(f.configDir, "plugins", "record-mcp")
	wrapper, err := os.ReadFile(filepath.Join(dir, "bin", "server"))
	require.NoError(t, err)
	manifest, err := os.ReadFile(filepath.Join(dir, "plugin.toml"))
	require.NoError(t, err)

	src := filepath.Join(f.base, "record-mcp")
	require.NoError(t, os.WriteFile(filepath.Join(src, "server.json"), []byte(`{"name":"io.example/record-mcp","version":"1.0.0",
  "packages":[{"registryType":"npm","identifier":"record-mcp",
    "environmentVariables":[{"name":"INJECTED","default":"from-server-json"}]}]}`), 0o644))
	require.Equal(t, tgz, npmPack(t, c, src, "record-mcp-1.0.0.tgz"))

	out, errOut, err := c.run(f.project, "--ni", "plugins", "update", "record-mcp", "--yes")
	require.Error(t, err, "stdout: %s\nstderr: %s", out, errOut)
	assert.Equal(t, 126, exitCode(err), errOut)
	assert.Contains(t, errOut, "would run its server differently from how you asked for it")
	assert.Contains(t, errOut, `environment: "INJECTED=from-server-json" (was none)`)
	assert.Contains(t, errOut, "the update needs your approval")
	assertAsInstalled(t, c, wrapper, manifest)
}
