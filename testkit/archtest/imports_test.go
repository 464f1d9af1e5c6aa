// SPDX-License-Identifier: MIT

// Package archtest holds the import rules docs/architecture.md states, as a test: a change
// that breaks one fails here, naming the package, the import and the rule.
package archtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const mod = "github.com/fledgehq/fledge/"

// adapters are the protocol adapters: each is a leaf among them (none imports another), on
// the session core, the catalogue and the shared framing.
var adapters = []string{
	"protocolhost/fledgev1", "protocolhost/jsonrpc", "protocolhost/runtimev1",
	"protocolhost/invokev1", "protocolhost/mcp", "protocolhost/legacy",
}

// rule: no package matching from (a path, or a prefix ending in "/...") but those in
// allowedFrom may import a package matching any of never, unless the import is in except.
type rule struct {
	why         string
	from        string
	allowedFrom []string
	never       []string
	except      []string
}

var rules = []rule{
	{why: "the CLI parses flags, calls protocolhost and prints: no sandbox, policy, session core or adapter of its own",
		from:   "cmd/fledge",
		never:  []string{"sandbox/...", "policy", "protocolhost/...", "internal/..."},
		except: []string{"protocolhost", "protocolhost/tools"}},
	{why: "an adapter decodes its protocol and asks the session core; it never reaches into another adapter",
		// The facade (protocolhost itself) is the one package that imports the adapters.
		from: "protocolhost/...", allowedFrom: []string{"protocolhost"}, never: adapters,
		except: []string{}},
	{why: "the session core knows no protocol",
		from: "protocolhost/core", never: append([]string{"protocolhost", "protocolhost/tools", "sandbox/wasm", "protocol/...", "sandbox/netstack"}, adapters...)},
	{why: "the catalogue knows no protocol: adapters register with it",
		from: "protocolhost/tools", never: append([]string{"protocolhost", "sandbox/wasm", "protocol"}, adapters...)},
	{why: "the WebAssembly runtime is fledge-v1's alone",
		from: "...", allowedFrom: []string{"protocolhost/fledgev1"}, never: []string{"sandbox/wasm"}},
	{why: "policy decides, the backends enforce: policy sees only the sandbox interface",
		from: "policy", never: []string{"sandbox/...", "protocolhost/..."}, except: []string{"sandbox"}},
	{why: "only sandbox/platform picks a backend",
		from: "...", allowedFrom: []string{"sandbox/platform", "sandbox/linux", "sandbox/darwin", "sandbox/fallback"},
		never: []string{"sandbox/linux", "sandbox/darwin", "sandbox/fallback"}},
	{why: "the audit log depends on nothing of fledge but reason codes and the one clipping rule",
		from: "audit", never: []string{"..."}, except: []string{"reason", "ui/clip"}},
	{why: "the OTLP shipper reads the log and nothing else of fledge",
		from: "audit/otlp", never: []string{"..."}, except: []string{"audit", "reason", "ui/clip"}},
	{why: "the auditor's page reads the log and nothing else of fledge",
		from: "audit/report", never: []string{"..."}, except: []string{"audit", "reason", "ui/clip"}},
	{why: "the clipping rule is a leaf every package may use",
		from: "ui/clip", never: []string{"..."}},
	{why: "the sandbox interface depends on nothing of fledge",
		from: "sandbox", never: []string{"..."}},
	{why: "the wire (fledge-v1's types and codec, the line framing) is neutral: no adapter, SDK or store owns it",
		from: "protocol/...", never: []string{"..."}, except: []string{"protocol/lines"}},
	{why: "sandbox backends (the OS ones, the WebAssembly runtime, the egress engine) enforce what they are given: no policy, plugin store, session core or log of their own",
		from: "sandbox/...", never: []string{"policy", "plugin/...", "protocolhost/...", "audit/...", "cmd/...", "scaffold", "sdk"}},
	{why: "product helpers under internal/ sit below everything: they import only each other",
		from: "internal/...", never: []string{"..."}, except: []string{"internal/..."}},
	{why: "test helpers are for tests: product code never imports them",
		from: "...", never: []string{"testkit/..."}, except: []string{}},
	{why: "the plugin store and manifests run nothing: no sandbox backend, no adapter",
		from: "plugin", never: append([]string{"sandbox/...", "protocolhost", "protocolhost/core", "protocolhost/tools"}, adapters...)},
}

type pkg struct {
	ImportPath string
	Imports    []string
}

// match reports whether p (relative to the module) matches pattern.
func match(pattern, p string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

func anyMatch(patterns []string, p string) bool {
	for _, pat := range patterns {
		if match(pat, p) {
			return true
		}
	}
	return false
}

func TestImportRules(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", mod+"...")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, errb.String())
	}
	dec := json.NewDecoder(&out)
	var pkgs []pkg
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 30 {
		t.Fatalf("go list found %d packages: the rules would check nothing", len(pkgs))
	}
	for _, v := range check(rules, pkgs) {
		t.Error(v)
	}
}

