// SPDX-License-Identifier: MIT

package gitindex

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gitIndex makes a repository (object format fmt) whose index holds files, a gitlink at
// each of links (long, nested paths included) and an intent-to-add entry (extended flags,
// version 3), in index version ver, and returns the index's bytes. The host's git runs on a
// repository the test made, never on one a command could write.
func gitIndex(t *testing.T, ver, format string, links []string) []byte {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q", "--object-format="+format)
	for _, f := range []string{"a.txt", "dir/b.txt", "dir/deeper/c.txt", strings.Repeat("x", 200) + ".txt"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("add", ".")
	zero := strings.Repeat("1", 40)
	if format == "sha256" {
		zero = strings.Repeat("1", 64)
	}
	for _, l := range links {
		run("update-index", "--add", "--cacheinfo", "160000,"+zero+","+l)
	}
	if err := os.WriteFile(filepath.Join(dir, "ita.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	run("add", "-N", "ita.txt")
	run("update-index", "--index-version", ver)
	b, err := os.ReadFile(filepath.Join(dir, ".git", "index"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseGitlinksEveryVersion(t *testing.T) {
	links := []string{"sub", "dir/nested", "dir/deeper/z-" + strings.Repeat("y", 5000)}
	for _, format := range []string{"sha1", "sha256"} {
		hl := 20
		if format == "sha256" {
			hl = 32
		}
		for _, ver := range []string{"2", "3", "4"} {
			b := gitIndex(t, ver, format, links)
			idx, err := Parse(b, hl, 100, true)
			if err != nil {
				t.Fatalf("%s v%s: %v", format, ver, err)
			}
			got := slices.Clone(idx.Gitlinks)
			slices.Sort(got)
			want := slices.Clone(links)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s v%s: gitlinks %q, want %q", format, ver, got, want)
			}
			if len(idx.Paths) != 5+len(links) {
				t.Errorf("%s v%s: %d paths, want %d: %q", format, ver, len(idx.Paths), 5+len(links), idx.Paths)
			}
			// The wrong hash length is never read as an index.
			other := 52 - hl
			if _, err := Parse(b, other, 100, false); err == nil {
				t.Errorf("%s v%s: read with a %d-byte hash", format, ver, other)
			}
		}
	}
}

func TestParseBounds(t *testing.T) {
	b := gitIndex(t, "4", "sha1", []string{"sub"})
	if _, err := Parse(b, 20, 3, false); !errors.Is(err, ErrTooMany) {
		t.Fatalf("entry bound: %v, want ErrTooMany", err)
	}
	for cut := 0; cut < len(b)-20; cut += 7 {
		if _, err := Parse(b[:cut], 20, 100, false); err == nil {
			// Cut inside the extensions only drops data after the entries; a cut inside
			// the entries must fail.
			if cut < 200 {
				t.Fatalf("an index cut at %d bytes was read", cut)
			}
		}
	}
	for _, bad := range [][]byte{nil, []byte("DIRC"), append([]byte("DIRX"), b[4:]...)} {
		if _, err := Parse(bad, 20, 100, false); !errors.Is(err, ErrFormat) {
			t.Errorf("%q: %v, want ErrFormat", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("DIRC\x00\x00\x00\x02\x00\x00\x00\x00" + strings.Repeat("\x00", 20)))
	f.Add([]byte("DIRC\x00\x00\x00\x04\x00\x00\x00\x01" + strings.Repeat("\x00", 62) + "\x85\x00" + strings.Repeat("\x00", 20)))
	f.Add(desyncV4Index())
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, hl := range []int{20, 32} {
			idx, err := Parse(b, hl, 1000, true)
			if err != nil {
				continue
			}
			if len(idx.Paths) > 1000 || len(idx.Gitlinks) > 1000 {
				t.Fatalf("more entries than the bound: %d", len(idx.Paths))
			}
			for _, p := range idx.Gitlinks {
				if p == "" || len(p) > maxPathLen {
					t.Fatalf("gitlink path %q", p)
				}
			}
		}
	})
}
