// SPDX-License-Identifier: MIT

package examples_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
)

// TestWasmPluginEndToEnd installs the Go-built WASM example from a directory and runs it
// with `fledge --ni` through a real fledge binary: the module runs in fledge's WASM runtime,
// its exec goes through the normal exec path (exec_decision on record), plugin_start records
// the module.
func TestWasmPluginEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fledge and a wasm module")
	}
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "fledge")
	goBuild := func(env []string, args ...string) {
		cmd := exec.Command("go", append([]string{"build"}, args...)...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	goBuild(nil, "-o", bin, "./cmd/fledge")

	// The plugin source dir, with its module built (as its README says) before install.
	src := filepath.Join(tmp, "src", "hello-wasm")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "bin"), 0o755))
	for _, f := range []string{"plugin.toml", "main.go"} {
		b, err := os.ReadFile(filepath.Join("hello-wasm", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(src, f), b, 0o644))
	}
	module := filepath.Join(src, "bin", "hello-wasm.wasm")
	goBuild([]string{"GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0"}, "-o", module, "./examples/hello-wasm")
	// A module is data for the runtime: install and run need no execute bit.
	require.NoError(t, os.Chmod(module, 0o644))

	home := filepath.Join(tmp, "home")
	proj := filepath.Join(tmp, "proj")
	require.NoError(t, os.MkdirAll(home, 0o700))
	require.NoError(t, os.MkdirAll(proj, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proj, "fledge.toml"), []byte("[project]\nname = \"proj\"\n"), 0o644))
	auditLog := filepath.Join(home, ".local", "state", "fledge", "audit.jsonl")
	env := append(os.Environ(),
		"HOME="+home, "FLEDGE_CONFIG_DIR="+filepath.Join(home, ".config", "fledge"),
		"FLEDGE_AUDIT_LOG="+auditLog, "XDG_CONFIG_HOME=", "XDG_STATE_HOME=",
		"SECRET_TOKEN=must-not-reach-the-module")
	fledge := func(args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = proj
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}

	out, errOut, err := fledge("--ni", "plugins", "install", src, "--yes")
	require.NoError(t, err, "install:\n%s\n%s", out, errOut)
	assert.Contains(t, out+errOut, "installed hello-wasm 0.1.0")
	assert.NotContains(t, out+errOut, "not executable")
	// Install compiled the module into the cache: the first run only loads it.
	assert.Contains(t, errOut, "compiling bin/hello-wasm.wasm (WebAssembly)")
	cached, err := os.ReadDir(filepath.Join(home, ".local", "state", "fledge", "wasm-cache"))
	require.NoError(t, err)
	assert.NotEmpty(t, cached)

	out, _, err = fledge("plugins", "info", "hello-wasm")
	require.NoError(t, err)
	assert.Contains(t, out, "runtime:   wasm: confined by the runtime on every OS")
	assert.Contains(t, out, "/project = <project> (ro)")
	assert.Contains(t, out, "/plugin = "+filepath.Join(home, ".config", "fledge", "plugins", "hello-wasm", "data")+" (rw)")
	out, _, err = fledge("doctor")
	require.NoError(t, err)
	assert.Contains(t, out, "a wasm plugin:    confined by the runtime on every OS")

	out, errOut, err = fledge("--ni", "hello-wasm", "Ada")
	require.NoError(t, err, "run:\n%s\n%s", out, errOut)
	assert.Contains(t, out, "Hello, Ada, from WebAssembly! Run #1.\n")
	assert.Contains(t, out, "exec: code 0, exec-ok "+proj)
	assert.Contains(t, out, "fledge.toml: 24 bytes")
	assert.Contains(t, out, "environment: 0 variables")
	out, errOut, err = fledge("--ni", "hello-wasm")
	require.NoError(t, err, "second run:\n%s\n%s", out, errOut)
	assert.Contains(t, out, "Hello, world, from WebAssembly! Run #2.\n", "the store persisted across runs")
	greeted, err := os.ReadFile(filepath.Join(home, ".config", "fledge", "plugins", "hello-wasm", "data", "last-greeted"))
	require.NoError(t, err, "the module wrote its data dir through /plugin")
	assert.Equal(t, "world", string(greeted))

	// A WASM command with typed args is a tool like a native one: the same runtime, grants
	// and audit as `fledge hello-wasm`.
	out, errOut, err = fledge("tools", "list")
	require.NoError(t, err, "tools list:\n%s\n%s", out, errOut)
	assert.Contains(t, out, "plugin_hello-wasm_hello-wasm")
	out, errOut, err = fledge("tools", "call", "plugin_hello-wasm_hello-wasm", "name=Tool")
	require.NoError(t, err, "tools call:\n%s\n%s", out, errOut)
	assert.Contains(t, out, "Hello, Tool, from WebAssembly! Run #3.")

	var starts, decisions, exits []*audit.Record
	require.NoError(t, audit.Read(auditLog, func(r *audit.Record) error {
		switch r.Event {
		case audit.EventPluginStart:
			starts = append(starts, r)
		case audit.EventExecDecision:
			decisions = append(decisions, r)
		case audit.EventPluginExit:
			exits = append(exits, r)
		}
		return nil
	}))
	require.Len(t, starts, 3)
	assert.Equal(t, "wasm", starts[0].Details["runtime"])
	assert.Equal(t, "wasm", starts[2].Details["runtime"], "the tool call ran in the WASM runtime")
	assert.Len(t, starts[0].Details["module_sha256"], 64)
	require.Len(t, decisions, 3)
	assert.Equal(t, audit.Allow, decisions[0].Decision)
	assert.Equal(t, "echo exec-ok; pwd", decisions[0].Details[audit.DetailCommand])
	assert.Equal(t, proj, decisions[0].Details[audit.DetailCwdResolved])
	require.Len(t, exits, 3)
	assert.Equal(t, "ok", exits[1].Reason)
	assert.Equal(t, "ok", exits[2].Reason)

	// The compiled module was cached under fledge's state dir.
	ents, err := os.ReadDir(filepath.Join(home, ".local", "state", "fledge", "wasm-cache"))
	require.NoError(t, err)
	assert.NotEmpty(t, ents)
}

