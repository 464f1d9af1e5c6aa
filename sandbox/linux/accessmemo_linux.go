package linux

import (
	"errors"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
)

// checkAccessMemo is checkAccess, remembered for access lists that passed it while every
// path of them still names what it named then.
//
// Why: every exec of a plugin session carries the same lists, and checkAccess resolves the
// symlinks of each of their twenty-odd paths (an lstat per component) on every one: about
// 80 system calls, 0.15–0.2 ms of each exec on a machine where a system call costs 2–3 µs.
// The verdict depends only on what each path resolves to. A path that still names the same
// inode (stat follows every symlink, as Landlock does when it adds the rule) grants what it
// granted; one whose symlink was retargeted, or that was replaced, removed or made, names
// another inode (or none) and the whole check runs again. A plugin cannot move a denied
// tree beneath an allowed one or the reverse without write access to the denied tree's
// parent, which an accepted spec never grants (that is what the check refuses). So one stat
// per path, instead of an lstat per component.
type accessMemo struct {
	mu sync.Mutex
	m  map[string][]pathIdent
}

type pathIdent struct {
	path     string
	dev, ino uint64
	missing  bool
}

// maxAccessMemo bounds the remembered lists (a host serves a handful of policies).
const maxAccessMemo = 32

func (m *accessMemo) check(a *sandbox.Access, extra ...string) error {
	var key strings.Builder
	for _, l := range [][]string{a.ReadWrite, a.ReadOnly, a.ReadExec, a.Deny, extra} {
		for _, p := range l {
			key.WriteString(p)
			key.WriteByte(0)
		}
		key.WriteByte(1)
	}
	k := key.String()
	m.mu.Lock()
	ids, ok := m.m[k]
	m.mu.Unlock()
	if ok && identsCurrent(ids) {
		return nil
	}
	// Identities before the check: a change during it shows as another inode next time.
	ids = identsOf(a, extra)
	if err := checkAccess(a, extra...); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil || len(m.m) >= maxAccessMemo {
		m.m = map[string][]pathIdent{}
	}
	m.m[k] = ids
	return nil
}

func identsOf(a *sandbox.Access, extra []string) []pathIdent {
	seen := map[string]bool{}
	var ids []pathIdent
	for _, l := range [][]string{a.ReadWrite, a.ReadOnly, a.ReadExec, a.Deny, extra} {
		for _, p := range l {
			if seen[p] {
				continue
			}
			seen[p] = true
			ids = append(ids, identOf(p))
		}
	}
	return ids
}

func identOf(p string) pathIdent {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		// Absent (or unreachable): what the check saw was its lexical form alone. Any other
		// error is remembered as an identity no later stat can match.
		return pathIdent{path: p, missing: errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR), dev: ^uint64(0)}
	}
	return pathIdent{path: p, dev: st.Dev, ino: st.Ino}
}

func identsCurrent(ids []pathIdent) bool {
	for _, id := range ids {
		now := identOf(id.path)
		if now != id || (id.dev == ^uint64(0) && !id.missing) {
			return false
		}
	}
	return true
}
