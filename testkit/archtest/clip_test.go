// SPDX-License-Identifier: MIT

package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// clipName is how a helper that shortens text is named: clip, clipN, clipText, truncate,
// truncateUTF8, ...
var clipName = regexp.MustCompile(`(?i)^(clip|truncate)`)

// clipHomes are the packages that may define one: ui/clip is the one rule (bytes on a rune
// boundary, runes, a prefix), ui its terminal kin (lines of a box), audit/report the HTML
// page's (controls shown, not removed).
var clipHomes = []string{"ui/clip", "ui", "audit/report"}

// Every package cuts text with ui/clip: a private copy drifts (five of eight copies cut
// bytes and split a UTF-8 character).
func TestOneClippingRule(t *testing.T) {
	root := moduleRoot(t)
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "third_party" || strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		for _, home := range clipHomes {
			if dir == home {
				return nil
			}
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && clipName.MatchString(fn.Name.Name) {
				found = append(found, rel+": func "+fn.Name.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Errorf("text is cut by ui/clip (Bytes, Mark, Prefix, Runes), not a private helper:\n%s", strings.Join(found, "\n"))
	}
}

// moduleRoot is the directory of fledge's go.mod, the nearest one above the test's dir.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}
