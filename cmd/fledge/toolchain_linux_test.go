// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pyverPlugin is an ordinary Python fledge-v1 plugin: `#!/usr/bin/env python3`, so it runs
// whatever python3 comes first on PATH, and it execs python3 too.
const pyverPlugin = `#!/usr/bin/env python3
import json, sys
json.loads(sys.stdin.readline())
def send(m):
    sys.stdout.write(json.dumps(m) + "\n")
    sys.stdout.flush()
send({"type": "output", "text": "PLUGIN %s %s\n" % (sys.version.split()[0], sys.executable)})
send({"type": "exec", "id": "1", "command": "python3 -c 'import sys; print(sys.executable)'"})
r = json.loads(sys.stdin.readline())["value"]
send({"type": "output", "text": "EXEC code=%d out=%s err=%s\n" % (r["code"], r["stdout"].strip(), r["stderr"].strip())})
`

// toolEnv is a throwaway home with the pyver plugin installed (exec granted) and path as
// PATH.
func toolEnv(t *testing.T, path, config string) *ptyEnv {
	t.Helper()
	return toolEnvIn(t, newPtyEnv(t, config), path)
}

func (e *ptyEnv) run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(e.fledge, args...)
	cmd.Env, cmd.Dir = e.env, e.work
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

// pyenvRoot is the machine's pyenv install (the real one: its shim, libexec and versions).
func pyenvRoot(t *testing.T) string {
	t.Helper()
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".pyenv")
	}
	if _, err := os.Stat(filepath.Join(root, "shims", "python3")); err != nil {
		t.Skipf("no pyenv with a python3 shim at %s", root)
	}
	root, err := filepath.EvalSymlinks(root)
	require.NoError(t, err)
	return root
}

// TestPyenvShimPlugin: with pyenv's shims first on PATH (the common setup of a Python
// developer), a `#!/usr/bin/env python3` plugin runs through the real sandbox on pyenv's
// python, its exec of python3 works too, and doctor names the manager.
func TestPyenvShimPlugin(t *testing.T) {
	root := pyenvRoot(t)
	e := toolEnv(t, filepath.Join(root, "shims")+":/usr/local/bin:/usr/bin:/bin", "")
	out, code := e.run(t, "--ni", "pyver")
	require.Equal(t, 0, code, "output:\n%s", out)
	assert.Regexp(t, `PLUGIN \S+ `+regexpQuote(filepath.Join(root, "versions"))+`/`, out, "the plugin runs on pyenv's python")
	assert.Regexp(t, `EXEC code=0 out=`+regexpQuote(filepath.Join(root, "versions"))+`/\S+ err=\n`, out, "its exec of python3 works")

	// pyenv picks the version from .python-version in the working dir or a parent: that file
	// is readable, so a pinned version is the one that runs, as outside fledge.
	pinned := otherPyenvVersion(t, root, out)
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(e.work), ".python-version"), []byte(pinned+"\n"), 0o644))
	out, code = e.run(t, "--ni", "pyver")
	require.Equal(t, 0, code, "output:\n%s", out)
	assert.Contains(t, out, "PLUGIN "+pinned+" "+filepath.Join(root, "versions", pinned), "the pinned version runs the plugin")
	assert.Contains(t, out, "EXEC code=0 out="+filepath.Join(root, "versions", pinned), "and its exec")

	doc, code := e.run(t, "doctor")
	require.Equal(t, 0, code, doc)
	assert.Contains(t, doc, "version manager:  pyenv from PATH entry "+filepath.Join(root, "shims")+": "+root+" read+execute")
}

