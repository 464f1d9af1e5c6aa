// SPDX-License-Identifier: MIT

package pins

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// churnPackages are the published npm MCP servers TestPinChurn measures: every listed
// version, in release order, each compared with the one before.
var churnPackages = []struct {
	pkg, bin string
	args     []string // "$DIR" is a scratch directory (the filesystem server's allowed dir)
	versions []string
}{
	{"@modelcontextprotocol/server-filesystem", "mcp-server-filesystem", []string{"$DIR"},
		[]string{"2025.1.14", "2025.3.28", "2025.7.1", "2025.7.29", "2025.8.18", "2025.8.21", "2025.11.25", "2025.12.18", "2026.1.14", "2026.7.4", "2026.7.10", "2026.8.31"}},
	{"@modelcontextprotocol/server-memory", "mcp-server-memory", nil,
		[]string{"2025.4.25", "2025.8.4", "2025.9.25", "2025.11.25", "2026.1.26", "2026.7.4", "2026.8.31"}},
	{"@modelcontextprotocol/server-everything", "mcp-server-everything", []string{"stdio"},
		[]string{"2025.7.29", "2025.8.18", "2025.9.25", "2025.11.25", "2025.12.18", "2026.1.26", "2026.7.4", "2026.8.18", "2026.8.31"}},
	{"@modelcontextprotocol/server-sequential-thinking", "mcp-server-sequential-thinking", nil,
		[]string{"2025.7.1", "2025.11.25", "2025.12.18", "2026.7.4", "2026.8.31"}},
	{"@modelcontextprotocol/server-github", "mcp-server-github", nil,
		[]string{"2025.1.23", "2025.3.19", "2025.3.28", "2025.4.8"}},
	{"@playwright/mcp", "playwright-mcp", nil,
		[]string{"0.0.79", "0.0.80", "0.0.81", "0.0.82", "0.0.83"}},
	{"@upstash/context7-mcp", "context7-mcp", nil,
		[]string{"4.0.5", "4.0.6", "4.0.7", "4.1.0", "4.1.1"}},
}

type listing struct {
	Instructions string `json:"instructions"`
	Tools        []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema"`
	} `json:"tools"`
}

func (l *listing) defs() map[string]Def {
	out := map[string]Def{}
	for _, t := range l.Tools {
		out[t.Name] = Def{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema}
	}
	return out
}

// TestPinChurn measures how often pins of real servers change between releases, and how
// many of those changes quarantine a tool under the raw hash fledge used before and under
// the canonical one: the table in docs/protocols.md ("Pins that do not cry wolf"). It
// installs about fifty package versions from npm and runs each once (unconfined: these are
// the published servers, started only to list their tools), so it runs only when asked:
//
//	FLEDGE_PIN_CHURN=1 go test -count=1 -run TestPinChurn -v ./plugin/pins
//
// FLEDGE_PIN_CHURN_DIR keeps the installs between runs (default: a dir under the user's
// cache dir); FLEDGE_PIN_CHURN_OUT names a file the table is written to.
func TestPinChurn(t *testing.T) {
	if os.Getenv("FLEDGE_PIN_CHURN") != "1" {
		t.Skip("measures real npm servers (about fifty downloads): set FLEDGE_PIN_CHURN=1 to run it")
	}
	node, err := exec.LookPath("node")
	require.NoError(t, err)
	npm, err := exec.LookPath("npm")
	require.NoError(t, err)
	root := os.Getenv("FLEDGE_PIN_CHURN_DIR")
	if root == "" {
		c, err := os.UserCacheDir()
		require.NoError(t, err)
		root = filepath.Join(c, "fledge-pin-churn")
	}
	lister, err := filepath.Abs(filepath.Join("testdata", "list_tools.mjs"))
	require.NoError(t, err)
	scratch := t.TempDir()

	list := func(pkg, bin, version string, args []string) *listing {
		prefix := filepath.Join(root, strings.NewReplacer("@", "", "/", "_").Replace(pkg)+"@"+version)
		marker := filepath.Join(prefix, ".complete")
		if _, err := os.Stat(marker); err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--no-save", "--ignore-scripts",
				"--prefix", prefix, pkg+"@"+version).CombinedOutput()
			require.NoError(t, err, "%s@%s: %s", pkg, version, out)
			require.NoError(t, os.WriteFile(marker, nil, 0o644))
		}
		a := []string{lister, filepath.Join(prefix, "node_modules", ".bin", bin)}
		for _, x := range args {
			a = append(a, strings.ReplaceAll(x, "$DIR", scratch))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, a...)
		cmd.Dir = scratch
		cmd.Env = append(os.Environ(), "HOME="+scratch, "GITHUB_PERSONAL_ACCESS_TOKEN=unused")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Logf("%s@%s: not listed: %v %s", pkg, version, err, stderr.String())
			return nil
		}
		var l listing
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &l), stdout.String())
		return &l
	}

	var rows []string
	var tot struct{ pairs, changed, notation, oldQ, newQ int }
	for _, p := range churnPackages {
		var prev *listing
		prevV := ""
		for _, v := range p.versions {
			cur := list(p.pkg, p.bin, v, p.args)
			if cur == nil {
				continue
			}
			if prev != nil {
				r := comparePair(prev, cur)
				tot.pairs++
				tot.changed += r.changed
				tot.notation += r.notation
				tot.oldQ += r.oldQ
				tot.newQ += r.newQ
				rows = append(rows, fmt.Sprintf("| %s | %s → %s | %d | %d | %d | %d | %d | %s |", p.pkg, prevV, v, len(cur.Tools),
					r.changed, r.notation, r.oldQ, r.newQ, r.kinds))
			}
			prev, prevV = cur, v
		}
	}
	var b strings.Builder
	b.WriteString("| package | versions | tools | definitions changed | notation only | quarantined before (raw hash) | quarantined now (canonical) | what the quarantined changes are |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		b.WriteString(r + "\n")
	}
	fmt.Fprintf(&b, "| **all** | %d version pairs | | %d | %d | %d | %d | |\n", tot.pairs, tot.changed, tot.notation, tot.oldQ, tot.newQ)
	t.Log("\n" + b.String())
	if out := os.Getenv("FLEDGE_PIN_CHURN_OUT"); out != "" {
		require.NoError(t, os.WriteFile(out, []byte(b.String()), 0o644))
	}
}

