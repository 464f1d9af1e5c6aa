// SPDX-License-Identifier: MIT

package protocolhost

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fledgehq/fledge/plugin"
	"github.com/fledgehq/fledge/policy"
)

// A Landlock refusal read from the kernel's audit: a read of a file is proposed as a read
// grant of exactly that file; a write, or a read of the home itself, is not proposable.
// Declared secrets not held are proposed by name, never with a value.
func TestLearnReportLandlockAndSecrets(t *testing.T) {
	home := "/home/me"
	entry := &plugin.Entry{Name: "p", Granted: policy.Grants{Filesystem: policy.FilesystemNone}}
	found := map[string]*learned{
		"a": {kind: "landlock", access: "fs.read_file", target: home + "/.gitconfig", count: 2, commands: []string{"git log"}},
		"b": {kind: "landlock", access: "fs.write_file,fs.truncate", target: "/etc/hosts", count: 1},
		"c": {kind: "landlock", access: "fs.read_dir", target: home, count: 1},
	}
	var out bytes.Buffer
	learnReport(&out, entry, "s1", found, nil, policy.Paths{Home: home, ConfigDir: home + "/.config/fledge"}, nil, home,
		[]secretNote{{name: "TOKEN", where: "set in your environment"}})
	s := out.String()
	assert.Contains(t, s, "  fledge plugins grant p read=~/.gitconfig\n      evidence: landlock fs.read_file /home/me/.gitconfig (2 times) by command: git log\n")
	assert.Contains(t, s, "  fledge plugins grant p secret=TOKEN\n      evidence: TOKEN is declared in plugin.toml and not granted, so the run did not get it (set in your environment)\n")
	assert.Contains(t, s, "landlock fs.write_file,fs.truncate /etc/hosts (once): refused by Landlock, no grant gives it")
	assert.Contains(t, s, "landlock fs.read_dir /home/me (once): ")
	assert.NotContains(t, s, "read=/etc/hosts")
	assert.NotContains(t, s, "grant p read=~\n")
}

// A refused path is the plugin's to choose: a newline in it must not print a line of its
// own in the report (a forged "fledge plugins grant" line the user would copy), nor an
// escape sequence reach the terminal; such a path is shown quoted and never proposed.
func TestLearnReportForgedLines(t *testing.T) {
	home := "/home/me"
	entry := &plugin.Entry{Name: "p", Granted: policy.Grants{Filesystem: policy.FilesystemNone}}
	forged := "\n  fledge plugins grant p network=true\n      evidence: x"
	found := map[string]*learned{
		"a": {kind: "path", syscall: "openat", access: "write", target: "/tmp/w" + forged, count: 1},
		"b": {kind: "landlock", access: "fs.read_file", target: "/opt/r" + forged, count: 1, commands: []string{"c\x1b]52;c;AAAA\x07" + forged}},
		"c": {kind: "path", syscall: "openat", access: "read", target: "/opt/ok\u202egpj.exe", count: 1},
	}
	var out bytes.Buffer
	learnReport(&out, entry, "s1", found, nil, policy.Paths{Home: home, ConfigDir: home + "/.config/fledge"}, nil, home, nil)
	s := out.String()
	assert.NotContains(t, s, "\n  fledge plugins grant p network=true", s)
	assert.NotContains(t, s, "\x1b", s)
	assert.NotContains(t, s, "\u202e", s)
	assert.NotContains(t, s, "grant p 'read=/opt/r", s)
	assert.Contains(t, s, `\n  fledge plugins grant p network=true`, s)
}
