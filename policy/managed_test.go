// SPDX-License-Identifier: MIT

package policy

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const issueExample = `
[sources]
allow = ["npm:@modelcontextprotocol/*", "npm:@acme/*", "dir"]
[limits]
exec = true
filesystem = "project"
network = ["*.acme.internal:443", "api.github.com:443"]
network_override = false
secrets = ["GITHUB_TOKEN"]
unix_sockets = false
[require]
strict = true
witness = "journald"
export = "otlp"
[tools]
deny = ["server-filesystem:write_*", "*:delete_*"]
`

func parseManaged(t *testing.T, files ...string) *Managed {
	t.Helper()
	var in [][2]string
	for i, f := range files {
		name := "/etc/fledge/managed.toml"
		if i > 0 {
			name = "/etc/fledge/managed.d/" + string(rune('0'+i)) + ".toml"
		}
		in = append(in, [2]string{name, f})
	}
	m, err := ParseManaged(in)
	require.NoError(t, err)
	return m
}

func TestManagedParsesTheDocumentedExample(t *testing.T) {
	m := parseManaged(t, issueExample)
	assert.Equal(t, []string{"npm:@modelcontextprotocol/*", "npm:@acme/*", "dir"}, m.Sources)
	require.NotNil(t, m.Exec)
	assert.True(t, *m.Exec)
	assert.Equal(t, "project", m.Filesystem)
	require.NotNil(t, m.Network)
	assert.Len(t, m.Network.Dests, 2)
	assert.True(t, m.RequireStrict)
	assert.Equal(t, "journald", m.RequireWitness)
	assert.Equal(t, "otlp", m.RequireExport)
	assert.Len(t, m.Digest, 64)
}

func TestManagedUnknownKeysAreErrors(t *testing.T) {
	for _, src := range []string{
		"[limits]\nexex = true\n",
		"[limit]\nexec = true\n",
		"[require]\nstrict = \"yes\"\n",
		"[limits]\nfilesystem = \"everything\"\n",
		"[limits]\nnetwork = [\"*:443\"]\n",
		"[sources]\nallow = [\"ftp:x\"]\n",
		"[tools]\ndeny = [\"write_*\"]\n",
		"[require]\nexport = \"kafka\"\n",
	} {
		_, err := ParseManaged([][2]string{{"/etc/fledge/managed.toml", src}})
		require.Error(t, err, src)
		assert.Contains(t, err.Error(), "/etc/fledge/managed.toml", src)
	}
}

func TestManagedDropInsMergeInNameOrder(t *testing.T) {
	m := parseManaged(t, "[limits]\nexec = true\n[tools]\ndeny = [\"*:delete_*\"]\n", "[limits]\nexec = false\n[tools]\ndeny = [\"fs:write_*\"]\n")
	require.NotNil(t, m.Exec)
	assert.False(t, *m.Exec, "a later file's key replaces an earlier one's")
	assert.Equal(t, []string{"*:delete_*", "fs:write_*"}, m.ToolsDeny, "tool rules add up")
	v := m.Over(Grants{Exec: true}, nil)
	require.Len(t, v, 1)
	assert.Equal(t, "/etc/fledge/managed.d/1.toml: [limits] exec = false", v[0].Rule, "the rule names the file that set it")
}

