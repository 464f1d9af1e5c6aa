// SPDX-License-Identifier: MIT

package sandbox

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSafeName(t *testing.T) {
	for in, want := range map[string]string{
		"hello-bash":       "hello-bash",
		"../../etc/passwd": "______etc_passwd",
		"":                 "run",
		"a b\x00c":         "a_b_c",
		"ünï":              "_n_",
		"x234567890123456789012345678901234567890": "x2345678901234567890123456789012",
	} {
		assert.Equal(t, want, SafeName(in), in)
	}
}

func TestWithEnv(t *testing.T) {
	env := []string{"A=1", "TMPDIR=/tmp", "B=2", "TMPDIR=/x"}
	got := WithEnv(env, "TMPDIR", "/private")
	assert.Equal(t, []string{"A=1", "B=2", "TMPDIR=/private"}, got)
	assert.Equal(t, "TMPDIR=/tmp", env[1], "the input is not modified")
}
