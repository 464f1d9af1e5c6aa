// SPDX-License-Identifier: MIT

package core

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/sandbox"
)

// InterpreterGap is a file a plugin's interpreter chain needs that its profile does not let
// it execute: the plugin then dies with 126/127 ("No such file or directory", "bad
// interpreter") and nothing in its own message says that the sandbox is why. The chain is
// followed the way the kernel and a shim would: the plugin's #! line, `env NAME` looked up
// on PATH, and the absolute paths a shim script execs.
type InterpreterGap struct {
	Needed string // the file the chain needs (symlinks resolved)
	Via    string // the file that runs it (the plugin, a shim)
	Grant  string // the tree a [sandbox] read_only entry should name
	// OnPATH: Grant holds a PATH entry, so the entry is read+execute for the plugin too.
	OnPATH bool
}

// Hint is the error text: the path needed and the config line that grants it.
func (g *InterpreterGap) Hint(configFile string) string {
	msg := fmt.Sprintf("its interpreter needs %s (run by %s), which the sandbox does not grant: add read_only = [%q] under [sandbox] in %s",
		g.Needed, g.Via, g.Grant, configFile)
	if !g.OnPATH {
		msg += " and put that tree's bin or shims dir on PATH (a read_only tree is read+execute for plugins only when it holds a PATH entry)"
	}
	return msg
}

// maxChain bounds how many files of the chain are read (a shim that runs a shim ...).
const maxChain = 6

// headBytes is how much of each script is read: #! lines and shims are short.
const headBytes = 8 << 10

// Compiled on first use: package init runs in every fledge process, the sandbox's
// helper processes included, and most never match these.
// shimExec finds the absolute programs a shell shim execs (pyenv: exec "/root/.pyenv/libexec/pyenv").
var shimExec = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^\s*exec\s+"?(/[^"\s;]+)`) })

// FindInterpreterGap follows program's interpreter chain and returns the first file in it
// that a (the plugin's access) does not grant read+execute, or nil.
func FindInterpreterGap(program string, a sandbox.Access, path []string, home string) *InterpreterGap {
	covered := func(p string) bool {
		for _, r := range a.ReadExec {
			if policy.Within(p, r) {
				return true
			}
		}
		return false
	}
	seen := map[string]bool{}
	var walk func(file string, depth int) *InterpreterGap
	walk = func(file string, depth int) *InterpreterGap {
		if depth > maxChain || seen[file] {
			return nil
		}
		seen[file] = true
		head := readHead(file)
		if !bytes.HasPrefix(head, []byte("#!")) {
			return nil
		}
		line, body, _ := bytes.Cut(head[2:], []byte("\n"))
		next := []string{}
		if f := strings.Fields(string(line)); len(f) > 0 {
			interp := f[0]
			if filepath.Base(interp) == "env" {
				interp = ""
				for _, arg := range f[1:] {
					if strings.HasPrefix(arg, "-") || strings.Contains(arg, "=") {
						continue
					}
					interp = lookPath(arg, path)
					break
				}
			}
			if interp != "" {
				next = append(next, interp)
			}
		}
		for _, m := range shimExec().FindAllSubmatch(body, 4) {
			next = append(next, string(m[1]))
		}
		for _, n := range next {
			real := n
			if r, err := filepath.EvalSymlinks(n); err == nil {
				real = r
			} else {
				continue // missing outside the sandbox too: not the sandbox's doing
			}
			if !covered(n) || !covered(real) {
				g := &InterpreterGap{Needed: real, Via: file, Grant: grantDir(real, home)}
				for _, e := range path {
					if filepath.IsAbs(e) && policy.Within(filepath.Clean(e), g.Grant) {
						g.OnPATH = true
					}
				}
				return g
			}
			if g := walk(real, depth+1); g != nil {
				return g
			}
		}
		return nil
	}
	return walk(program, 0)
}

// grantDir is the tree to grant for p: its top-level dir under $HOME (~/.pyenv), else the
// dir above its bin dir.
func grantDir(p, home string) string {
	if home != "" && policy.Within(p, home) && p != home {
		rel, _ := filepath.Rel(home, p)
		return filepath.Join(home, strings.Split(rel, string(filepath.Separator))[0])
	}
	d := filepath.Dir(filepath.Dir(p))
	if d == "/" {
		return filepath.Dir(p)
	}
	return d
}

func lookPath(name string, path []string) string {
	if strings.Contains(name, "/") {
		return name
	}
	for _, d := range path {
		if !filepath.IsAbs(d) {
			continue
		}
		c := filepath.Join(d, name)
		if st, err := os.Stat(c); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return c
		}
	}
	return ""
}

func readHead(file string) []byte {
	f, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, headBytes))
	return b
}

// InterpreterHint is the hint for a plugin (with paths p) that could not run: "" unless its
// interpreter chain needs a file access does not grant. For adapters whose start failed
// (a handshake the plugin never answered, a plugin that ended before it was ready).
func (e *Env) InterpreterHint(p policy.Paths, program string, access sandbox.Access) string {
	gap := FindInterpreterGap(program, access, p.UserPATH, p.Home)
	if gap == nil {
		return ""
	}
	file := ""
	if e.Config != nil {
		file = e.Config.File
	}
	if file == "" {
		file = filepath.Join(e.ConfigDir, policy.ConfigFile)
	}
	return gap.Hint(file)
}