func TestManagedCeilings(t *testing.T) {
	m := parseManaged(t, `
[limits]
exec = false
filesystem = "plugin"
network = ["*.acme.internal:443", "10.0.0.0/8:5432"]
secrets = ["GITHUB_TOKEN"]
`)
	for _, c := range []struct {
		g    Grants
		read []string
		over []string
	}{
		{Grants{Exec: true}, nil, []string{"exec"}},
		{Grants{Filesystem: "project"}, nil, []string{"filesystem=project"}},
		{Grants{Filesystem: "plugin"}, []string{"/opt/x"}, []string{"read=/opt/x"}},
		{Grants{Network: true}, nil, []string{"network"}},
		{Grants{NetworkTo: []string{"git.acme.internal:443", "*.eu.acme.internal:443", "10.1.0.0/16:5432"}}, nil, nil},
		{Grants{NetworkTo: []string{"acme.internal:443", "git.acme.internal:80", "*.internal:443", "11.0.0.1:5432"}}, nil,
			[]string{"network=acme.internal:443", "network=git.acme.internal:80", "network=*.internal:443", "network=11.0.0.1:5432"}},
		{Grants{Secrets: []string{"GITHUB_TOKEN", "AWS_SECRET"}}, nil, []string{"secret=AWS_SECRET"}},
		{Grants{Secrets: []string{"GITHUB_TOKEN@api.github.com:443"}}, nil, []string{"secret=GITHUB_TOKEN@api.github.com:443"}},
		{Grants{Store: true, Metadata: true}, nil, nil},
	} {
		var got []string
		for _, v := range m.Over(c.g, c.read) {
			got = append(got, v.Item)
			assert.True(t, strings.HasPrefix(v.Rule, "/etc/fledge/managed.toml: [limits] "), v.Rule)
		}
		assert.Equal(t, c.over, got, "%+v", c.g)
	}
	err := m.CheckPlugin("legacy-tool", true, Grants{}, nil)
	require.Error(t, err, "a plugin without a protocol is held to the exec ceiling")
	assert.True(t, errors.Is(err, ErrManaged))
	var nilM *Managed
	assert.NoError(t, nilM.CheckGrants("x", Grants{Exec: true, Network: true}, []string{"/"}), "no policy: no ceiling")
}

func TestManagedNetworkTrueOnlyWhereWritten(t *testing.T) {
	assert.Empty(t, parseManaged(t, "[limits]\nnetwork = true\n").Over(Grants{Network: true}, nil))
	assert.NotEmpty(t, parseManaged(t, "[limits]\nnetwork = false\n").Over(Grants{NetworkTo: []string{"a.b:1"}}, nil))
	assert.Empty(t, parseManaged(t, "[limits]\nexec = false\n").Over(Grants{Network: true}, nil), "a capability not named has no ceiling")
}

func TestManagedSources(t *testing.T) {
	m := parseManaged(t, "[sources]\nallow = [\"npm:@acme/*\", \"git:https://github.com/acme/*\", \"oci:ghcr.io/acme/*\"]\n")
	assert.NoError(t, m.AllowSource("npm", "@acme/tool"))
	assert.Error(t, m.AllowSource("npm", "@evil/tool"))
	assert.Error(t, m.AllowSource("npm", "acme-tool"))
	assert.NoError(t, m.AllowSource("git", "https://github.com/acme/x.git"))
	assert.Error(t, m.AllowSource("git", "https://github.com/evil/x.git"))
	assert.NoError(t, m.AllowSource("oci", "ghcr.io/acme/img:1"))
	assert.Error(t, m.AllowSource("pypi", "acme"))
	err := m.AllowSource("dir", "/home/u/p")
	require.Error(t, err, "no dir entry: local directories are refused")
	assert.Contains(t, err.Error(), "/etc/fledge/managed.toml: [sources] allow = ")
	assert.NoError(t, parseManaged(t, "[sources]\nallow = [\"dir\"]\n").AllowSource("dir", "/x"))
	assert.NoError(t, parseManaged(t, "[limits]\nexec = true\n").AllowSource("git", "https://x/y"), "no [sources]: every source")
}