// TestGoWasmScaffoldBuiltByConfinedHook: `fledge plugins new --lang go-wasm`, vendored, is
// built by its [hooks] build step only when install is asked to (--run-hooks), confined, and
// then runs.
func TestGoWasmScaffoldBuiltByConfinedHook(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fledge and a wasm module")
	}
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "fledge")
	build := exec.Command("go", "build", "-o", bin, "./cmd/fledge")
	build.Dir = repo
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	home := filepath.Join(tmp, "home")
	proj := filepath.Join(tmp, "proj")
	require.NoError(t, os.MkdirAll(home, 0o700))
	require.NoError(t, os.MkdirAll(proj, 0o755))
	env := append(os.Environ(), "HOME="+home, "FLEDGE_CONFIG_DIR="+filepath.Join(home, "cfg"),
		"FLEDGE_AUDIT_LOG="+filepath.Join(home, "audit.jsonl"), "XDG_CONFIG_HOME=", "XDG_STATE_HOME=")
	run := func(dir, name string, args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s %v:\n%s", name, args, out)
		return string(out)
	}
	src := filepath.Join(tmp, "gw")
	run(tmp, bin, "plugins", "new", "gw", "--lang", "go-wasm", "--sdk", repo, "--dir", src)

	// Without --run-hooks nothing is built, and the missing module refuses the install.
	cmd := exec.Command(bin, "--ni", "plugins", "install", src, "--yes")
	cmd.Env = env
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "they were not run")

	// Offline, from this checkout and the module cache, as the scaffold test builds it.
	goEnv := []string{"GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off"}
	gocmd := func(args ...string) {
		c := exec.Command("go", args...)
		c.Dir, c.Env = src, append(os.Environ(), goEnv...)
		out, err := c.CombinedOutput()
		require.NoError(t, err, "go %v:\n%s", args, out)
	}
	gocmd("mod", "tidy")
	gocmd("mod", "vendor")
	out2 := run(tmp, bin, "--ni", "plugins", "install", src, "--yes", "--run-hooks")
	assert.Contains(t, out2, "installed gw 0.1.0")
	_, err = os.Stat(filepath.Join(src, "bin"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the hook built in the staged copy, not in the source dir")
	assert.Contains(t, run(proj, bin, "--ni", "gw"), "Hello, world! This is run #1 of gw.")
}
