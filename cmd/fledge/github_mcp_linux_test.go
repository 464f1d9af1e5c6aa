// SPDX-License-Identifier: MIT

//go:build linux

package main

import (
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/testkit/testutil"
)

// pkgGitHub is the official GitHub MCP server, pinned.
const (
	pkgGitHub     = "@modelcontextprotocol/server-github"
	pkgGitHubVer  = "2025.4.8"
	githubToken   = "ghp_standInToken7Qx2Lm9Rw4Kz"
	githubMarker  = 31337 // total_count only the stand-in answers
	githubToolArg = "fledge-sandbox"
)

var npmOfflineRe = regexp.MustCompile(`ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|registry is unreachable|ENOTCACHED`)

// The official GitHub MCP server from npm, installed with `--secret
// GITHUB_PERSONAL_ACCESS_TOKEN@api.github.com:443`, answers a tool call through `fledge
// tools call` with what a stand-in for api.github.com (found by that name, at an address
// on no private range) returned, and the stand-in got `Bearer <the real token>`. The server
// held only the placeholder: fledge's record of the request names the secret it put in
// (it replaces the placeholder; a server holding the value would have sent no placeholder),
// and the token is in no output of the server, of fledge, or of the audit log.
func TestGitHubMCPServerBoundToken(t *testing.T) {
	for _, p := range []string{"/usr/bin/node", "/usr/bin/npm"} {
		if _, err := os.Stat(p); err != nil {
			testutil.SkipUnlessSupported(t, false, p+" not installed")
		}
	}
	si := newStandIn(t, []string{"api.github.com"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		if r.Method != http.MethodGet || r.URL.Path != "/search/repositories" || r.URL.Query().Get("q") != githubToolArg {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"message":"Not Found"}`))
			return
		}
		_, _ = w.Write([]byte(`{"total_count":31337,"incomplete_results":false,"items":[]}`))
	}))

	e := newPtyEnv(t, "")
	realHome, err := os.UserHomeDir()
	require.NoError(t, err)
	// npm's cache is the machine's (an install works offline once it worked online).
	e.env = append(e.env, "npm_config_cache="+filepath.Join(realHome, ".npm"), "npm_config_update_notifier=false",
		"GITHUB_PERSONAL_ACCESS_TOKEN="+githubToken)
	out, code := e.run(t, "--ni", "plugins", "install", "npm:"+pkgGitHub, "--version", pkgGitHubVer,
		"--secret", "GITHUB_PERSONAL_ACCESS_TOKEN@api.github.com:443", "--filesystem", "none", "--yes")
	if code != 0 && npmOfflineRe.MatchString(out) {
		t.Skipf("npm cannot reach the registry (and %s@%s is not in its cache):\n%s", pkgGitHub, pkgGitHubVer, out)
	}
	require.Equal(t, 0, code, "install: %s", out)
	assert.Contains(t, out, "plugin_server-github_search_repositories")
	assert.Contains(t, out, "api.github.com:443", "install shows the bound destination")
	assert.NotContains(t, out, githubToken)
	toml, err := os.ReadFile(filepath.Join(e.home, ".config", "fledge", "plugins", "server-github", "plugin.toml"))
	require.NoError(t, err)
	assert.Contains(t, string(toml), `secrets = ["GITHUB_PERSONAL_ACCESS_TOKEN@api.github.com:443"]`)

	res, code := si.run(t, e, "tools", "call", "plugin_server-github_search_repositories", "query="+githubToolArg, "--json")
	t.Logf("tools call:\n%s", res)
	require.Equal(t, 0, code, res)
	assert.Contains(t, res, "31337", "the tool's result came from the stand-in")
	reqs := si.requests()
	require.Len(t, reqs, 1, "one request reached the stand-in: %+v", reqs)
	assert.Equal(t, "/search/repositories", reqs[0].Path)
	assert.Equal(t, "Bearer "+githubToken, reqs[0].Auth, "the stand-in got the real token")

	recs, raw := auditRecords(t, e)
	var injected int
	for _, r := range recs {
		if r.Event == "net_http" && r.Decision == "allow" && r.Details["host"] == "api.github.com" {
			s, _ := r.Details["secret"].([]any)
			require.Equal(t, []any{"GITHUB_PERSONAL_ACCESS_TOKEN"}, s, "the request carried the placeholder, fledge put the token in:\n%s", raw)
			assert.Equal(t, "/search/repositories?page=&per_page=&q=", r.Details["path"], "the query's names, none of its values")
			injected++
		}
	}
	assert.Equal(t, 1, injected, "one net_http record:\n%s", raw)

	log, err := os.ReadFile(filepath.Join(e.home, ".local", "state", "fledge", "audit.jsonl"))
	require.NoError(t, err)
	b64 := base64.StdEncoding.EncodeToString([]byte(githubToken))
	for where, text := range map[string]string{"the audit log": string(log), "the tool call's output and the server's stderr": res,
		"the install's output": out} {
		assert.NotContains(t, text, githubToken, "the token in %s", where)
		assert.NotContains(t, text, b64, "the token in %s", where)
	}
}
