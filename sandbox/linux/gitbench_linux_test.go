package linux

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

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