// check returns every broken rule, and every rule that matched no package (stale). A
// package importing its own subpackage is checked like any other import: the facade's
// exemption from the adapter rule is spelled out (allowedFrom), so that nothing else is
// exempt with it (protocolhost importing sandbox/wasm, sandbox a backend).
func check(rules []rule, pkgs []pkg) []string {
	var out []string
	checked := map[string]bool{}
	for _, r := range rules {
		for _, p := range pkgs {
			from := strings.TrimPrefix(p.ImportPath, mod)
			if !match(r.from, from) || anyMatch(r.allowedFrom, from) || strings.HasPrefix(from, "testkit/") || strings.HasPrefix(from, "bench/") || strings.HasPrefix(from, "examples") {
				continue
			}
			checked[r.from] = true
			for _, imp := range p.Imports {
				to, ok := strings.CutPrefix(imp, mod)
				if !ok || to == from {
					continue
				}
				if anyMatch(r.never, to) && !anyMatch(r.except, to) {
					out = append(out, fmt.Sprintf("%s imports %s: %s (docs/architecture.md)", from, to, r.why))
				}
			}
		}
	}
	for _, r := range rules {
		if !checked[r.from] {
			out = append(out, fmt.Sprintf("rule %q: no package %s exists: the rule is stale", r.why, r.from))
		}
	}
	return out
}

// The checker catches each kind of break, on made-up import graphs: a rule that cannot
// fail proves nothing.
func TestCheckFindsBreaks(t *testing.T) {
	ok := []pkg{
		{ImportPath: mod + "cmd/fledge", Imports: []string{mod + "protocolhost", mod + "protocolhost/tools", mod + "audit"}},
		{ImportPath: mod + "protocolhost", Imports: []string{mod + "protocolhost/fledgev1", mod + "protocolhost/mcp", mod + "protocolhost/core"}},
		{ImportPath: mod + "protocolhost/fledgev1", Imports: []string{mod + "protocol", mod + "sandbox/wasm", mod + "protocolhost/core"}},
		{ImportPath: mod + "protocolhost/core", Imports: []string{mod + "policy", mod + "sandbox"}},
		{ImportPath: mod + "protocolhost/tools", Imports: []string{mod + "protocolhost/core"}},
		{ImportPath: mod + "policy", Imports: []string{mod + "sandbox"}},
		{ImportPath: mod + "sandbox/platform", Imports: []string{mod + "sandbox/linux"}},
		{ImportPath: mod + "audit", Imports: []string{mod + "reason"}},
		{ImportPath: mod + "audit/report", Imports: []string{mod + "audit"}},
		{ImportPath: mod + "audit/otlp", Imports: []string{mod + "audit"}},
		{ImportPath: mod + "sandbox"},
		{ImportPath: mod + "ui/clip"},
		{ImportPath: mod + "plugin", Imports: []string{mod + "policy", mod + "protocol"}},
		{ImportPath: mod + "protocol", Imports: []string{mod + "protocol/lines"}},
		{ImportPath: mod + "sandbox/wasm", Imports: []string{mod + "protocol", mod + "sandbox", mod + "pathguard"}},
		{ImportPath: mod + "sandbox/netstack", Imports: []string{mod + "egress", mod + "sandbox/kernel"}},
		{ImportPath: mod + "internal/safefs"},
	}
	require.Empty(t, check(rules, ok), "a graph that keeps every rule")
	for _, tc := range []struct{ from, to, rule string }{
		{"cmd/fledge", "policy", "the CLI"},
		{"cmd/fledge", "protocolhost/core", "the CLI"},
		{"audit/report", "plugin", "the auditor's page"},
		{"protocolhost/mcp", "protocolhost/fledgev1", "never reaches into another adapter"},
		{"protocol", "protocolhost/fledgev1", "wire"},
		{"protocol/lines", "protocolhost/core", "wire"},
		{"sandbox/wasm", "policy", "sandbox backends"},
		{"sandbox/netstack", "protocolhost/core", "sandbox backends"},
		{"sandbox/linux", "plugin", "sandbox backends"},
		{"internal/safefs", "sandbox", "product helpers"},
		{"protocolhost/core", "protocol/lines", "session core"},
		{"protocolhost/tools", "protocolhost/mcp", "catalogue"},
		{"protocolhost", "sandbox/wasm", "WebAssembly"},
		{"protocolhost/jsonrpc", "sandbox/wasm", "WebAssembly"},
		{"policy", "sandbox/linux", "policy decides"},
		{"policy", "sandbox/view", "policy decides"}, // any package below the interface
		{"protocolhost/core", "sandbox/linux", "only sandbox/platform"},
		{"sandbox", "sandbox/kernel", "sandbox interface"}, // a parent importing its child
		{"audit", "ui", "audit log"},
		{"ui/clip", "reason", "clipping rule"},
		{"protocolhost/mcp", "testkit/testutil", "test helpers"},
		{"audit/otlp", "policy", "OTLP shipper"},
		{"plugin", "protocolhost/core", "plugin store"},
	} {
		g := append([]pkg{}, ok...)
		g = append(g, pkg{ImportPath: mod + tc.from, Imports: []string{mod + tc.to}})
		got := check(rules, g)
		require.NotEmpty(t, got, "%s importing %s must break a rule", tc.from, tc.to)
		assert.Contains(t, strings.Join(got, "\n"), tc.rule, "%s importing %s", tc.from, tc.to)
	}
}

// A rule that cannot fail proves nothing: each kind of pattern matches what it should.
func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pat, p string
		want   bool
	}{
		{"sandbox/...", "sandbox", true}, {"sandbox/...", "sandbox/linux", true},
		{"sandbox/...", "sandboxes", false}, {"policy", "policy", true}, {"policy", "policy/x", false},
		{"...", "anything", true},
	} {
		if got := match(tc.pat, tc.p); got != tc.want {
			t.Errorf("match(%q, %q) = %v", tc.pat, tc.p, got)
		}
	}
}
