// SPDX-License-Identifier: MIT

//go:build unix

package pathguard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The fuzz tree lives in box (a dir under the test's temp dir): root (roots[0]), root2 reached
// through the symlinked root r2link (roots[1]), and outside. Ops are byte pairs (kind, arg)
// over these tables. "$T" is box.
var fuzzNames = [16]string{
	"root/a", "root/b", "root/a/c", "root/b/d", "root/a/c/e", "root/l", "root/a/l", "root/a/c/l",
	"root2/a", "root2/l", "outside/a", "outside/l", "root/a/c/e/f", "root/m", "root2/a/m", "root/b/m",
}

var fuzzRelTargets = [16]string{
	".", "..", "../..", "../../..", "../../../..", "a", "../a", "c/e",
	"../outside", "../../outside", "../root", "../root2", "l", "../l", "e/../../..", "a/c/../../..",
}

var fuzzAbsTargets = [16]string{
	"$T/outside", "$T/root", "$T/root/a", "$T/root2", "/", "/etc", "/proc/self/cwd", "/proc/self/root",
	"/proc/self/fd", "$T", "/proc", "/tmp", "$T/r2link", "$T/root/l", "/proc/thread-self/cwd", "$T/outside/a",
}

const maxFuzzOps = 48

func expand(s, tmp string) string {
	return strings.NewReplacer(
		"$R", filepath.Join(tmp, "root"),
		"$S", filepath.Join(tmp, "r2link"),
		"$2", filepath.Join(tmp, "root2"),
		"$O", filepath.Join(tmp, "outside"),
		"$T", tmp,
	).Replace(s)
}

// applyOps builds the tree. Every operation goes through an os.Root on box: the tree is full
// of links to "/", "/etc" and "..", and a plain os.MkdirAll("box/root/a/c") through a link
// a -> "/" would write outside the test (as root). Failures (a parent that is a file, a path
// through an absolute link, a name that exists) are part of the game and ignored.
func applyOps(box *os.Root, ops []byte) {
	for i := 0; i+1 < len(ops) && i/2 < maxFuzzOps; i += 2 {
		k, v := ops[i], ops[i+1]
		name := fuzzNames[v&15]
		hi := v >> 4
		switch k % 6 {
		case 0:
			box.MkdirAll(name, 0o755)
		case 1:
			box.MkdirAll(filepath.Dir(name), 0o755)
			box.WriteFile(name, nil, 0o644)
		case 2:
			box.MkdirAll(filepath.Dir(name), 0o755)
			box.Symlink(fuzzRelTargets[hi], name)
		case 3:
			box.MkdirAll(filepath.Dir(name), 0o755)
			box.Symlink(expand(fuzzAbsTargets[hi], box.Name()), name)
		case 4:
			box.RemoveAll(name)
		case 5:
			box.Rename(name, fuzzNames[hi])
		}
	}
}

// buildFuzzTree lays out box under a fresh temp dir, applies ops, and fails the test if
// anything appeared beside box: the harness itself must never write outside it.
func buildFuzzTree(t *testing.T, ops []byte) string {
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	boxPath := filepath.Join(tmp, "box")
	for _, d := range []string{"", "root", "root2", "outside"} {
		if err := os.Mkdir(filepath.Join(boxPath, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("root2", filepath.Join(boxPath, "r2link")); err != nil {
		t.Fatal(err)
	}
	box, err := os.OpenRoot(boxPath)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	applyOps(box, ops)
	ents, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "box" {
		t.Fatalf("harness wrote outside its box: %v", ents)
	}
	return boxPath
}

func FuzzResolve(f *testing.F) {
	for _, s := range []struct {
		ops []byte
		req string
	}{
		{nil, ""},
		{nil, "../.."},
		{[]byte{0, 0, 0, 2}, "a/c"},
		{[]byte{2, 0x55}, "l"},                  // root/l -> a
		{[]byte{2, 0x85}, "l"},                  // root/l -> ../outside
		{[]byte{2, 0x15, 0, 10}, "l/outside/a"}, // root/l -> ..
		{[]byte{3, 0x65}, "l"},                  // root/l -> /proc/self/cwd
		{[]byte{3, 0x25}, "l"},                  // absolute link back inside
		{[]byte{2, 0xc5}, "l/x"},                // root/l -> l (loop)
		{[]byte{0, 0, 2, 0x37}, "a/c/l"},        // climbs three levels out
		{[]byte{0, 0, 2, 0x66}, "a/l/.."},
		{[]byte{0, 8}, "$S/a"},
		{[]byte{0, 8}, "$2/a"},
		{[]byte{0, 0}, "$R/a/../../outside"},
		{nil, "$O"},
		{[]byte{1, 0}, "a"},
		{nil, "a\x00b"},
		{[]byte{0, 4, 2, 0xe4}, "a/c/e/../.."},
	} {
		f.Add(s.ops, s.req)
	}
	modes := availableModes()
	f.Fuzz(func(t *testing.T, ops []byte, req string) {
		tmp := buildFuzzTree(t, ops)
		req = expand(req, tmp)

		g, err := New(filepath.Join(tmp, "root"), filepath.Join(tmp, "r2link"))
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		roots := oracleRoots(t, filepath.Join(tmp, "root"), filepath.Join(tmp, "root2"))

		var ids []devIno
		for _, mode := range modes {
			setMode(t, g, mode)
			id, ok := checkResolve(t, g, mode, req, roots)
			if ok {
				ids = append(ids, id)
			}
		}
		// Both resolvers follow the same rules; when both accept, it must be the same directory.
		if len(ids) == 2 && ids[0] != ids[1] {
			t.Fatalf("resolvers disagree on %q: %v vs %v", req, ids[0], ids[1])
		}
	})
}

// checkResolve resolves req and checks every property that must hold, whatever the tree.
func checkResolve(t *testing.T, g *Guard, mode, req string, roots map[devIno]bool) (devIno, bool) {
	t.Helper()
	d, err := g.Resolve(req)
	if err != nil {
		var pe *Error
		if !errors.As(err, &pe) || !errors.Is(err, ErrRefused) {
			t.Fatalf("%s: %q: error is not a refusal: %#v", mode, req, err)
		}
		if !pe.Reason.Valid() || pe.Request != req || d != nil {
			t.Fatalf("%s: %q: bad refusal %#v (dir %v)", mode, req, pe, d)
		}
		if len(err.Error()) > 2048 {
			t.Fatalf("%s: %q: unbounded error text (%d bytes)", mode, req, len(err.Error()))
		}
		return devIno{}, false
	}
	defer d.Close()
	beneath, oerr := oracleBeneath(d.File, roots)
	if oerr != nil || !beneath {
		t.Fatalf("%s: ESCAPE: %q resolved to %s (dev %d ino %d) outside every root (oracle error %v)",
			mode, req, d.Path, d.Dev, d.Ino, oerr)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(d.File.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if uint64(st.Dev) != d.Dev || uint64(st.Ino) != d.Ino {
		t.Fatalf("%s: %q: Dev/Ino %d/%d do not match the handle %d/%d", mode, req, d.Dev, d.Ino, st.Dev, st.Ino)
	}
	if err := d.Verify(); err != nil {
		t.Fatalf("%s: %q: Verify: %v", mode, req, err)
	}
	okRoot := false
	for _, r := range g.Roots() {
		okRoot = okRoot || r == d.Root
	}
	if !okRoot || !filepath.IsAbs(d.Path) || !(d.Path == d.Root || strings.HasPrefix(d.Path, d.Root+"/")) {
		t.Fatalf("%s: %q: display path %q is not under root %q", mode, req, d.Path, d.Root)
	}
	return devIno{uint64(st.Dev), uint64(st.Ino)}, true
}

// The tree builder must stay in its box even when ops write through links that leave it
// (an earlier version, using plain os calls, created files in / as root).
func TestFuzzHarnessStaysInBox(t *testing.T) {
	ops := []byte{
		2, 0x30, // root/a -> ../../.. (the temp dir above box)
		0, 0x02, // mkdir root/a/c
		1, 0x06, // write root/a/l
		3, 0x41, // root/b -> /
		0, 0x03, // mkdir root/b/d
		1, 0x0f, // write root/b/m
		2, 0x9d, // root/m -> ../root2, fine: inside
		4, 0x02, // remove root/a/c
		5, 0xa3, // rename root/b/d -> outside/a
	}
	box := buildFuzzTree(t, ops)
	fi, err := os.Lstat(filepath.Join(box, "root", "a"))
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("root/a should be the symlink: %v %v", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(box, "root", "m")); err != nil {
		t.Fatalf("an inside link should have been made: %v", err)
	}
}
