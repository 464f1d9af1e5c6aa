// SPDX-License-Identifier: MIT

// Package examples_test runs the example plugins end to end through a real fledge binary,
// by way of scripts/demo.sh (what `make demo` runs): install with --yes, hello under --ni in
// bash, Python and Go, the escape artist, audit show/verify and doctor.
package examples_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fledgehq/fledge/testkit/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fledge and runs every example")
	}
	if runtime.GOOS == "windows" {
		t.Skip("the demo is a bash script")
	}
	for _, prog := range []string{"bash", "git", "python3", "go"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("%s not on PATH", prog)
		}
	}
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "fledge")
	build := exec.Command("go", "build", "-o", bin, "./cmd/fledge")
	build.Dir = repo
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repo, "scripts", "demo.sh"))
	cmd.Dir = t.TempDir()
	// The demo makes its own throwaway HOME; pointing ours at a temp dir as well proves it
	// never needs the real one.
	cmd.Env = append(os.Environ(), "FLEDGE_BIN="+bin, "CI=true", "HOME="+t.TempDir(), "TMPDIR="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run() // stdin is /dev/null
	text := stdout.String() + stderr.String()
	require.NoError(t, err, "demo failed:\n%s", text)

	// Every hello answered every question with its default, in every language.
	for _, p := range []string{"hello-bash", "hello-python", "hello-go"} {
		assert.Contains(t, text, "installed "+p+" 0.1.0")
	}
	assert.Equal(t, 3, strings.Count(text, "Answers: name=world count=3 shout=false style=casual also=en fr"), text)
	assert.Contains(t, text, "Answers: name=Ada count=3")
	assert.Contains(t, text, "Run #2 of this plugin here")
	assert.Contains(t, text, "exec 'sleep 5' with a 1s timeout: code 124, timed_out=true")
	assert.Contains(t, text, "metadata: 1 changed file(s), 1 commit(s), latest:")
	for _, level := range []string{"debug", "info", "warn", "error"} {
		assert.Contains(t, text, "[hello-bash] "+level+": ")
	}
	assert.Contains(t, text, "ok: ", "audit verify passes on the real log")
	assert.Regexp(t, `after editing record on line \d+: `, text, "audit verify fails on the edited copy")
	assert.Contains(t, text, "All good.")

	// The JSON-RPC 2.0 tool/hook plugin: its tool and hooks through fledge, and through fledge serve.
	// Install lists what it declares under the heading, never the heading alone.
	assert.Contains(t, text, "Plugin project-info declares these capabilities:\n  network ")
	assert.Contains(t, text, "\n  filesystem=project ")
	assert.Contains(t, text, "Granting: filesystem=project\n")
	assert.Contains(t, text, "installed project-info 1.0.0 (commands: project-info; granted: filesystem=project)")
	assert.Contains(t, text, "README.md: 2 lines")
	assert.Contains(t, text, "context_enhance: the project's files were added to the prompt")
	assert.Contains(t, text, `{"action":"stop","arguments":"rm -rf /","result":"{\"error\":\"blocked: rm -rf\"}","tool_name":"shell"}`)
	assert.Contains(t, text, `{"id":2,"jsonrpc":"2.0","result":{"result":"fledge.toml: 2 lines","success":true}}`)

	m := regexp.MustCompile(`sandbox: ([a-z]+) \(landlock ABI (\d+), cgroup ([a-z0-9]+)\)`).FindStringSubmatch(text)
	require.NotNil(t, m, "escape-artist header missing:\n%s", text)
	testutil.SkipUnlessSupported(t, m[1] != "none", "no filesystem confinement: the escape artist is expected to get out")
	assert.NotContains(t, text, "[ESCAPED]")
	assert.Regexp(t, `escape-artist: \d+ blocked, 0 escaped`, text)
	for _, attempt := range []string{
		"exec with cwd ../..", "exec with cwd /etc", "exec with cwd through a symlink",
		"read ~/.ssh/id_rsa, from the plugin process", "read ~/.ssh/id_rsa, from an exec",
		"append to plugins.toml (grant itself more), from an exec", "rewrite its own code, from the plugin process",
		"read hello-bash's state.json, from an exec", "find secrets in the environment, from an exec",
		"setsid daemon outliving its exec",
	} {
		assert.Contains(t, text, "[BLOCKED] "+attempt, attempt)
	}
	assert.Regexp(t, `\[BLOCKED\] setsid daemon \d+: gone with its sandbox`, text)
	// Where the kernel scopes signals (Landlock ABI 6+) and there is a cgroup, the attempts
	// that could do real damage are made, not skipped: doctor says they are enforced.
	if abi, _ := strconv.Atoi(m[2]); abi >= 6 && m[3] != "none" {
		assert.NotContains(t, text, "[SKIPPED]")
		assert.Regexp(t, `escape-artist: \d+ blocked, 0 escaped, 0 skipped`, text)
		for _, attempt := range []string{
			"write ~/pwned, from the plugin process", "write ~/pwned, from an exec",
			"fork bomb (10000 sleepers, from an exec): the pids limit",
			"kill -9 -1 (every process it may signal), from an exec: its own sleep was killed",
		} {
			assert.Contains(t, text, "[BLOCKED] "+attempt, attempt)
		}
		assert.Regexp(t, `\[BLOCKED\] kill -9 fledge \(pid \d+\), from the plugin process: (EPERM|ESRCH)`, text)
		assert.Regexp(t, `\[BLOCKED\] kill -9 fledge \(pid \d+\), from an exec: `, text)
		assert.Regexp(t, `\[BLOCKED\] kill -9 -1: a process outside the sandbox \(pid \d+\) is alive`, text)
		assert.Contains(t, text, "[BLOCKED] ~/pwned does not exist")
	}
	// A block claimed in the after-check must be for an attempt that was made.
	if strings.Contains(text, "[SKIPPED] kill -9 -1") {
		assert.NotContains(t, text, "[BLOCKED] kill -9 -1: a process outside")
	}
	assert.Contains(t, text, "[BLOCKED] plugins.toml is unchanged")
	// Denied (Landlock alone) or absent (the private filesystem view): never read.
	assert.Regexp(t, `~/.ssh/id_rsa from the plugin: \S+/.ssh/id_rsa: (Permission denied|No such file or directory) \(exit 1\)`, text)
}