// TestReadOnlyToolchainTree: a shim of a manager fledge does not know (its own tree in
// $HOME, a shim that execs a program elsewhere in the tree) fails with an error that names
// the path it needed and the config line that grants it; with that line it runs.
func TestReadOnlyToolchainTree(t *testing.T) {
	e := newPtyEnv(t, "")
	tool := filepath.Join(e.home, ".mytool")
	require.NoError(t, os.MkdirAll(filepath.Join(tool, "shims"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(tool, "libexec"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tool, "shims", "python3"),
		[]byte("#!/usr/bin/env bash\nexec \""+filepath.Join(tool, "libexec", "mytool")+"\" \"$@\"\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tool, "libexec", "mytool"),
		[]byte("#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n"), 0o755))
	path := filepath.Join(tool, "shims") + ":/usr/local/bin:/usr/bin:/bin"

	e = toolEnvIn(t, e, path)
	out, code := e.run(t, "--ni", "pyver")
	assert.Equal(t, 127, code, "output:\n%s", out)
	want := `fledge: plugin pyver exited with code 127: its interpreter needs ` + filepath.Join(tool, "libexec", "mytool") +
		` (run by ` + filepath.Join(tool, "shims", "python3") + `), which the sandbox does not grant: add read_only = ["` + tool + `"] under [sandbox] in ` +
		filepath.Join(e.home, ".config", "fledge", "config.toml")
	assert.Contains(t, out, want)

	require.NoError(t, os.WriteFile(filepath.Join(e.home, ".config", "fledge", "config.toml"),
		[]byte("[sandbox]\nread_only = [\""+tool+"\"]\n"), 0o600))
	out, code = e.run(t, "--ni", "pyver")
	require.Equal(t, 0, code, "output:\n%s", out)
	assert.Contains(t, out, "EXEC code=0 out=/usr/bin/python3")
}

// jsonrpcPy is a JSON-RPC 2.0 tool plugin (the kind the seed's examples are) in Python.
const jsonrpcPy = `#!/usr/bin/env python3
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m["method"] == "initialize":
        r = {"name": "rpcpy", "version": "1.0.0", "description": "py", "hooks": [], "tools": [], "priority": 500}
    else:
        r = {"ok": True}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
    if m["method"] == "shutdown":
        break
`

// The same for a JSON-RPC plugin: its install-time handshake fails with the path and the
// line, and works with the line.
func TestReadOnlyToolchainTreeJSONRPC(t *testing.T) {
	e := newPtyEnv(t, "")
	tool := filepath.Join(e.home, ".mytool")
	require.NoError(t, os.MkdirAll(filepath.Join(tool, "shims"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(tool, "libexec"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tool, "shims", "python3"),
		[]byte("#!/usr/bin/env bash\nexec \""+filepath.Join(tool, "libexec", "mytool")+"\" \"$@\"\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tool, "libexec", "mytool"),
		[]byte("#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n"), 0o755))
	for i, kv := range e.env {
		if strings.HasPrefix(kv, "PATH=") {
			e.env[i] = "PATH=" + filepath.Join(tool, "shims") + ":/usr/local/bin:/usr/bin:/bin"
		}
	}
	src := filepath.Join(filepath.Dir(e.home), "src", "rpcpy")
	require.NoError(t, os.MkdirAll(filepath.Dir(src), 0o700))
	require.NoError(t, os.WriteFile(src, []byte(jsonrpcPy), 0o755))

	out, code := e.run(t, "--ni", "plugins", "install", src, "--protocol", "jsonrpc-2.0", "--grant", "")
	assert.NotEqual(t, 0, code, out)
	assert.Contains(t, out, "its interpreter needs "+filepath.Join(tool, "libexec", "mytool"))
	assert.Contains(t, out, `add read_only = ["`+tool+`"] under [sandbox] in `+filepath.Join(e.home, ".config", "fledge", "config.toml"))

	require.NoError(t, os.WriteFile(filepath.Join(e.home, ".config", "fledge", "config.toml"),
		[]byte("[sandbox]\nread_only = [\""+tool+"\"]\n"), 0o600))
	out, code = e.run(t, "--ni", "plugins", "install", src, "--protocol", "jsonrpc-2.0", "--grant", "")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "installed rpcpy 1.0.0")
}

// toolEnvIn installs pyver into e with path as PATH.
func toolEnvIn(t *testing.T, e *ptyEnv, path string) *ptyEnv {
	t.Helper()
	for i, kv := range e.env {
		if strings.HasPrefix(kv, "PATH=") {
			e.env[i] = "PATH=" + path
		}
	}
	src := filepath.Join(filepath.Dir(e.home), "src", "pyver")
	require.NoError(t, os.MkdirAll(src, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(src, "plugin.toml"), []byte(pyverManifest), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "pyver.py"), []byte(pyverPlugin), 0o755))
	install := exec.Command(e.fledge, "--ni", "plugins", "install", "--yes", src)
	install.Env, install.Dir = e.env, e.work
	out, err := install.CombinedOutput()
	require.NoError(t, err, "install: %s", out)
	return e
}

const pyverManifest = `[plugin]
name = "pyver"
version = "0.1.0"
protocol = "fledge-v1"

[[commands]]
name = "pyver"
binary = "pyver.py"

[capabilities]
exec = true
`

// otherPyenvVersion is an installed pyenv version with a python3 other than the one out
// shows running.
func otherPyenvVersion(t *testing.T, root, out string) string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(root, "versions"))
	require.NoError(t, err)
	for _, e := range es {
		if _, err := os.Stat(filepath.Join(root, "versions", e.Name(), "bin", "python3")); err == nil &&
			strings.HasPrefix(e.Name(), "3.") && !strings.Contains(out, "PLUGIN "+e.Name()+" ") {
			return e.Name()
		}
	}
	t.Skip("only one pyenv python3 installed")
	return ""
}

func regexpQuote(s string) string { return strings.NewReplacer(".", `\.`, "+", `\+`).Replace(s) }
