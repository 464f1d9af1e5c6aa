// SPDX-License-Identifier: MIT

package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/reason"
)

// tsFeatures runs testdata/ts_features.mjs (the official TypeScript client walking every
// MCP feature) against `fledge serve --mcp` from dir, and returns what it saw.
// over is "" for stdio (the client starts `fledge serve --mcp`), or "URL TOKEN" of a
// `fledge serve --mcp --listen` to reach over Streamable HTTP.
func tsFeatures(t *testing.T, f *fixture, c *fledgeCLI, sdk, dir, pluginName, over string) map[string]any {
	t.Helper()
	clientDir := filepath.Join(f.base, "client-features")
	if _, err := os.Stat(clientDir); err != nil {
		copyFile(t, filepath.Join("testdata", "ts_features.mjs"), filepath.Join(clientDir, "ts_features.mjs"), 0o755)
		require.NoError(t, os.Symlink(filepath.Join(sdk, "node_modules"), filepath.Join(clientDir, "node_modules")))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	target, args := c.fledge, `["serve","--mcp"]`
	if over != "" {
		target, args, _ = strings.Cut(over, " ")
	}
	cmd := exec.CommandContext(ctx, nodePath(t), filepath.Join(clientDir, "ts_features.mjs"), target, args, pluginName)
	cmd.Dir, cmd.Env = dir, c.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
	var out map[string]any
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &out), stdout.String())
	t.Logf("fledge's stderr:\n%s", lastLines(stderr.String(), 20))
	return out
}

