// SPDX-License-Identifier: MIT

package sandbox

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidUnprotect(t *testing.T) {
	for _, tc := range []struct {
		name, why string // why: "" = valid, else a part of the error
	}{
		{".git/config", ""},
		{".git/hooks", ""},
		{".git", ""},
		{"sub/.git", ""},
		{".git/modules/*/hooks", ""},
		{".git/worktrees/*/config.worktree", ""},
		{".git/worktrees/*/commondir", ""},
		{".git/modules/*", ""},
		{"core.hooksPath", ""},
		{"include.path", ""},
		{"", "empty"},
		{"/repo/.git/config", "relative to a writable root"},
		{"~/.git/config", "relative to a writable root"},
		{"../x/.git/config", `".." would leave`},
		{".git/../.git/config", `".." would leave`},
		{"./.git/config", "not a clean path"},
		{".git//config", "not a clean path"},
		{".git/config/", "not a clean path"},
		{`.git\config`, "use /"},
		{".git/[/hooks", "bad pattern"},
		{".git/HEAD", "git writes it"},
		{".git/modules/*/index.lock", "git writes it"},
		{".git/info", ""},
		{".git/modules/*/description", ""},
		{"vendor/x.git/annex", ""},
		{"src", "fledge never protects it"},
		{"core.hookspath", "fledge never protects it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidUnprotect(tc.name)
			if tc.why == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrUnprotect)
			assert.Contains(t, err.Error(), tc.why)
		})
	}
}

func TestUnprotected(t *testing.T) {
	entries := []string{".git/config", ".git/modules/*/hooks", "core.hooksPath"}
	assert.True(t, Unprotected(".git/config", entries))
	assert.True(t, Unprotected(".git/modules/sub/hooks", entries))
	assert.False(t, Unprotected(".git/modules/a/b/hooks", entries), "* stays within one element")
	assert.False(t, Unprotected(".git/hooks", entries))
	assert.False(t, Unprotected("core.hooksPath", entries), "a setting token names no path")
	assert.True(t, UnprotectsSetting(entries, UnprotectHooksPath))
	assert.False(t, UnprotectsSetting(entries, UnprotectIncludes))
}