// Every loosening a user config can try is refused, naming the setting and the rule.
func TestManagedRefusesUserLoosenings(t *testing.T) {
	m := parseManaged(t, issueExample)
	for _, c := range []struct{ cfg, key, rule string }{
		{"[sandbox]\nnetwork = \"allow\"\n", "[sandbox] network", "[limits] network_override = false"},
		{"[sandbox]\nunix_sockets = \"allow\"\n", "[sandbox] unix_sockets", "[limits] unix_sockets = false"},
		{"[sandbox]\nread_write = [\"/opt/data\"]\n", "[sandbox] read_write", "[limits] filesystem = \"project\""},
		{"[sandbox]\nread_only = [\"/opt/data\"]\n", "[sandbox] read_only", "[limits] filesystem = \"project\""},
		{"[sandbox]\nunprotect = [\".git/config\"]\n", "[sandbox] unprotect", "[limits] filesystem = \"project\""},
		{"[sandbox]\nlegacy = \"unconfined\"\n", "[sandbox] legacy", "[limits] exec = true"},
		{"[sandbox]\nstrict = false\n", "[sandbox] strict", "[require] strict = true"},
		{"[audit]\nwitness = \"syslog\"\n", "[audit] witness", "[require] witness = \"journald\""},
		{"[audit]\nexport = \"\"\n", "[audit] export", "[require] export = \"otlp\""},
	} {
		cfg, err := Parse("/home/u/.config/fledge/config.toml", []byte(c.cfg), "", "/home/u")
		require.NoError(t, err, c.cfg)
		err = m.Constrain(cfg)
		require.Error(t, err, c.cfg)
		assert.True(t, errors.Is(err, ErrManaged))
		assert.Contains(t, err.Error(), c.key, c.cfg)
		assert.Contains(t, err.Error(), "/etc/fledge/managed.toml: "+c.rule, c.cfg)
	}
	// What the policy requires is set, and what narrows is kept.
	cfg, err := Parse("config.toml", []byte("[sandbox]\nnetwork = \"deny\"\n"), "", "/home/u")
	require.NoError(t, err)
	require.NoError(t, m.Constrain(cfg))
	assert.True(t, cfg.Sandbox.Strict)
	assert.Equal(t, "journald", cfg.Audit.Witness)
	assert.Equal(t, ExportOTLP, cfg.Audit.Export, "the required export is on")
	assert.Equal(t, NetworkDeny, cfg.Sandbox.Network)
	assert.Same(t, m, cfg.Managed)
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		p, s string
		ok   bool
	}{
		{"read_*", "read_file", true}, {"read_*", "read_", true}, {"read_*", "write_file", false},
		{"*", "", true}, {"*_file", "read_text_file", true}, {"r?ad", "read", true}, {"r?ad", "rad", false},
		{"@acme/*", "@acme/a/b", true}, {"a*b*c", "aXbYbZc", true}, {"a*b*c", "aXbYbZ", false},
		{"write_file", "write_file", true}, {"write_file", "write_files", false},
	} {
		assert.Equal(t, c.ok, Glob(c.p, c.s), "%s %s", c.p, c.s)
	}
}

func TestDecideTool(t *testing.T) {
	m := parseManaged(t, "[tools]\ndeny = [\"server-filesystem:write_*\", \"*:delete_*\"]\nallow = [\"github:get_*\"]\n")
	user := &ToolRules{Allow: []string{"*_file", "write_*"}, Deny: []string{"read_media_file"}}
	for _, c := range []struct {
		plugin, tool string
		ok           bool
		by           string
	}{
		{"server-filesystem", "read_text_file", true, ""},
		{"server-filesystem", "write_file", false, ToolByManaged}, // the user's allow cannot lift a managed deny
		{"server-filesystem", "read_media_file", false, ToolByUser},
		{"server-filesystem", "list_directory", false, ToolByUser}, // not in the user's allow list
		{"other", "delete_all", false, ToolByManaged},
		{"github", "get_issue", true, ""},
		{"github", "create_issue", false, ToolByManaged}, // managed allow list for github
	} {
		u := user
		if c.plugin == "github" || c.plugin == "other" {
			u = nil
		}
		d := DecideTool(m, c.plugin, u, c.tool)
		assert.Equal(t, c.ok, d.Allowed, "%s:%s %+v", c.plugin, c.tool, d)
		assert.Equal(t, c.by, d.By, "%s:%s", c.plugin, c.tool)
	}
	assert.True(t, DecideTool(nil, "p", nil, "anything").Allowed)
	r, err := (&ToolRules{Allow: []string{"write_*"}}).With("write_*", true)
	require.NoError(t, err)
	assert.Equal(t, ToolRules{Deny: []string{"write_*"}}, r, "a glob moves from allow to deny")
	_, err = (*ToolRules)(nil).With("fs:write_*", true)
	assert.ErrorIs(t, err, ErrBadToolRule)
}

// The README's snippet for teams is a valid managed policy.
func TestManagedReadmeSnippetParses(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(data), "## For teams\n")
	require.True(t, ok, "README.md has a For teams section")
	_, block, ok := strings.Cut(rest, "```toml\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)
	m, err := ParseManaged([][2]string{{"/etc/fledge/managed.toml", block}})
	require.NoError(t, err, block)
	assert.NotEmpty(t, m.ToolsDeny)
}
