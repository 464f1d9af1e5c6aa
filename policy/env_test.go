// SPDX-License-Identifier: MIT

package policy

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLooksLikeCredential(t *testing.T) {
	cases := []struct {
		name, value string
		want        bool
	}{
		// by name
		{"GITHUB_TOKEN", "x", true},
		{"github_token", "x", true},
		{"NPM_TOKEN", "x", true},
		{"AWS_ACCESS_KEY_ID", "x", true},
		{"AWS_REGION", "eu-west-1", true},
		{"DB_PASSWORD", "x", true},
		{"MYSQL_PWD_FILE", "x", true},
		{"OPENAI_API_KEY", "x", true},
		{"STRIPE_KEY", "x", true},
		{"SSH_AUTH_SOCK", "/tmp/agent", true},
		{"SESSION_ID", "x", true},
		{"CLIENT_SECRET", "x", true},
		{"GOOGLE_APPLICATION_CREDENTIALS", "/k.json", true},
		{"HTTP_COOKIE", "a=b", true},
		{"GITLAB_PAT", "x", true},
		{"SENTRY_DSN", "x", true},
		// harmless
		{"PATH", "/usr/bin:/bin", false},
		{"HOME", "/home/u", false},
		{"LANG", "en_US.UTF-8", false},
		{"TERM", "xterm-256color", false},
		{"EDITOR", "vim", false},
		{"KEYBOARD_LAYOUT", "us", false},
		{"MONKEY", "banana", false},
		{"DESKTOP", "desk-top-computer-thing", false},
		{"GIT_REMOTE", "ssh://git@github.com/org/repo.git", false},
		{"WEBSITE", "https://example.com/path?q=1", false},
		{"NOTE", "ask-me-anything", false},
		// by value, whatever the name
		{"X", "https://user:hunter2@example.com/repo.git", true},
		{"X", "https://ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/o/r", true},
		{"X", "https://0123456789abcdef0123456789abcdef01234567@github.com/o/r", true},
		{"X", "-----BEGIN OPENSSH PRIVATE KEY-----\nabc", true},
		{"X", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk", true},
		{"X", "ghp_0123456789abcdefghijABCDEFGHIJ012345", true},
		{"X", "gho_0123456789abcdefghijABCDEFGHIJ012345", true},
		{"X", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", true},
		{"X", "glpat-abcdefghij0123456789", true},
		{"X", "xoxb-1234567890-abcdefghij", true},
		{"X", "xoxp-1234567890-abcdefghij", true},
		{"X", "sk-proj-abcdefghijklmnopqrstuvwxyz", true},
		{"X", "sk_live_abcdefghijklmnop", true},
		{"X", "AKIAIOSFODNN7EXAMPLE", true},
		{"X", "ASIAIOSFODNN7EXAMPLE", true},
		{"X", "AIzaSyA-abcdefghijklmnopqrstuvwxyz12345", true},
		{"X", "npm_abcdefghijklmnopqrstuvwxyz0123456789", true},
		{"X", "pypi-AgEIcHlwaS5vcmcCJGFiY2Rl", true},
		{"X", "Bearer abcdefghijklmnopqrstuvwxyz", true},
		{"X", "--header=token=ghp_0123456789abcdefghijABCDEFGHIJ012345", true},
		// near misses
		{"X", "AKIA-short", false},
		{"X", "sk-short", false},
		{"X", "eyJ", false},
		{"X", "BEGIN here", false},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, LooksLikeCredential(tc.name, tc.value), "%s=%q", tc.name, tc.value)
	}
}

func TestChildEnv(t *testing.T) {
	environ := []string{
		"PATH=/usr/bin:/bin",
		"HOME=/home/u",
		"LANG=C.UTF-8",
		"LC_ALL=C",
		"LC_TIME=en_GB",
		"TERM=xterm",
		"TZ=UTC",
		"USER=u",
		"LOGNAME=u",
		"SHELL=/bin/bash",
		"GITHUB_TOKEN=ghp_0123456789abcdefghijABCDEFGHIJ012345",
		"AWS_SECRET_ACCESS_KEY=abc",
		"EDITOR=vim",
		"GOPATH=/home/u/go",
		"MYAPP_MODE=dev",
		"MYAPP_TOKEN=nope",                          // allow-listed by pattern, dropped by name
		"MYAPP_URL=https://bob:pw@db.example.com/x", // allow-listed, dropped by value
		"TMPDIR=/tmp/host-tmp",
		"noequals",
		"=novalue",
		"PATH=/usr/local/bin:/usr/bin", // later duplicate wins
	}
	got := ChildEnv(environ, []string{"GOPATH", "MYAPP_*"}, map[string]string{
		"TMPDIR":            "/tmp/fledge-1",
		"FLEDGE_PLUGIN_DIR": "/cfg/plugins/p",
		"BAD=NAME":          "x",
	})
	assert.Equal(t, []string{
		"FLEDGE_PLUGIN_DIR=/cfg/plugins/p",
		"GOPATH=/home/u/go",
		"HOME=/home/u",
		"LANG=C.UTF-8",
		"LC_ALL=C",
		"LC_TIME=en_GB",
		"LOGNAME=u",
		"MYAPP_MODE=dev",
		"PATH=/usr/local/bin:/usr/bin",
		"SHELL=/bin/bash",
		"TERM=xterm",
		"TMPDIR=/tmp/fledge-1",
		"TZ=UTC",
		"USER=u",
	}, got)

	// A credential-valued duplicate removes the earlier clean value rather than keeping it.
	got = ChildEnv([]string{"TERM=xterm", "TERM=ghp_0123456789abcdefghijABCDEFGHIJ012345"}, nil, nil)
	assert.Empty(t, got)
}

func TestMetadataEnv(t *testing.T) {
	environ := []string{
		"PATH=/usr/bin", "HOME=/home/u", "EDITOR=vim", "CI=true", "PAGER=less",
		"GOPATH=/home/u/go", "NPM_TOKEN=npm_abcdefghijklmnopqrstuvwxyz0123456789",
		"GIT_AUTHOR_NAME=Bob", "VISUAL=https://ghp_0123456789abcdefghijABCDEFGHIJ012345@x",
		"EXTRA_ONE=1",
	}
	got := MetadataEnv(environ, []string{"EXTRA_*"})
	assert.Equal(t, map[string]string{
		"PATH": "/usr/bin", "HOME": "/home/u", "EDITOR": "vim", "CI": "true", "PAGER": "less",
		"EXTRA_ONE": "1",
	}, got)
}

func TestStripURLCredentials(t *testing.T) {
	cases := []struct{ in, want string }{
		{"https://github.com/org/repo.git", "https://github.com/org/repo.git"},
		{"https://user:hunter2@github.com/org/repo.git", "https://github.com/org/repo.git"},
		{"https://x-access-token:ghs_abcdefghijklmnopqrstuvwxyz@github.com/o/r", "https://github.com/o/r"},
		{"https://ghp_0123456789abcdefghijABCDEFGHIJ012345@github.com/o/r", "https://github.com/o/r"},
		{"https://oauth2:glpat-abcdefghijklmnop@gitlab.com/o/r.git", "https://gitlab.com/o/r.git"},
		{"ssh://git@github.com/org/repo.git", "ssh://git@github.com/org/repo.git"},
		{"ssh://git:pw@github.com/org/repo.git", "ssh://github.com/org/repo.git"},
		{"git@github.com:org/repo.git", "git@github.com:org/repo.git"},
		{"bob:secret@host.example:repo.git", "host.example:repo.git"},
		{"ghp_0123456789abcdefghijABCDEFGHIJ012345@github.com:o/r", "github.com:o/r"},
		{"https://example.com/r.git?access_token=abc&ref=main", "https://example.com/r.git?ref=main"},
		{"https://example.com/r.git?private_token=abc", "https://example.com/r.git"},
		{"https://example.com/r.git?X-Amz-Signature=abc&X-Amz-Credential=k", "https://example.com/r.git"},
		{"/local/path/repo", "/local/path/repo"},
		{"/local/pa@th/repo", "/local/pa@th/repo"},
		{"file:///srv/git/repo.git", "file:///srv/git/repo.git"},
		{"https://user:p%zz@host/x", "https://host/x"},
		{"git+https://u:hunter2@host/x", "git+https://host/x"},
		{"a:b://x:hunter2@z", "a:b://z"},
	}
	for _, tc := range cases {
		got := StripURLCredentials(tc.in)
		assert.Equal(t, tc.want, got, tc.in)
		assert.NotContains(t, got, "hunter2")
	}
}

func FuzzLooksLikeCredential(f *testing.F) {
	for _, s := range []string{"", "ghp_0123456789abcdefghijABCDEFGHIJ012345", "https://a:b@c", "-----BEGIN",
		"eyJhbGciOi.eyJzdWIiOi.sig", "AKIAIOSFODNN7EXAMPLE", "plain words"} {
		f.Add("X", s)
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		got := LooksLikeCredential(name, value)
		// Embedding a value inside a larger one must never hide a well-known token.
		if LooksLikeCredential("", value) {
			require.True(t, LooksLikeCredential("", "prefix "+value+" suffix"),
				"wrapping hid a credential: %q", value)
		}
		// A credential name is a credential whatever the value.
		if CredentialName(name) {
			require.True(t, got)
		}
		// Whatever comes out of stripping carries no URL password or token-like user.
		s := StripURLCredentials(value)
		for _, m := range urlUserinfo().FindAllStringSubmatch(s, -1) {
			require.False(t, userinfoIsSecret(m[1]), "strip(%q) = %q keeps %q", value, s, m[1])
		}
	})
}
