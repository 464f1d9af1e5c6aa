// SPDX-License-Identifier: MIT

package gitindex

import (
	"crypto/sha1"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// desyncV4Index is a version-4 index that git reads as two entries, a file "a" and the
// gitlink "sub", and that a reader ending each v4 name at its first NUL reads otherwise.
// git takes a v4 entry's name length from the flags (read-cache.c create_from_disk: it
// copies len+1 bytes and steps over them, NULs included); so the name field of "a" is the
// flags' length long and holds, after "a\0", a whole entry "x" and the header of an
// unknown extension whose length covers the rest of the file: git's gitlink entry
// included. The checksum is right, so git reads it.
func desyncV4Index() []byte {
	fixed := func(mode uint32, namelen int) []byte {
		b := make([]byte, 40, 62)
		binary.BigEndian.PutUint32(b[24:], mode)
		for i := 0; i < 20; i++ {
			b = append(b, 0x11)
		}
		return binary.BigEndian.AppendUint16(b, uint16(namelen))
	}
	hidden := append(fixed(0o100644, 1), 0, 'x', 0) // the reader's entry "x", strip 0
	hidden = append(hidden, "ZZZZ"...)              // the reader's extension header
	L := 2 + len(hidden) + 4 + 8                    // a's name length per its flags
	out := append([]byte("DIRC"), 0, 0, 0, 4, 0, 0, 0, 2)
	out = append(append(out, fixed(0o100644, L)...), 0) // "a": strip 0
	nameAt := len(out)
	name := append(append([]byte("a\x00"), hidden...), make([]byte, L+1-2-len(hidden))...)
	out = append(out, name...)
	out = append(append(out, fixed(0o160000, 3)...), byte(L)) // gitlink: strip all of a's L
	out = append(out, "sub\x00"...)
	zz := nameAt + 2 + len(hidden) - 4
	binary.BigEndian.PutUint32(out[zz+4:], uint32(len(out)-(zz+8)))
	sum := sha1.Sum(out)
	return append(out, sum[:]...)
}

// TestParseV4NameLengthFromFlags: git reads the gitlink "sub" from desyncV4Index (checked
// with git ls-files on a repository the test made); Parse must find it too, or fail (the
// caller then refuses or quarantines). It returns no gitlink: a confined command that
// writes such an index (it must be able to write the index) and makes sub/.git with a
// planted core.fsmonitor is neither protected at launch nor quarantined after the run,
// and the user's git status runs the fsmonitor.
func TestParseV4NameLengthFromFlags(t *testing.T) {
	b := desyncV4Index()
	if _, err := exec.LookPath("git"); err == nil {
		dir := t.TempDir()
		c := exec.Command("git", "init", "-q", dir)
		c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("git init: %v %s", err, out)
		}
		if err := os.WriteFile(filepath.Join(dir, ".git", "index"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		c = exec.Command("git", "ls-files", "--stage")
		c.Dir, c.Env = dir, append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		out, err := c.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "160000 1111111111111111111111111111111111111111 0\tsub") {
			t.Fatalf("control: git does not read the gitlink sub: %v\n%s", err, out)
		}
	}
	idx, err := Parse(b, 20, 1000, false)
	if err != nil {
		return // fails closed: fine
	}
	if !slices.Contains(idx.Gitlinks, "sub") {
		t.Fatalf("git reads the gitlink sub from this index, Parse reads gitlinks %q (no error): the nested repository at sub escapes protection and quarantine", idx.Gitlinks)
	}
}
