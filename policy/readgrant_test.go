// SPDX-License-Identifier: MIT

package policy

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCheckReadGrant(t *testing.T) {
	p := Paths{Home: "/home/u", ConfigDir: "/home/u/.config/fledge", StateDir: "/home/u/.local/state/fledge",
		AuditLog: "/home/u/.local/state/fledge/audit.jsonl"}
	for path, ok := range map[string]bool{
		"/home/u/.gitconfig":              true,
		"/home/u/.config/git/config":      true,
		"/home/u/.config/git":             false, // holds git's credential store
		"/home/u/.config/git/credentials": false,
		"/home/u/.local/share":            false, // holds ~/.local/share/keyrings
		"/home/u/.local/share/nvim":       true,
		"/opt/tools/share":                true,
		"/home/u/.ssh/id_rsa":             false,
		"/home/u/.ssh":                    false,
		"/home/u/.aws/credentials":        false,
		"/home/u/.config/gh/hosts.yml":    false,
		"/home/u/.config/fledge/x.toml":   false,
		"/home/u/.config":                 false, // holds fledge's config dir
		"/home/u/.local/state/fledge":     false,
		"/home/u":                         false,
		"/":                               false,
		"relative/path":                   false,
		"/home/u/../u/.ssh":               false,
		"/home/u/.gitconfig/":             false,
		"/home/u/.sshkeys-not-the-store":  true,
		"/dev":                            false, // device nodes
		"/dev/loop0":                      false,
		"/dev/disk/by-uuid":               false,
		"/dev/pts":                        false,
		"/devices-not-dev":                true,
	} {
		checkReadGrantCase(t, path, ok, p)
	}
	// fledge's config and state outside the home: a parent of the home still holds every
	// key store in it.
	p2 := Paths{Home: "/home/u", ConfigDir: "/etc/fledge", StateDir: "/var/lib/fledge"}
	for path, ok := range map[string]bool{"/home": false, "/home/u": false, "/home/u/.gitconfig": true, "/home/other": true} {
		checkReadGrantCase(t, path, ok, p2)
	}
}

// TestCheckDevicePath: no device node is granted, by its name (/dev and below, but the
// harmless character devices every process has and /dev/shm) or by what it is on disk (a
// node made with mknod anywhere else, a symlink to one).
func TestCheckDevicePath(t *testing.T) {
	for _, c := range []struct {
		path string
		mode fs.FileMode
		ok   bool
	}{
		{"/dev", fs.ModeDir, false},
		{"/dev/sda", 0, false},
		{"/dev/loop0", fs.ModeDevice, false},
		{"/dev/mapper", fs.ModeDir, false},
		{"/dev/null", fs.ModeDevice | fs.ModeCharDevice, true},
		{"/dev/urandom", fs.ModeDevice | fs.ModeCharDevice, true},
		{"/dev/shm", fs.ModeDir, true},
		{"/dev/shm/x", 0, true},
		{"/srv/images/disk", fs.ModeDevice, false},
		{"/srv/images/null", fs.ModeDevice | fs.ModeCharDevice, false},
		{"/srv/images", fs.ModeDir, true},
		{"/srv/images/disk.img", 0, true},
	} {
		err := CheckDevicePath(c.path, c.mode)
		if c.ok {
			assert.NoError(t, err, c.path)
		} else {
			assert.True(t, errors.Is(err, ErrReadGrant), "%s: %v", c.path, err)
		}
	}
}

func checkReadGrantCase(t *testing.T, path string, ok bool, p Paths) {
	t.Helper()
	err := CheckReadGrant(path, p)
	if ok {
		assert.NoError(t, err, path)
	} else {
		assert.True(t, errors.Is(err, ErrReadGrant), "%s: %v", path, err)
	}
}

func TestReadGrantsInProfile(t *testing.T) {
	c := Default()
	p := Paths{Home: "/home/u", ConfigDir: "/home/u/.config/fledge", StateDir: "/home/u/.local/state/fledge",
		PluginDir: "/home/u/.config/fledge/plugins/x", PluginDataDir: "/home/u/.config/fledge/plugins/x/data"}
	prof := c.Build(ProfileInput{Paths: p, Read: []string{"/home/u/.gitconfig", "/home/u/.ssh/id_rsa", "/home/u/.gitconfig"}})
	assert.Contains(t, prof.Plugin.Access.ReadOnly, "/home/u/.gitconfig")
	assert.Contains(t, prof.Exec.Access.ReadOnly, "/home/u/.gitconfig")
	assert.NotContains(t, prof.Plugin.Access.ReadOnly, "/home/u/.ssh/id_rsa", "a hand-edited registry cannot widen it")
	n := 0
	for _, r := range prof.Plugin.Access.ReadOnly {
		if r == "/home/u/.gitconfig" {
			n++
		}
	}
	assert.Equal(t, 1, n)
}

func TestExpandReadGrant(t *testing.T) {
	p, ok := ExpandReadGrant("read=~/.gitconfig", "/home/u")
	assert.True(t, ok)
	assert.Equal(t, "/home/u/.gitconfig", p)
	_, ok = ExpandReadGrant("network", "/home/u")
	assert.False(t, ok)
}
