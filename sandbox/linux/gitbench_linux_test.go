// SPDX-License-Identifier: MIT

package linux

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
)

// BenchmarkExecGitRepo is Start+Wait of sh -c true with a project holding a git
// repository (a submodule and a linked worktree: the layout the git tests use) writable,
// so every exec works out and mounts the git protection: with the view template (the
// default) and a fresh view each time.
func BenchmarkExecGitRepo(b *testing.B) {
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("needs git")
	}
	parent := b.TempDir()
	src := b.TempDir()
	git := func(dir string, args ...string) {
		c := exec.Command("git", append([]string{"-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main"}, args...)...)
		c.Dir = dir
		c.Env = append(os.Environ(), gitTestEnv...)
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	lib := filepath.Join(src, "lib")
	git(src, "init", "-q", lib)
	git(lib, "commit", "-q", "--allow-empty", "-m", "lib")
	main := filepath.Join(parent, "main")
	git(parent, "init", "-q", main)
	git(main, "commit", "-q", "--allow-empty", "-m", "init")
	git(main, "submodule", "add", "-q", lib, "sub")
	git(main, "commit", "-q", "-m", "sub")
	git(main, "worktree", "add", "-q", filepath.Join(parent, "wt"))
	dir, err := os.Open(main)
	if err != nil {
		b.Fatal(err)
	}
	defer dir.Close()
	for _, bc := range []struct {
		name string
		opts Options
	}{
		{"template", Options{}},
		{"fresh-view", Options{DisableViewTemplate: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			bc.opts.Launch = LaunchThread
			sb, err := New(bc.opts)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = sb.Close() })
			spec := &sandbox.Spec{
				Name: "bench", Path: "/bin/sh", Args: []string{"sh", "-c", "true"},
				Dir: dir, Env: []string{"PATH=/usr/bin:/bin"}, Network: true,
				Access:     sandbox.Access{ReadWrite: []string{parent}, ReadExec: SystemReadExec},
				Limits:     sandbox.Limits{MemoryBytes: 1 << 30, Pids: 256},
				PrivateTmp: true,
			}
			for b.Loop() {
				p, err := sb.Start(context.Background(), spec)
				if err != nil {
					b.Fatal(err)
				}
				res, err := p.Wait()
				if err != nil || res.ExitCode != 0 {
					b.Fatal(err, res)
				}
			}
		})
	}
}

// BenchmarkDefaultProtectedGitLayout is the per-launch cost of working out the protection
// of a repository with a linked worktree.
func BenchmarkDefaultProtectedGitLayout(b *testing.B) {
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("needs git")
	}
	parent := b.TempDir()
	main := filepath.Join(parent, "main")
	for _, args := range [][]string{{"init", "-q", main}, {"-C", main, "commit", "-q", "--allow-empty", "-m", "i"},
		{"-C", main, "worktree", "add", "-q", filepath.Join(parent, "wt")}} {
		c := exec.Command("git", args...)
		c.Env = append(os.Environ(), gitTestEnv...)
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	for b.Loop() {
		if _, err := defaultProtected([]string{parent}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNestedGitlinks is what the nested-repository defence adds to a launch and to
// the end of a run, in a repository whose index holds 2000 files and 20 gitlinks (10 with
// a .git directory): the launch's read of the index ("launch-cached": unchanged since the
// last launch, a stat; "launch-parse": changed, read and parsed) and the end's check (a
// stat of the index and an lstat per gitlink).
func BenchmarkNestedGitlinks(b *testing.B) {
	if _, err := exec.LookPath("git"); err != nil {
		b.Skip("needs git")
	}
	root := b.TempDir()
	git := func(args ...string) {
		c := exec.Command("git", args...)
		c.Dir = root
		c.Env = append(os.Environ(), gitTestEnv...)
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	git("init", "-q", root)
	for i := range 2000 {
		p := filepath.Join(root, "d"+strconv.Itoa(i%50), "f"+strconv.Itoa(i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	git("add", ".")
	for i := range 20 {
		sub := "vendor/m" + strconv.Itoa(i)
		if i%2 == 0 {
			git("init", "-q", sub)
		}
		git("update-index", "--add", "--cacheinfo", "160000,1111111111111111111111111111111111111111,"+sub)
	}
	c := &indexedCheckout{index: filepath.Join(root, ".git", "index"), gitDirs: []string{filepath.Join(root, ".git")}, checkout: root, hashLen: 20}
	b.Run("launch-cached", func(b *testing.B) {
		s := newNestedStore()
		for b.Loop() {
			if _, _, err := s.gitlinks(c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("launch-parse", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := (*nestedStore)(nil).gitlinks(c); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("end-check", func(b *testing.B) {
		s := newNestedStore()
		links, _, err := s.gitlinks(c)
		if err != nil || len(links) != 20 {
			b.Fatal(err, links)
		}
		present := map[string]gitFileID{}
		for _, l := range links {
			var st unix.Stat_t
			if unix.Lstat(filepath.Join(root, l, ".git"), &st) == nil {
				present[l] = idOf(&st, false)
			}
		}
		s.baseline(c.index, present)
		for b.Loop() {
			if q := s.quarantineNested([]*indexedCheckout{c}, []string{root}, nil); len(q) != 0 {
				b.Fatal(q)
			}
		}
	})
}
