// SPDX-License-Identifier: MIT

package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/sandbox"
)

func testPaths() Paths {
	return Paths{
		ProjectRoot:   "/work/proj",
		PluginDir:     "/home/u/.config/fledge/plugins/hello",
		PluginDataDir: "/home/u/.config/fledge/plugins/hello/data",
		ConfigDir:     "/home/u/.config/fledge",
		StateDir:      "/home/u/.local/state/fledge",
		Home:          "/home/u",
		UserPATH: []string{
			"/home/u/.local/bin", // kept
			"/home/u/go/bin",     // kept
			"/usr/local/bin",     // covered by /usr
			"/home/u",            // whole home: dropped
			"/home",              // ancestor of home: dropped
			"/",                  // dropped
			"relative/bin",       // dropped
			"",                   // dropped
			"/home/u/.config/fledge/plugins/evil/bin", // inside config dir: dropped
			"/home/u/.local/state/fledge/bin",         // inside state dir: dropped
			"/home/u/.local",                          // contains the state dir: dropped
			"/home/u/.ssh/bin",                        // sensitive: dropped
			"/home/u/.aws",                            // sensitive: dropped
			"/home/u/.local/bin/",                     // duplicate after Clean: dropped
			"/snap/bin",                               // kept
		},
	}
}

func TestExecAccess(t *testing.T) {
	c := Default()
	c.Sandbox.ReadOnly = []string{"/srv/data"}
	c.Sandbox.ReadWrite = []string{"/var/cache/build", "/home/u/.local/state"} // second covers the state dir
	p := testPaths()
	a := ExecAccess(p, c)

	assert.Equal(t, append(append([]string{}, SystemPaths...),
		"/home/u/.local/bin", "/home/u/go/bin", "/snap/bin", p.PluginDir), a.ReadExec)
	assert.Equal(t, []string{"/dev/null", "/dev/zero", "/dev/full", "/work/proj", p.PluginDataDir, "/var/cache/build"}, a.ReadWrite)
	assert.Equal(t, []string{"/etc", "/dev/urandom", "/dev/random", "/proc", "/srv/data"}, a.ReadOnly)
	assert.Equal(t, []string{p.ConfigDir, p.StateDir}, a.Deny)
	require.NoError(t, CheckAccess(a))
	assertNoHome(t, a)
	assert.Nil(t, a.Protected, "the sandbox works the protected set out at launch")
	assert.Nil(t, a.Unprotect)

	c.Sandbox.Unprotect = []string{".git/config"}
	assert.Equal(t, []string{".git/config"}, ExecAccess(p, c).Unprotect)
	assert.Nil(t, ExecAccess(p, c).Protected)

	// No project: nothing project-shaped appears.
	p.ProjectRoot = ""
	a = ExecAccess(p, nil)
	assert.NotContains(t, a.ReadWrite, "")
	assert.Equal(t, []string{"/dev/null", "/dev/zero", "/dev/full", p.PluginDataDir}, a.ReadWrite)
}

// assertNoHome: nothing grants $HOME or an ancestor of it.
func assertNoHome(t *testing.T, a sandbox.Access) {
	t.Helper()
	for _, l := range [][]string{a.ReadWrite, a.ReadOnly, a.ReadExec} {
		for _, x := range l {
			assert.False(t, Within("/home/u", x), "grant %s covers home", x)
			assert.False(t, Within(x, "/home/u/.ssh"), "grant %s inside ~/.ssh", x)
		}
	}
}

func TestPluginAccessPerFilesystemGrant(t *testing.T) {
	p := testPaths()
	cases := []struct {
		fs        string
		projectRO bool
		projectRW bool
	}{{"", false, false}, {"none", false, false}, {"plugin", false, false}, {"project", true, false}, {"project-rw", false, true}}
	for _, tc := range cases {
		a := PluginAccess(p, Grants{Exec: true, Filesystem: tc.fs}, Default())
		require.NoError(t, CheckAccess(a))
		assert.Equal(t, tc.projectRO, contains(a.ReadOnly, "/work/proj"), tc.fs)
		assert.Equal(t, tc.projectRW, contains(a.ReadWrite, "/work/proj"), tc.fs)
		// The sandbox works out the protected paths of every writable root itself.
		assert.Nil(t, a.Protected, tc.fs)
		assert.False(t, contains(a.ReadExec, "/work/proj"), tc.fs)
		assert.Contains(t, a.ReadWrite, p.PluginDataDir)
		assert.Contains(t, a.ReadExec, p.PluginDir)
		assert.NotContains(t, a.ReadWrite, p.PluginDir, "plugin must not rewrite its own code")
		assertNoHome(t, a)
	}
	// Policy extras do not widen a plugin's profile.
	c := Default()
	c.Sandbox.ReadWrite = []string{"/srv/shared"}
	a := PluginAccess(p, Grants{}, c)
	assert.NotContains(t, a.ReadWrite, "/srv/shared")
}

