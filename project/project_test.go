// SPDX-License-Identifier: MIT

package project

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
}

func TestDetect(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	proj := filepath.Join(home, "src", "app")
	sub := filepath.Join(proj, "a", "b")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proj, "fledge.toml"), []byte("[project]\nname = \"named\"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(proj, "go.mod"), []byte("module x\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(home, ".git"), 0o755)) // a stray repo in $HOME
	t.Setenv("HOME", home)

	tests := []struct {
		name, start, override string
		wantRoot, wantName    string
		wantLang              string
		wantErr               bool
	}{
		{"from a subdirectory", sub, "", proj, "named", "go", false},
		{"home is never a root", filepath.Join(home, "src"), "", "", "", "", false},
		{"override", root, proj, proj, "named", "go", false},
		{"override home refused", root, home, "", "", "", true},
		{"override root refused", root, "/", "", "", "", true},
		{"override missing", root, filepath.Join(root, "nope"), "", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Detect(tt.start, tt.override)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			if tt.wantRoot == "" {
				assert.Nil(t, got)
				return
			}
			require.NotNil(t, got)
			assert.Equal(t, tt.wantRoot, got.Root)
			assert.Equal(t, tt.wantName, got.Name)
			assert.Equal(t, tt.wantLang, got.Language)
		})
	}
}

// TestGitIgnoresRepositoryHooks attacks the host through the project: a hostile repo sets
// core.fsmonitor (run by `git status`), a hook path and a pager; answering git_status must
// not run any of them.
func TestGitIgnoresRepositoryHooks(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(t.TempDir(), "pwned")
	git(t, dir, "init", "-q")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644))
	git(t, dir, "add", "f")
	git(t, dir, "commit", "-q", "-m", "one")
	evil := "touch " + marker + "; false"
	for _, kv := range [][2]string{{"core.fsmonitor", evil}, {"core.pager", evil}, {"core.hooksPath", dir}, {"gpg.program", evil}, {"log.showSignature", "true"}} {
		git(t, dir, "config", kv[0], kv[1])
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("changed"), 0o644))
	p := &Info{Root: dir}
	st, known := Metadata(context.Background(), p, "git_status")
	require.True(t, known)
	assert.Equal(t, []string{"f"}, st)
	lg, _ := Metadata(context.Background(), p, "git_log")
	assert.Len(t, lg, 1)
	gi := ReadGitInfo(context.Background(), dir)
	require.NotNil(t, gi)
	assert.True(t, gi.Dirty)
	assert.NoFileExists(t, marker, "git ran a repository-configured program")
}

func TestGitOutputBounded(t *testing.T) {
	dir := t.TempDir()
	git(t, dir, "init", "-q")
	// More untracked names than the output bound allows.
	for i := 0; i < 2000; i++ {
		name := filepath.Join(dir, "file-with-a-rather-long-name-to-fill-the-output-quickly-"+string(rune('a'+i%26))+"-"+itoa(i))
		require.NoError(t, os.WriteFile(name, nil, 0o644))
	}
	out, err := Git(context.Background(), dir, "status", "--porcelain")
	if err == nil {
		assert.LessOrEqual(t, len(out), maxGitOutput)
	} else {
		assert.ErrorIs(t, err, ErrGitOutputTooLarge)
	}
}

func itoa(i int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
		if i == 0 {
			return string(b)
		}
	}
}

func TestDetectLanguage(t *testing.T) {
	for file, lang := range map[string]string{"Cargo.toml": "rust", "package.json": "javascript", "pyproject.toml": "python", "nothing.txt": "unknown"} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), nil, 0o644))
		assert.Equal(t, lang, DetectLanguage(dir), file)
	}
}
