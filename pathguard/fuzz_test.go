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

// The fuzz tree lives under tmp: root (roots[0]), root2 reached through the symlinked root
// r2link (roots[1]), and outside. Ops are byte pairs (kind, arg) over these tables.
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

// applyOps builds the tree. Failures (a parent that is a file, a name that exists) are part
// of the game and ignored.
func applyOps(tmp string, ops []byte) {
	for i := 0; i+1 < len(ops) && i/2 < maxFuzzOps; i += 2 {
		k, v := ops[i], ops[i+1]
		name := filepath.Join(tmp, fuzzNames[v&15])
		hi := v >> 4
		switch k % 6 {
		case 0:
			os.MkdirAll(name, 0o755)
		case 1:
			os.MkdirAll(filepath.Dir(name), 0o755)
			os.WriteFile(name, nil, 0o644)
		case 2:
			os.MkdirAll(filepath.Dir(name), 0o755)
			os.Symlink(fuzzRelTargets[hi], name)
		case 3:
			os.MkdirAll(filepath.Dir(name), 0o755)
			os.Symlink(expand(fuzzAbsTargets[hi], tmp), name)
		case 4:
			os.RemoveAll(name)
		case 5:
			os.Rename(name, filepath.Join(tmp, fuzzNames[hi]))
		}
	}
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
		tmp, err := filepath.EvalSymlinks(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{"root", "root2", "outside"} {
			if err := os.Mkdir(filepath.Join(tmp, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("root2", filepath.Join(tmp, "r2link")); err != nil {
			t.Fatal(err)
		}
		applyOps(tmp, ops)
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