type pairResult struct {
	changed, notation, oldQ, newQ int
	kinds                         string
}

// comparePair counts one version pair: definitions added, removed or changed in any byte
// that reaches the hash (changed), those whose canonical form is the same (notation),
// what the raw hash quarantined (changed or added tools, and every tool when the
// instructions changed) and what the canonical hash does, with the kinds of meaning the
// canonical changes have (Meaning).
func comparePair(a, b *listing) pairResult {
	var r pairResult
	old, now := a.defs(), b.defs()
	kinds := map[string]int{}
	instrRaw := a.Instructions != b.Instructions
	instrCanon := Words(a.Instructions) != Words(b.Instructions)
	for name, d := range now {
		o, had := old[name]
		if !had {
			r.changed++
			r.oldQ++
			r.newQ++
			kinds["new tool"]++
			continue
		}
		rawDiff := legacyHash(o) != legacyHash(d)
		canonDiff := Hash(o) != Hash(d)
		if rawDiff {
			r.changed++
			if !canonDiff {
				r.notation++
			}
		}
		if rawDiff || instrRaw {
			r.oldQ++
		}
		if canonDiff || instrCanon {
			r.newQ++
		}
		if canonDiff {
			po, pn := keep(o), keep(d)
			for _, m := range Meaning(Change{Tool: name, Old: po.Hash, New: pn.Hash, OldDesc: po.Description, NewDesc: pn.Description,
				OldInput: string(po.InputSchema), NewInput: string(pn.InputSchema)}) {
				kinds[meaningKind(m)]++
			}
		}
	}
	for name := range old {
		if _, ok := now[name]; !ok {
			r.changed++
			kinds["tool removed"]++
		}
	}
	if instrCanon {
		kinds["instructions"]++
	}
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(ks)
	r.kinds = strings.Join(ks, ", ")
	return r
}

// meaningKind groups a Meaning line for the table.
func meaningKind(m string) string {
	switch {
	case strings.HasPrefix(m, "new required parameter"), strings.Contains(m, "is now required"):
		return "new required parameter"
	case strings.HasPrefix(m, "new optional parameter"):
		return "new optional parameter"
	case strings.Contains(m, "removed") && strings.HasPrefix(m, "parameter"):
		return "parameter removed"
	case strings.Contains(m, "no longer required"):
		return "parameter no longer required"
	case strings.Contains(m, "type was"):
		return "type changed"
	case strings.Contains(m, "allowed values"):
		return "enum changed"
	case strings.Contains(m, "description: its words changed") || strings.Contains(m, "title: its words changed"):
		if strings.HasPrefix(m, "description") {
			return "tool description words"
		}
		return "parameter description words"
	}
	return "other schema change"
}
