// SPDX-License-Identifier: MIT

package plugin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The wrapper passes the user's arguments and environment literally: quotes, $(...) and
// backticks are text, never shell; only the three placeholders expand.
func TestWrapperScriptQuotesEverything(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "pwned")
	args := []string{"it's", "$(touch " + marker + ")", "`touch " + marker + "`", "a b", "${FLEDGE_PROJECT_ROOT}/sub", "${HOME}", "x${FLEDGE_DATA_DIR}y"}
	env := []string{"NOTE=$(touch " + marker + ") ${FLEDGE_DATA_DIR}"}
	// printf stands in for node: one argument per line, then the env value.
	script := wrapperScript("/bin/sh", "print.sh", args, env)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bin", "server"), []byte(script), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "print.sh"), []byte(`for a in "$@"; do printf '%s\n' "$a"; done; printf 'NOTE=%s\n' "$NOTE"`), 0o644))
	cmd := exec.Command(filepath.Join(dir, "bin", "server"))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "FLEDGE_PROJECT_ROOT=/proj", "FLEDGE_DATA_DIR=/data", "HOME=/home/u"}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	want := []string{"it's", "$(touch " + marker + ")", "`touch " + marker + "`", "a b", "/proj/sub", "${HOME}", "x/datay",
		"NOTE=$(touch " + marker + ") /data"}
	assert.Equal(t, want, strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"))
	assert.NoFileExists(t, marker)
}

// An argument that is only a placeholder is passed as its value, and left out (not passed
// empty) when the variable is empty: the filesystem server run without a project must not
// read an empty argument as its working directory.
func TestWrapperScriptDropsEmptyPlaceholderArgument(t *testing.T) {
	dir := t.TempDir()
	script := wrapperScript("/bin/sh", "print.sh", []string{"${FLEDGE_PROJECT_ROOT}", "a b", "${FLEDGE_DATA_DIR}"}, nil)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bin", "server"), []byte(script), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "print.sh"), []byte(`printf '%s|' "$#" "$@"`), 0o644))
	run := func(env ...string) string {
		cmd := exec.Command(filepath.Join(dir, "bin", "server"))
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		return string(out)
	}
	assert.Equal(t, "3|/my proj|a b|/data|", run("FLEDGE_PROJECT_ROOT=/my proj", "FLEDGE_DATA_DIR=/data"))
	assert.Equal(t, "2|a b|/data|", run("FLEDGE_DATA_DIR=/data"), "no project: no argument")
	assert.Equal(t, "2|a b|/data|", run("FLEDGE_PROJECT_ROOT=", "FLEDGE_DATA_DIR=/data"))
}

func TestNPMRequestCheck(t *testing.T) {
	ok := NPMRequest{Package: "@modelcontextprotocol/server-filesystem", Version: "^2026.8.0", Args: []string{"/x"}, Env: []string{"A_B=c"},
		Secrets: []string{"GITHUB_TOKEN@api.github.com:443", "OTHER"}}
	require.NoError(t, ok.Check())
	for _, r := range []NPMRequest{
		{Package: "--registry=http://evil"},
		{Package: "../../etc"},
		{Package: "Upper"},
		{Package: "ok", Version: "--foo"},
		{Package: "ok", Version: "file:relative.tgz"},
		{Package: "ok", Version: "file:/abs/not-a-tarball"},
		{Package: "ok", Version: "http://x/y.tgz"},
		{Package: "ok", Env: []string{"PATH=/tmp"}},
		{Package: "ok", Env: []string{"LD_PRELOAD=/x.so"}},
		{Package: "ok", Env: []string{"NODE_OPTIONS=--require /x"}},
		{Package: "ok", Env: []string{"FLEDGE_PROJECT_ROOT=/"}},
		{Package: "ok", Env: []string{"no-equals"}},
		{Package: "ok", Args: []string{"a\x1b[2J"}},
		{Package: "ok", Name: "Bad Name"},
		{Package: "ok", Filesystem: "root"},
		{Package: "ok", Secrets: []string{"PATH"}},
		{Package: "ok", Secrets: []string{"T@"}},
		{Package: "ok", Secrets: []string{"T@10.0.0.1:443"}},
		{Package: "ok", Secrets: []string{"T@api.github.com:443", "T"}},
		{Package: "ok", Secrets: []string{"T@api.github.com:443"}, Env: []string{"T=x"}},
	} {
		assert.ErrorIs(t, r.Check(), ErrBadSource, "%+v", r)
	}
	assert.Equal(t, "server-filesystem", ok.pluginName())
}