// jsonPath digs into decoded JSON: keys for objects, indexes (as ints) for arrays.
func jsonPath(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func contentTypes(call any) []string {
	var out []string
	for _, c := range asSlice(jsonPath(call, "content")) {
		out = append(out, jsonPath(c, "type").(string))
	}
	return out
}

func asSlice(v any) []any { a, _ := v.([]any); return a }

// The official everything server, installed from npm with sampling and elicitation
// granted, behind `fledge serve --mcp`, driven by the official TypeScript client: every MCP
// feature passes through, named for the plugin (prompts plugin_<plugin>_<name>, resource
// URIs fledge:<plugin>/<uri>), tool results come back as the server gave them, and every
// sampling and elicitation request is on record by kind and size.
func TestEverythingServerWholeProtocolThroughServeMCP(t *testing.T) {
	sdk := npmInstall(t, pkgSDK) // skips, saying so, when npm cannot reach the registry
	fledge := buildFledge(t)
	f := newFixture(t, nil)
	c := &fledgeCLI{t: t, f: f, fledge: fledge}
	const name = "server-everything"

	out, errOut, err := c.run("/", "--ni", "plugins", "install", "npm:"+strings.TrimSuffix(pkgEverything, "@2026.8.31"),
		"--version", "2026.8.31", "--yes", "--grant", "sampling,elicitation")
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
	assert.Contains(t, out, "sampling,elicitation")
	assert.Contains(t, out, "plugin_server-everything_trigger-sampling-request", "listed and pinned at install under the sampling it is granted")

	r := tsFeatures(t, f, c, sdk, f.project, name, "")
	checkEverything(t, f, name, r)
}

// TestEverythingServerWholeProtocolOverHTTP is the same walk by the same TypeScript client
// over Streamable HTTP, through `fledge serve --mcp --listen`.
func TestEverythingServerWholeProtocolOverHTTP(t *testing.T) {
	sdk := npmInstall(t, pkgSDK)
	fledge := buildFledge(t)
	f := newFixture(t, nil)
	c := &fledgeCLI{t: t, f: f, fledge: fledge}
	const name = "server-everything"
	out, errOut, err := c.run("/", "--ni", "plugins", "install", "npm:"+strings.TrimSuffix(pkgEverything, "@2026.8.31"),
		"--version", "2026.8.31", "--yes", "--grant", "sampling,elicitation")
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
	s := startHTTPServe(t, c, f.project)
	checkEverything(t, f, name, tsFeatures(t, f, c, sdk, f.project, name, s.url+" "+s.token))
}

// TestEverythingServerWholeProtocolAsRemote walks the everything server run as a remote
// server (its own Streamable HTTP mode on loopback), installed by URL with sampling and
// elicitation granted, through `fledge serve --mcp`: a remote server's prompts, resources,
// logs, progress and requests to the client pass as a local one's.
func TestEverythingServerWholeProtocolAsRemote(t *testing.T) {
	sdk := npmInstall(t, pkgSDK)
	everything := npmInstall(t, pkgEverything)
	fledge := buildFledge(t)
	f := newFixture(t, nil)
	c := &fledgeCLI{t: t, f: f, fledge: fledge}
	url := startEverythingHTTP(t, everything)
	out, errOut, err := c.run(f.project, "--ni", "plugins", "install", url, "--yes", "--grant", "sampling,elicitation")
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
	checkEverything(t, f, "everything", tsFeatures(t, f, c, sdk, f.project, "everything", ""))
}

// checkEverything holds what the TypeScript client saw of the everything server through
// fledge (ts_features.mjs's report) and the audit log to every feature.
func checkEverything(t *testing.T, f *fixture, name string, r map[string]any) {
	t.Helper()
	assert.Empty(t, r["errors"].(map[string]any)["ping"])

	// Capabilities: everything, as one server.
	for _, k := range []string{"tools", "prompts", "resources", "completions", "logging"} {
		assert.NotNil(t, jsonPath(r, "capabilities", k), "fledge offers %s", k)
	}
	assert.Equal(t, true, jsonPath(r, "capabilities", "resources", "subscribe"))

	// Prompts, named as tools are.
	var prompts []string
	for _, p := range asSlice(r["prompts"]) {
		prompts = append(prompts, jsonPath(p, "name").(string))
	}
	for _, p := range []string{"simple-prompt", "args-prompt", "completable-prompt", "resource-prompt"} {
		assert.Contains(t, prompts, "plugin_"+name+"_"+p)
	}
	assert.Equal(t, "user", jsonPath(r, "simplePrompt", "messages", 0, "role"))
	assert.Contains(t, jsonPath(r, "argsPrompt", "messages", 0, "content", "text"), "Lyon", "arguments reach the server")
	var embedded string
	for _, m := range asSlice(jsonPath(r, "resourcePrompt", "messages")) {
		if jsonPath(m, "content", "type") == "resource" {
			embedded, _ = jsonPath(m, "content", "resource", "uri").(string)
		}
	}
	assert.Equal(t, "fledge:"+name+"/demo://resource/dynamic/text/3", embedded, "an embedded resource's URI names its plugin")
	assert.Contains(t, jsonPath(r, "complete", "completion", "values"), "Engineering", "completion of a prompt argument")

	// Resources: every one listed through fledge's pages, wrapped; templates too.
	resources := asSlice(r["resources"])
	require.NotEmpty(t, resources)
	for _, u := range resources {
		assert.True(t, strings.HasPrefix(u.(string), "fledge:"+name+"/"), "%v", u)
	}
	assert.Contains(t, asSlice(r["templates"]), "fledge:"+name+"/demo://resource/dynamic/text/{resourceId}")
	assert.Equal(t, resources[0], jsonPath(r, "readListed", "contents", 0, "uri"))
	assert.Equal(t, "fledge:"+name+"/demo://resource/dynamic/text/7", jsonPath(r, "readTemplated", "contents", 0, "uri"))
	assert.NotEmpty(t, jsonPath(r, "readTemplated", "contents", 0, "text"))
	assert.Contains(t, jsonPath(r, "errors", "readForeign"), "not found", "a URI fledge did not give is no plugin's")

	// Tool definitions and results as the server gave them.
	var structuredTool map[string]any
	for _, tl := range asSlice(r["tools"]) {
		if jsonPath(tl, "name") == "plugin_"+name+"_get-structured-content" {
			structuredTool = tl.(map[string]any)
		}
	}
	require.NotNil(t, structuredTool)
	assert.NotNil(t, structuredTool["outputSchema"], "the output schema is passed on")
	assert.NotNil(t, jsonPath(r, "structured", "structuredContent", "temperature"), "structured content is passed on")
	assert.Contains(t, contentTypes(r["image"]), "image", "an image stays an image")
	assert.Contains(t, contentTypes(r["links"]), "resource_link", "resource links stay links")
	assert.Contains(t, contentTypes(r["embedded"]), "resource", "embedded resources stay embedded")
	assert.Contains(t, contentTypes(r["annotated"]), "image")
	assert.NotNil(t, jsonPath(r, "annotated", "content", 0, "annotations"), "content annotations are passed on")
	for _, cont := range asSlice(jsonPath(r, "links", "content")) {
		if jsonPath(cont, "type") == "resource_link" {
			assert.True(t, strings.HasPrefix(jsonPath(cont, "uri").(string), "fledge:"+name+"/"), "a link names its plugin")
		}
	}
	assert.NotEmpty(t, jsonPath(r, "readLink", "contents", 0), "a tool's resource link is read through fledge: %v", jsonPath(r, "errors", "readLink"))

	// Logging: messages come back with the plugin named.
	require.NotEmpty(t, r["logs"], "the server's log messages reach the client")
	for _, l := range asSlice(r["logs"]) {
		assert.True(t, strings.HasPrefix(jsonPath(l, "logger").(string), name), "%v", l)
	}
	// Subscriptions: an update of the subscribed resource comes back under its wrapped URI.
	assert.Contains(t, asSlice(r["updated"]), "fledge:"+name+"/demo://resource/dynamic/text/1", "errors: %v", r["errors"])

	// Progress with the client's own token, and a cancelled call that ends long before it
	// would have.
	assert.GreaterOrEqual(t, len(asSlice(r["progress"])), 2, "progress notifications pass on")
	assert.NotEmpty(t, jsonPath(r, "errors", "cancelled"), "the cancelled call ends with an error on the client")
	assert.Less(t, r["cancelledAfterMs"].(float64), 10000.0)
	t.Logf("a 30 s call cancelled by the client after 1.5 s ended at the client after %.0f ms; %d progress notifications, %d log messages passed on",
		r["cancelledAfterMs"].(float64), len(asSlice(r["progress"])), len(asSlice(r["logs"])))
	assert.Contains(t, jsonPath(r, "afterCancel", "content", 0, "text"), "still here")

	// Sampling and elicitation, granted: passed to the client and back.
	assert.Len(t, asSlice(r["sampled"]), 1)
	assert.Contains(t, jsonPath(r, "sampling", "content", 0, "text"), "canned answer from the client")
	assert.Len(t, asSlice(r["elicited"]), 1)
	elicited, _ := json.Marshal(jsonPath(r, "elicitation", "content"))
	assert.Contains(t, string(elicited), "Ada Lovelace", "the client's answer reaches the server")

	// The record: each request by kind and size, never its text.
	reqs := f.records(audit.EventClientRequest)
	kinds := map[string]int{}
	for _, rec := range reqs {
		assert.Equal(t, audit.Allow, rec.Decision)
		kinds[rec.Details["kind"].(string)]++
		assert.NotZero(t, rec.Details["request_bytes"])
		raw, _ := json.Marshal(rec)
		assert.NotContains(t, string(raw), "say hi", "the text is not on record")
	}
	assert.Equal(t, map[string]int{"sampling": 1, "elicitation": 1}, kinds)
	assert.Len(t, f.records(audit.EventClientResponse), 2)
	var cancelled bool
	for _, rec := range f.records(audit.EventToolOutcome) {
		if rec.Reason == string(reason.Cancelled) {
			cancelled = true
		}
	}
	assert.True(t, cancelled, "the cancelled call's outcome is on record as cancelled")
	var methods []string
	for _, rec := range f.records(audit.EventServerRequest) {
		methods = append(methods, rec.Details["method"].(string))
	}
	assert.Contains(t, methods, "prompts/get")
	assert.Contains(t, methods, "resources/read")
	assert.Contains(t, methods, "resources/subscribe")
	assert.Contains(t, methods, "completion/complete")
}
