// SPDX-License-Identifier: MIT

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/stretchr/testify/assert"

	"github.com/fledgehq/fledge/sandbox/stub"
)

func TestMain(m *testing.M) {
	// Must come first: the sandbox re-executes this test binary as its stub.
	stub.MaybeRun()
	testscript.Main(m, map[string]func(){
		"fledge": func() { os.Exit(Main(os.Args[1:], defaultStreams())) },
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("testdata", "script"),
		Setup: func(e *testscript.Env) error {
			home := filepath.Join(e.WorkDir, "home")
			if err := os.MkdirAll(home, 0o700); err != nil {
				return err
			}
			e.Setenv("HOME", home)
			e.Setenv("FLEDGE_CONFIG_DIR", filepath.Join(home, ".config", "fledge"))
			e.Setenv("FLEDGE_AUDIT_LOG", filepath.Join(home, ".local", "state", "fledge", "audit.jsonl"))
			// Commits in scripts must not depend on a global git identity (CI has none).
			for k, v := range map[string]string{
				"GIT_AUTHOR_NAME": "fledge test", "GIT_AUTHOR_EMAIL": "test@fledge.invalid",
				"GIT_COMMITTER_NAME": "fledge test", "GIT_COMMITTER_EMAIL": "test@fledge.invalid",
			} {
				e.Setenv(k, v)
			}
			e.Setenv("XDG_CONFIG_HOME", "")
			e.Setenv("XDG_STATE_HOME", "")
			// System dirs first: a pyenv-style shim under $HOME is not executable in the sandbox.
			e.Setenv("PATH", "/usr/local/bin:/usr/bin:/bin:"+e.Getenv("PATH"))
			// Plugins the scripts install from files (the JSON-RPC 2.0 spec's examples, verbatim).
			td, err := filepath.Abs("testdata")
			if err != nil {
				return err
			}
			e.Setenv("TESTDATA", td)
			return nil
		},
		RequireExplicitExec: true,
		Condition:           scriptCondition,
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"status":  cmdStatus,
			"tmpfs":   cmdTmpfs,
			"fillfs":  cmdFillfs,
			"loopdev": cmdLoopdev,
		},
	})
}

// cmdStatus runs a command and checks its exact exit status: status CODE cmd args...
// (testscript's exec only knows success or failure; the CLI contract has typed exit codes).
func cmdStatus(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: status CODE command [args...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("status: bad code %q", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		got = ee.ExitCode()
	} else if err != nil {
		ts.Fatalf("status: %v", err)
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", args[1], got, want)
	}
}

// A plugin's words in fledge's final error line (a tool's error message, say) cannot drive
// the terminal: escape sequences are stripped, a bare CR cannot overwrite the line.
func TestPrintErrorSanitizesPluginText(t *testing.T) {
	var b bytes.Buffer
	printError(&b, "tool plugin_x_y: \x1b]0;pwned\x07the tool failed\rOK (reason: tool_failed)")
	out := b.String()
	assert.NotContains(t, out, "\x1b]")
	assert.NotContains(t, out, "\x07")
	assert.NotContains(t, out, "\r")
	assert.Contains(t, out, "the tool failed")
	assert.True(t, strings.HasPrefix(out, "fledge: tool plugin_x_y: "), out)
}