// No npm (or node): ErrNoNPM, and nothing was written.
func TestFetchNPMWithoutNPM(t *testing.T) {
	dir := t.TempDir()
	_, err := FetchNPM(context.Background(), NPMOptions{Request: NPMRequest{Package: "x"}, Dir: dir, NPM: filepath.Join(dir, "no-npm"), Node: "/bin/sh"})
	require.ErrorIs(t, err, ErrNoNPM)
	ents, _ := os.ReadDir(dir)
	assert.Empty(t, ents)
}

func TestParsePackageSource(t *testing.T) {
	kind, pkg, v, err := ParsePackageSource("npm:@scope/pkg@1.2.3")
	require.NoError(t, err)
	assert.Equal(t, []string{"npm", "@scope/pkg", "1.2.3"}, []string{kind, pkg, v})
	kind, pkg, v, err = ParsePackageSource("npm:@scope/pkg")
	require.NoError(t, err)
	assert.Equal(t, []string{"npm", "@scope/pkg", ""}, []string{kind, pkg, v})
	kind, _, _, err = ParsePackageSource("pypi:mcp-server-git")
	require.NoError(t, err)
	assert.Equal(t, "pypi", kind)
	_, _, _, err = ParsePackageSource("/a/dir")
	require.ErrorIs(t, err, ErrBadSource)
}

// The MCP registry's server.json: the npm entry's arguments and environment, value else
// default; other registries' entries and other packages are ignored.
func TestReadServerJSON(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "server.json"), []byte(`{
  "name": "io.github.x/srv", "version": "1.0.0",
  "packages": [
    {"registryType": "pypi", "identifier": "srv", "packageArguments": [{"type": "positional", "value": "nope"}]},
    {"registryType": "npm", "identifier": "@x/srv",
     "packageArguments": [{"type": "positional", "default": "${FLEDGE_PROJECT_ROOT}"}, {"type": "named", "name": "--mode", "value": "ro"}, {"type": "positional"}],
     "environmentVariables": [{"name": "LOG_LEVEL", "default": "info"}, {"name": "TOKEN", "isRequired": true}]}
  ]}`), 0o644))
	sj, err := readServerJSON(dir, "@x/srv")
	require.NoError(t, err)
	require.NotNil(t, sj)
	assert.Equal(t, []string{"${FLEDGE_PROJECT_ROOT}", "--mode", "ro"}, sj.args)
	assert.Equal(t, []string{"LOG_LEVEL=info"}, sj.env)
	sj, err = readServerJSON(dir, "@other/pkg")
	require.NoError(t, err)
	assert.Nil(t, sj)
}

func TestRegistryDestination(t *testing.T) {
	for in, want := range map[string]string{
		"https://registry.npmjs.org/":      "registry.npmjs.org:443",
		"http://127.0.0.1:4873/":           "127.0.0.1:4873",
		"https://Npm.Example.COM:8443/x/y": "npm.example.com:8443",
		"http://mirror.local/":             "mirror.local:80",
		"":                                 "",
		"file:///srv/npm":                  "",
		"ftp://x/":                         "",
		"not a url":                        "",
	} {
		if got := RegistryDestination(in); got != want {
			t.Errorf("RegistryDestination(%q) = %q, want %q", in, got, want)
		}
	}
}