func TestLegacyAccess(t *testing.T) {
	p := testPaths()
	a := LegacyAccess(p, Default())
	require.NoError(t, CheckAccess(a))
	assert.Contains(t, a.ReadWrite, "/work/proj")
	assert.Contains(t, a.ReadExec, p.PluginDir)
	assert.NotContains(t, a.ReadWrite, p.PluginDir)
	assertNoHome(t, a)
}

func TestDenyListAuditLog(t *testing.T) {
	p := testPaths()
	p.AuditLog = "/var/log/fledge/audit.jsonl"
	a := ExecAccess(p, nil)
	assert.Equal(t, append([]string{p.ConfigDir, p.StateDir, p.AuditLog}, audit.Sidecars(p.AuditLog)...), a.Deny)
	p.AuditLog = p.StateDir + "/audit.jsonl" // already covered by the state dir
	a = ExecAccess(p, nil)
	assert.Equal(t, []string{p.ConfigDir, p.StateDir}, a.Deny)
}

// The files fledge keeps beside a log outside the state dir steer how it writes that log (its
// lock, the truncation head, the shared fsync count, the export cursor): a grant naming one
// of them exactly is refused like a grant of the log itself.
func TestDenyListCoversAuditSidecars(t *testing.T) {
	p := testPaths()
	p.AuditLog = "/var/log/fledge/audit.jsonl"
	for _, side := range audit.Sidecars(p.AuditLog) {
		a := ExecAccess(p, nil)
		a.ReadWrite = append(a.ReadWrite, side)
		assert.Error(t, CheckAccess(a), side)
	}
	assert.Contains(t, audit.Sidecars(p.AuditLog), p.AuditLog+".sync")
	assert.Contains(t, audit.Sidecars(p.AuditLog), p.AuditLog+".head")
}

func TestCheckAccess(t *testing.T) {
	deny := []string{"/home/u/.config/fledge"}
	cases := []struct {
		name string
		a    sandbox.Access
		ok   bool
	}{
		{"child of deny is a carve-out", sandbox.Access{ReadWrite: []string{"/home/u/.config/fledge/plugins/x/data"}, Deny: deny}, true},
		{"unrelated", sandbox.Access{ReadOnly: []string{"/etc"}, Deny: deny}, true},
		{"equal", sandbox.Access{ReadOnly: []string{"/home/u/.config/fledge"}, Deny: deny}, false},
		{"ancestor rw", sandbox.Access{ReadWrite: []string{"/home/u"}, Deny: deny}, false},
		{"ancestor rx", sandbox.Access{ReadExec: []string{"/home"}, Deny: deny}, false},
		{"root", sandbox.Access{ReadOnly: []string{"/"}, Deny: deny}, false},
		{"prefix but not ancestor", sandbox.Access{ReadOnly: []string{"/home/u/.config/fl"}, Deny: deny}, true},
	}
	for _, tc := range cases {
		err := CheckAccess(tc.a)
		if tc.ok {
			assert.NoError(t, err, tc.name)
		} else {
			assert.ErrorIs(t, err, sandbox.ErrInvalidSpec, tc.name)
		}
	}
}

func TestPluginNetwork(t *testing.T) {
	c := Default()
	assert.True(t, c.PluginNetwork(Grants{Network: true}))
	assert.False(t, c.PluginNetwork(Grants{}))
	c.Sandbox.Network = NetworkDeny
	assert.False(t, c.PluginNetwork(Grants{Network: true}))
}

func TestWithin(t *testing.T) {
	assert.True(t, Within("/a/b", "/a"))
	assert.True(t, Within("/a", "/a/"))
	assert.True(t, Within("/a", "/"))
	assert.False(t, Within("/ab", "/a"))
	assert.False(t, Within("/a", "/a/b"))
	assert.True(t, Within("/a/b/../c", "/a"))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
