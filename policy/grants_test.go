// SPDX-License-Identifier: MIT

package policy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseGrantList(t *testing.T) {
	cases := []struct {
		in      string
		want    Grants
		wantErr string
	}{
		{"", Grants{Filesystem: "none"}, ""},
		{"none", Grants{Filesystem: "none"}, ""},
		{"exec,store", Grants{Exec: true, Store: true, Filesystem: "none"}, ""},
		{"Exec,METADATA,network", Grants{Exec: true, Metadata: true, Network: true, Filesystem: "none"}, ""},
		{"filesystem", Grants{Filesystem: FilesystemDeclared}, ""},
		{"filesystem=project", Grants{Filesystem: "project"}, ""},
		{"filesystem=plugin,exec", Grants{Exec: true, Filesystem: "plugin"}, ""},
		{"exec,sudo", Grants{}, `unknown capability: "sudo" (known: exec, store, metadata, network, filesystem, sampling, elicitation)`},
		{"filesystem=everything", Grants{}, `unknown capability: "filesystem=everything" (filesystem is one of none, plugin, project, project-rw)`},
		{"filesystem=", Grants{}, `unknown capability: "filesystem="`},
		// No guessing from a typo in a security decision.
		{"exec,exec", Grants{}, `bad:"exec" is given twice`},
		{"exec,EXEC", Grants{}, `bad:"EXEC" is given twice`},
		{"filesystem=project,filesystem=plugin", Grants{}, `bad:"filesystem=plugin" is given twice`},
		{" exec", Grants{}, `bad:" exec" has spaces around it`},
		{"exec ,store", Grants{}, `bad:"exec " has spaces around it`},
		{"exec,,store", Grants{}, `bad:item 2 is empty`},
		{"exec,", Grants{}, `bad:item 2 is empty`},
		{" none", Grants{}, `bad:" none" has spaces around it`},
		// plugin.toml's `network = true`, spelled as a grant: the whole network.
		{"network=true", Grants{Network: true, Filesystem: "none"}, ""},
		{"exec,NETWORK=TRUE", Grants{Exec: true, Network: true, Filesystem: "none"}, ""},
		{"network=false", Grants{}, `nothing:network=false grants nothing`},
	}
	for _, tc := range cases {
		got, err := ParseGrantList(tc.in)
		if strings.HasPrefix(tc.wantErr, "nothing:") {
			require.ErrorIs(t, err, ErrGrantsNothing, tc.in)
			assert.Contains(t, err.Error(), strings.TrimPrefix(tc.wantErr, "nothing:"))
			continue
		}
		if strings.HasPrefix(tc.wantErr, "bad:") {
			require.ErrorIs(t, err, ErrBadGrantList, tc.in)
			assert.Contains(t, err.Error(), strings.TrimPrefix(tc.wantErr, "bad:"))
			continue
		}
		if tc.wantErr != "" {
			require.ErrorIs(t, err, ErrUnknownCapability, tc.in)
			assert.Contains(t, err.Error(), tc.wantErr)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

func TestGrantsStringRoundTrip(t *testing.T) {
	for _, g := range []Grants{
		{},
		{Exec: true},
		{Exec: true, Store: true, Metadata: true, Network: true, Filesystem: "project"},
		{Store: true, Filesystem: "plugin"},
	} {
		back, err := ParseGrantList(g.String())
		require.NoError(t, err, g.String())
		assert.Equal(t, g.Names(), back.Names())
		assert.Equal(t, g.FS(), back.FS())
	}
	assert.Equal(t, "none", Grants{}.String())
	assert.True(t, Grants{Filesystem: "none"}.Empty())
	assert.Equal(t, "exec,network,filesystem=project", Grants{Exec: true, Network: true, Filesystem: "project"}.String())
	assert.Equal(t, []string{"store", "filesystem=plugin"}, Grants{Store: true, Filesystem: "plugin"}.Names())
}

func TestGrantsSubset(t *testing.T) {
	all := Grants{Exec: true, Store: true, Metadata: true, Network: true, Filesystem: "project"}
	cases := []struct {
		g, of Grants
		want  bool
	}{
		{Grants{}, Grants{}, true},
		{Grants{}, all, true},
		{all, all, true},
		{Grants{Exec: true}, Grants{Store: true}, false},
		{Grants{Network: true}, Grants{Exec: true, Store: true}, false},
		{Grants{Filesystem: "plugin"}, Grants{Filesystem: "project"}, true},
		{Grants{Filesystem: "project"}, Grants{Filesystem: "plugin"}, false},
		{Grants{Filesystem: "plugin"}, Grants{}, false},
		{Grants{Filesystem: "none"}, Grants{}, true},
		{Grants{Filesystem: "bogus"}, all, false},
		{Grants{Filesystem: "project"}, Grants{Filesystem: "project-rw"}, true},
		{Grants{Filesystem: "project-rw"}, Grants{Filesystem: "project"}, false},
		{Grants{Filesystem: "project-rw"}, all, false},
		{Grants{}, Grants{Filesystem: "bogus"}, false},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, tc.g.Subset(tc.of), "%v ⊆ %v", tc.g, tc.of)
	}
}

func TestGrantsResolve(t *testing.T) {
	declared := Grants{Exec: true, Store: true, Filesystem: "project"}
	g, err := Grants{Exec: true, Filesystem: FilesystemDeclared}.Resolve(declared)
	require.NoError(t, err)
	assert.Equal(t, Grants{Exec: true, Filesystem: "project"}, g)

	g, err = Grants{Store: true}.Resolve(declared)
	require.NoError(t, err)
	assert.Equal(t, Grants{Store: true, Filesystem: "none"}, g)

	_, err = Grants{Exec: true, Network: true, Metadata: true}.Resolve(declared)
	require.ErrorIs(t, err, ErrNotDeclared)
	assert.Equal(t, "capability not declared by the plugin: metadata, network (declared: exec,store,filesystem=project)", err.Error())

	_, err = Grants{Filesystem: FilesystemDeclared}.Resolve(Grants{Exec: true})
	require.ErrorIs(t, err, ErrNotDeclared)
	assert.Contains(t, err.Error(), "filesystem")
}

func TestDescribe(t *testing.T) {
	for _, n := range (Grants{Exec: true, Store: true, Metadata: true, Network: true, Filesystem: "project"}).Names() {
		assert.NotEqual(t, n, Describe(n), n)
	}
	assert.Contains(t, Describe("filesystem=project-rw"), "WRITE", "a grant to write the project is said as the strong grant it is")
}

// project-rw parses in both spellings, reads and writes the project, and ranks above project.
func TestFilesystemProjectRW(t *testing.T) {
	for _, s := range []string{"filesystem=project-rw", "filesystem:project-rw"} {
		g, err := ParseGrantName(s)
		require.NoError(t, err, s)
		assert.True(t, g.ReadsProject() && g.WritesProject(), s)
		assert.Equal(t, "filesystem=project-rw", g.String())
	}
	ro := Grants{Filesystem: FilesystemProject}
	assert.True(t, ro.ReadsProject())
	assert.False(t, ro.WritesProject())
	assert.Equal(t, FilesystemProjectRW, ro.Union(Grants{Filesystem: FilesystemProjectRW}).FS())
	c, err := GrantOne(ro, ro, ro, "filesystem=project-rw")
	require.NoError(t, err)
	assert.Equal(t, []string{"filesystem=project-rw"}, c.Unrequested, "more than the plugin asked for, said so")
}

// ParseGrantName reads runtime-v1's spelling too; the CLI's parser (GrantOne, RevokeOne)
// does not.
func TestParseGrantName(t *testing.T) {
	for name, want := range map[string]Grants{
		"exec":               {Exec: true, Filesystem: FilesystemNone},
		"filesystem=project": {Filesystem: FilesystemProject},
		"filesystem:project": {Filesystem: FilesystemProject},
		"filesystem:plugin":  {Filesystem: FilesystemPlugin},
	} {
		g, err := ParseGrantName(name)
		require.NoError(t, err, name)
		assert.Equal(t, want, g, name)
	}
	for _, bad := range []string{"", "none", "exec,network", "filesystem:", "filesystem:all", "root"} {
		_, err := ParseGrantName(bad)
		assert.ErrorIs(t, err, ErrUnknownCapability, bad)
	}
}

// Secrets are tokens: names that decide how a program loads or starts are refused, in any
// case, so a plugin cannot have the user's loader settings handed to it as "secrets".
func TestValidSecretName(t *testing.T) {
	for _, ok := range []string{"GITHUB_TOKEN", "api_key", "NPM_TOKEN2", "NODE_AUTH_TOKEN", "GIT_TOKEN", "JAVA_HOME_TOKEN", "LUA_TOKEN"} {
		assert.True(t, ValidSecretName(ok), ok)
	}
	for _, bad := range []string{"", "2X", "A-B", "FLEDGE_X", "fledge_x", "PATH", "ld_preload", "LD_AUDIT", "LD_LIBRARY_PATH",
		"BASH_ENV", "NODE_OPTIONS", "PYTHONSTARTUP", "PERL5OPT", "GIT_CONFIG_PARAMETERS",
		"DYLD_INSERT_LIBRARIES", "dyld_library_path", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS",
		"GLIBC_TUNABLES", "LUA_INIT", "LUA_INIT_5_4", "PYTHONWARNINGS", "PYTHONPATH", "PYTHONBREAKPOINT",
		"PERL5LIB", "PERL5DB", "RUBYOPT", "ENV", "PS4", "GCONV_PATH", "MALLOC_CHECK_", "MALLOC_PERTURB_",
		"GIT_SSH_COMMAND", "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "EDITOR", "LESSOPEN", "OPENSSL_CONF",
		"GOFLAGS", "DOTNET_STARTUP_HOOKS", "CORECLR_PROFILER_PATH", "CLASSPATH", "PROMPT_COMMAND"} {
		assert.False(t, ValidSecretName(bad), bad)
	}
}
