package mcp

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
)

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
