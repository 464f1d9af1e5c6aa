// SPDX-License-Identifier: MIT

package gitindex

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestVerifyPath(t *testing.T) {
	for _, p := range []string{"a", "a/b", "dir/.gitignore", ".github/x", "x.git", "gitx/y", "git~2", ".gitmodules", "a/.git.d", "..a", "a.."} {
		if !VerifyPath(p, 0o100644) {
			t.Errorf("%q refused", p)
		}
	}
	if !VerifyPath("dir/", 0o040000) {
		t.Error("a sparse directory entry refused")
	}
	for _, p := range []string{
		"", ".git", ".git/hooks/post-checkout", ".GIT/config", "a/.Git/config", "sub/.git",
		"git~1/config", "GIT~1/hooks/x", ".git./config", ".git /x", ".git::$INDEX_ALLOCATION/x",
		`a\.git\config`, "..", "../x", "a/../b", ".", "a/./b", "/a", "a//b", "a/", "a\x00b",
	} {
		if VerifyPath(p, 0o100644) {
			t.Errorf("%q accepted", p)
		}
	}
	if VerifyPath(".gitmodules", 0o120000) || VerifyPath("a/.GITMODULES", 0o120000) {
		t.Error("a .gitmodules symlink accepted")
	}
}

// TestParseRefused: an index whose path git would refuse (renamed in its bytes, as a
// command that can write the index does) lists it in Refused; git's own index none.
func TestParseRefused(t *testing.T) {
	b := gitIndex(t, "2", "sha1", []string{"sub"})
	idx, err := Parse(b, 20, 100, false)
	if err != nil || len(idx.Refused) != 0 {
		t.Fatalf("git's index: %v, refused %q", err, idx.Refused)
	}
	i := strings.Index(string(b), "dir/b.txt")
	copy(b[i:], ".git/")
	idx, err = Parse(b, 20, 100, false)
	if err != nil || !slices.Equal(idx.Refused, []string{".git/.txt"}) {
		t.Fatalf("refused %q, %v; want [.git/.txt]", idx.Refused, err)
	}
	// The desynchronising index: git's name for "a" holds NULs.
	idx, err = Parse(desyncV4Index(), 20, 100, false)
	if err != nil || len(idx.Refused) != 1 || !strings.HasPrefix(idx.Refused[0], "a\x00") {
		t.Fatalf("desync index: %v, refused %q", err, idx.Refused)
	}
}

// TestParseEntryTable: git's EOIE and IEOT extensions (written by git, here with
// index.threads so it writes blocks) are read, and an IEOT or EOIE offset that is not the
// entries' own (git would then read other entries or extensions) is ErrFormat.
func TestParseEntryTable(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	for _, ver := range []string{"2", "4"} {
		dir := t.TempDir()
		git := func(args ...string) {
			t.Helper()
			cmd := exec.Command("git", args...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git %v: %v\n%s", args, err, out)
			}
		}
		git("init", "-q")
		git("config", "index.threads", "4")
		git("config", "index.recordEndOfIndexEntries", "true")
		git("config", "index.recordOffsetTable", "true")
		git("config", "index.version", ver)
		var in strings.Builder
		for i := range 300 {
			in.WriteString("100644 1111111111111111111111111111111111111111\tf/" + strings.Repeat("n", i%40) + string(rune('a'+i%26)) + "/" + string(rune('0'+i%10)) + "\n")
		}
		cmd := exec.Command("git", "update-index", "--index-info")
		cmd.Dir, cmd.Env, cmd.Stdin = dir, append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir), strings.NewReader(in.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("update-index: %v %s", err, out)
		}
		git("update-index", "--add", "--cacheinfo", "160000,1111111111111111111111111111111111111111,zsub")
		b, err := os.ReadFile(filepath.Join(dir, ".git", "index"))
		if err != nil {
			t.Fatal(err)
		}
		ie := strings.Index(string(b), "IEOT")
		eo := len(b) - 20 - 32
		if ie < 0 || string(b[eo:eo+4]) != "EOIE" {
			t.Fatalf("v%s: git wrote no IEOT/EOIE", ver)
		}
		if n := binary.BigEndian.Uint32(b[ie+4:]); n < 4+2*8 {
			t.Fatalf("v%s: an IEOT of %d bytes, not two blocks", ver, n)
		}
		idx, err := Parse(b, 20, 1000, false)
		if err != nil || !slices.Equal(idx.Gitlinks, []string{"zsub"}) {
			t.Fatalf("v%s: %v, gitlinks %q", ver, err, idx.Gitlinks)
		}
		tamper := func(at int, delta uint32) []byte {
			c := slices.Clone(b)
			binary.BigEndian.PutUint32(c[at:], binary.BigEndian.Uint32(c[at:])+delta)
			return c
		}
		for name, c := range map[string][]byte{
			"second IEOT block offset": tamper(ie+8+4+8, 8),
			"first IEOT block count":   tamper(ie+8+4+4, 1),
			"EOIE offset":              tamper(eo+8, 8),
		} {
			if _, err := Parse(c, 20, 1000, false); !errors.Is(err, ErrFormat) {
				t.Errorf("v%s %s moved: %v, want ErrFormat", ver, name, err)
			}
		}
	}
}
