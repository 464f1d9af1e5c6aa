// Package archtest holds the import rules docs/architecture.md states, as a test: a change
// that breaks one fails here, naming the package, the import and the rule.
package archtest

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
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
		from: "protocolhost/...", never: adapters,
		except: []string{}},
	{why: "the session core knows no protocol",
		from: "protocolhost/core", never: append([]string{"protocolhost", "protocolhost/tools", "protocolhost/wasm", "protocolhost/lines", "protocolhost/fledgev1/protocol"}, adapters...)},
	{why: "the catalogue knows no protocol: adapters register with it",
		from: "protocolhost/tools", never: append([]string{"protocolhost", "protocolhost/wasm", "protocolhost/fledgev1/protocol"}, adapters...)},
	{why: "the WebAssembly runtime is fledge-v1's alone",
		from: "...", allowedFrom: []string{"protocolhost/fledgev1"}, never: []string{"protocolhost/wasm"}},
	{why: "policy decides, the backends enforce: policy sees only the sandbox interface",
		from: "policy", never: []string{"sandbox/linux", "sandbox/darwin", "sandbox/fallback", "sandbox/platform", "sandbox/stub", "sandbox/kernel", "protocolhost/..."}},
	{why: "only sandbox/platform picks a backend",
		from: "...", allowedFrom: []string{"sandbox/platform", "sandbox/linux", "sandbox/darwin", "sandbox/fallback"},
		never: []string{"sandbox/linux", "sandbox/darwin", "sandbox/fallback"}},
	{why: "the audit log depends on nothing of fledge but reason codes",
		from: "audit", never: []string{"..."}, except: []string{"reason"}},
	{why: "the sandbox interface depends on nothing of fledge",
		from: "sandbox", never: []string{"..."}},
	{why: "test helpers are for tests: product code never imports them",
		from: "...", never: []string{"internal/testing/..."}, except: []string{}},
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
	checked := map[string]bool{}
	for _, r := range rules {
		for _, p := range pkgs {
			from := strings.TrimPrefix(p.ImportPath, mod)
			if !match(r.from, from) || anyMatch(r.allowedFrom, from) || strings.HasPrefix(from, "internal/testing/") || strings.HasPrefix(from, "bench/") || strings.HasPrefix(from, "examples") {
				continue
			}
			checked[r.from] = true
			for _, imp := range p.Imports {
				to, ok := strings.CutPrefix(imp, mod)
				if !ok || to == from || strings.HasPrefix(to, from+"/") {
					continue
				}
				if anyMatch(r.never, to) && !anyMatch(r.except, to) {
					t.Errorf("%s imports %s: %s (docs/architecture.md)", from, to, r.why)
				}
			}
		}
	}
	for _, r := range rules {
		if !checked[r.from] {
			t.Errorf("rule %q: no package %s exists: the rule is stale", r.why, r.from)
		}
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