// The entry point comes from the package's own package.json (its "bin" or "main"): a file
// name holding $(...) is a name, never shell, in the wrapper.
func TestWrapperScriptQuotesEntry(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "pwned")
	entry := "we$(touch pwned)ird`touch pwned`\".sh"
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bin", "server"), []byte(wrapperScript("/bin/sh", entry, []string{"a"}, nil)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, entry), []byte(`printf 'ran %s\n' "$1"`), 0o644))
	cmd := exec.Command(filepath.Join(dir, "bin", "server"))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Equal(t, "ran a\n", string(out))
	assert.NoFileExists(t, marker)
}

// A secret the user declared (--secret) is fledge's to set: a package's server.json default
// for that name is not written into the wrapper, whose export would replace the placeholder
// (or value) fledge gives the server; the manifest declares the secret, bound as asked.
func TestFetchNPMSecretNotSetByServerJSON(t *testing.T) {
	dir := t.TempDir()
	bin := t.TempDir()
	npm := filepath.Join(bin, "npm")
	require.NoError(t, os.WriteFile(npm, []byte(`#!/bin/sh
[ "$1" = install ] || exit 0
p=node_modules/@x/srv
mkdir -p $p
echo '{"name":"@x/srv","version":"1.0.0","bin":{"srv":"index.js"}}' > $p/package.json
echo '{"packages":[{"registryType":"npm","identifier":"@x/srv","environmentVariables":[
  {"name":"GITHUB_TOKEN","default":"from-server-json"},{"name":"OTHER","default":"kept"}]}]}' > $p/server.json
: > $p/index.js
echo '{"lockfileVersion":3,"packages":{}}' > package-lock.json
`), 0o755))
	pk, err := FetchNPM(context.Background(), NPMOptions{Dir: dir, NPM: npm, Node: "/bin/sh",
		Request: NPMRequest{Package: "@x/srv", Secrets: []string{"GITHUB_TOKEN@API.github.com:443"}}})
	require.NoError(t, err)
	wrapper, err := os.ReadFile(filepath.Join(dir, "bin", "server"))
	require.NoError(t, err)
	assert.NotContains(t, string(wrapper), "GITHUB_TOKEN")
	assert.Contains(t, string(wrapper), "export OTHER=")
	assert.Equal(t, []string{"GITHUB_TOKEN@api.github.com:443"}, pk.Manifest.Capabilities.Secrets)
	assert.Equal(t, []string{"OTHER=kept"}, pk.Request.Env)
}

// A package that ships no server.json gets fledge's known defaults for it (the memory
// server's graph in its data dir); one that ships its own gets its own.
func TestNPMKnownDefaults(t *testing.T) {
	dir := t.TempDir()
	sj, err := defaultsFor(dir, "@modelcontextprotocol/server-memory")
	require.NoError(t, err)
	require.NotNil(t, sj)
	assert.Equal(t, []string{"MEMORY_FILE_PATH=${FLEDGE_DATA_DIR}/memory.jsonl"}, sj.env)
	sj, err = defaultsFor(dir, "@x/unknown")
	require.NoError(t, err)
	assert.Nil(t, sj)
	sj, err = defaultsFor(dir, "@modelcontextprotocol/server-filesystem")
	require.NoError(t, err)
	require.NotNil(t, sj)
	assert.Equal(t, []string{"${FLEDGE_PROJECT_ROOT}"}, sj.args, "the filesystem server allows the project from its start")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "server.json"), []byte(`{"packages": [{"registryType": "npm",
  "identifier": "@modelcontextprotocol/server-memory", "environmentVariables": [{"name": "MEMORY_FILE_PATH", "default": "/elsewhere"}]}]}`), 0o644))
	sj, err = defaultsFor(dir, "@modelcontextprotocol/server-memory")
	require.NoError(t, err)
	assert.Equal(t, []string{"MEMORY_FILE_PATH=/elsewhere"}, sj.env, "the package's own server.json wins")
}
