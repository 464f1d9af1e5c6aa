// SPDX-License-Identifier: MIT

package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// What of go-landlock this uses, and why not its Restrict: the raw calls of its
// landlock/syscall package (LandlockCreateRuleset, LandlockAddPathBeneathRule,
// LandlockRestrictSelf, LandlockGetABIVersion), its rule structs (RulesetAttr,
// PathBeneathAttr) and its access-right, scope and flag constants. Its high-level
// landlock.Config.Restrict enforces on every thread of the process (through libpsx below
// ABI 8, TSYNC from 8), which would confine the fledge host itself. fledge needs the
// opposite: the domain on exactly one thread — the stub's, right before execve, or the
// thread launcher's throwaway thread, before it forks the child — and the host's other
// threads untouched. So the ruleset is built here and enforced with
// LandlockRestrictSelf without FlagRestrictSelfTSync, which acts on the calling thread
// only; the exec'd or forked program inherits that thread's domain. (Importing the
// package links libpsx, but nothing here calls an AllThreads function, so psx is never
// started.)

// Access rights per ABI (kernel Documentation/userspace-api/landlock.rst).
const (
	fsV1 = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile |
		ll.AccessFSReadDir | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile |
		ll.AccessFSMakeChar | ll.AccessFSMakeDir | ll.AccessFSMakeReg |
		ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeBlock |
		ll.AccessFSMakeSym

	fileRights = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile |
		ll.AccessFSTruncate | ll.AccessFSIoctlDev
	readRights = ll.AccessFSReadFile | ll.AccessFSReadDir
	execRights = readRights | ll.AccessFSExecute
)

// MaxLandlockABI is the newest ABI whose rights this code knows. A newer kernel is used at
// this level: everything newer stays unhandled (allowed), which is the kernel's own
// compatibility rule.
const MaxLandlockABI = 10

// LandlockABI returns the kernel's Landlock ABI (0 = unavailable, disabled or not built).
func LandlockABI() int {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// handledFS is every filesystem right the ABI can restrict.
func handledFS(abi int) uint64 {
	h := uint64(fsV1)
	if abi >= 2 {
		h |= ll.AccessFSRefer
	}
	if abi >= 3 {
		h |= ll.AccessFSTruncate
	}
	if abi >= 5 {
		h |= ll.AccessFSIoctlDev
	}
	if abi >= 9 {
		h |= ll.AccessFSResolveUnix
	}
	return h
}

func handledNet(abi int) uint64 {
	var h uint64
	if abi >= 4 {
		h |= ll.AccessNetBindTCP | ll.AccessNetConnectTCP
	}
	if abi >= 10 {
		h |= ll.AccessNetBindUDP | ll.AccessNetConnectSendUDP
	}
	return h
}

// ApplyLandlock builds the ruleset for l and enforces it on the calling thread (the stub,
// which execs next). The caller must have set no_new_privs on this thread.
func ApplyLandlock(l *Landlock) error {
	rfd, _, err := buildRuleset(l)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	return restrictSelf(l, rfd)
}

// pathID is what a path named when a ruleset was built: its inode, or nothing.
type pathID struct {
	path     string
	dev, ino uint64
	missing  bool
}

// current says whether path still names what it named when the ruleset was built.
func (id pathID) current() bool {
	var st unix.Stat_t
	if err := unix.Stat(id.path, &st); err != nil {
		return id.missing && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR))
	}
	return !id.missing && st.Dev == id.dev && st.Ino == id.ino
}

// buildRuleset creates the ruleset for l and returns its fd (close-on-exec) and what each
// path named then.
func buildRuleset(l *Landlock) (int, []pathID, error) {
	abi := min(l.ABI, MaxLandlockABI)
	if abi < 1 {
		return -1, nil, errors.New("no Landlock ABI")
	}
	fs := handledFS(abi)
	// Fields the kernel's ABI does not know stay zero, which every Landlock kernel accepts
	// (the attribute struct may be larger than the kernel's if the tail is zero).
	attr := ll.RulesetAttr{HandledAccessFS: fs}
	if l.DenyNet && abi >= 4 {
		attr.HandledAccessNet = handledNet(abi)
		if l.BindAnyTCP {
			attr.HandledAccessNet &^= ll.AccessNetBindTCP
		}
	}
	if l.Scope && abi >= 6 {
		attr.Scoped = ll.ScopeAbstractUnixSocket | ll.ScopeSignal
	}
	rfd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("create_ruleset (abi %d): %w", abi, err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(rfd)
		}
	}()

	// Read-write also gets REFER: renames inside a writable tree must keep working.
	// Device nodes are never needed in a project: creating one (with a capability a
	// regression left behind) would hand out raw disk or memory access.
	rw := fs &^ (ll.AccessFSMakeBlock | ll.AccessFSMakeChar)
	ids := make([]pathID, 0, len(l.ReadExec)+len(l.ReadOnly)+len(l.ReadWrite))
	deny := denyChain(l.Deny)
	nested := writableRoots(l.ReadWrite)
	for _, set := range []struct {
		paths  []string
		rights uint64
	}{
		{l.ReadExec, execRights},
		{l.ReadOnly, readRights},
		{l.ReadWrite, rw},
	} {
		for _, p := range set.paths {
			id, err := addPathRule(rfd, p, set.rights&fs, deny, nested)
			if err != nil {
				return -1, nil, err
			}
			ids = append(ids, id)
		}
	}
	if l.ProcFD > 2 {
		if err := addFDRule(rfd, l.ProcFD, readRights&fs, "/proc"); err != nil {
			return -1, nil, err
		}
	}
	if l.DenyNet && abi >= 4 && !l.BindAnyTCP {
		for _, port := range l.BindTCP {
			rule := ll.NetPortAttr{AllowedAccess: ll.AccessNetBindTCP, Port: uint64(port)}
			if err := ll.LandlockAddNetPortRule(rfd, &rule, 0); err != nil {
				return -1, nil, fmt.Errorf("add rule bind tcp %d: %w", port, err)
			}
		}
	}
	if l.DenyNet && abi >= 4 {
		for _, port := range l.ConnectTCP {
			rule := ll.NetPortAttr{AllowedAccess: ll.AccessNetConnectTCP, Port: uint64(port)}
			if err := ll.LandlockAddNetPortRule(rfd, &rule, 0); err != nil {
				return -1, nil, fmt.Errorf("add rule connect tcp %d: %w", port, err)
			}
		}
	}
	ok = true
	return rfd, ids, nil
}

// restrictSelf enforces the ruleset rfd on the calling thread only: no TSYNC flag.
func restrictSelf(l *Landlock, rfd int) error {
	if err := ll.LandlockRestrictSelf(rfd, LandlockRestrictFlags(l)); err != nil {
		return fmt.Errorf("restrict_self: %w", err)
	}
	return nil
}

// LandlockRestrictFlags are the flags of l's landlock_restrict_self (also made by a
// forked child: ExecChild.Landlock).
func LandlockRestrictFlags(l *Landlock) uint32 {
	var flags uint32
	if l.LogExec && min(l.ABI, MaxLandlockABI) >= 7 {
		flags |= ll.FlagRestrictSelfLogNewExecOn
	}
	return flags
}

// addFDRule allows rights beneath the directory fd refers to (name is for errors).
func addFDRule(rfd, fd int, rights uint64, name string) error {
	if err := ll.LandlockAddPathBeneathRule(rfd, &ll.PathBeneathAttr{AllowedAccess: rights, ParentFd: fd}, 0); err != nil {
		return fmt.Errorf("add rule %s: %w", name, err)
	}
	return nil
}

// ErrCoversDenied: an allowed path, as opened for its rule, is or holds a denied path.
var ErrCoversDenied = errors.New("an allowed path covers a denied path")

// addPathRule allows rights beneath path. Missing paths are skipped (PATH entries and
// optional system dirs come and go); a file gets only the rights that apply to files.
//
// The sandbox refuses lists where an allowed path covers a denied one before it gets
// here, but a path can change between that check and this open: a command can flip a
// symlink in a tree it writes (a virtualenv's bin on PATH, inside the project) while the
// next exec is prepared, and the rule would then grant the denied tree's parent. So what
// was opened is checked (deny: denyChain), and the rule is added through the same fd.
//
// A path beneath a writable grant (a virtualenv's bin on PATH, inside the project) is what
// the plugin's commands make it: one may replace it with a symlink to ~/.ssh, which no
// denied path covers. Its rule is made only where what was opened still lies beneath that
// writable grant (nested); elsewhere it is left out, as the private view, which shows a
// grant only where it is named, leaves it out too.
func addPathRule(rfd int, path string, rights uint64, deny map[fileKey]string, nested []writableRoot) (pathID, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return pathID{path: path, missing: true}, nil
		}
		return pathID{}, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return pathID{}, fmt.Errorf("stat %s: %w", path, err)
	}
	id := pathID{path: path, dev: st.Dev, ino: st.Ino}
	if d, ok := deny[fileKey{st.Dev, st.Ino}]; ok {
		return pathID{}, fmt.Errorf("%w: %s covers %s", ErrCoversDenied, path, d)
	}
	if !insideItsWritableRoots(fd, path, nested) {
		return id, nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		rights &= fileRights
	}
	if rights == 0 {
		return id, nil
	}
	if err := ll.LandlockAddPathBeneathRule(rfd, &ll.PathBeneathAttr{AllowedAccess: rights, ParentFd: fd}, 0); err != nil {
		return pathID{}, fmt.Errorf("add rule %s: %w", path, err)
	}
	return id, nil
}

// LandlockRuleset returns a ruleset fd for l (close-on-exec; the caller closes it). The
// thread launcher gets it on the host side, before its launch thread unshares its fd
// table, and the thread enforces it with RestrictLandlock.
//
// Rulesets are cached per policy: a session's execs share one (the same paths and rights),
// and building one (an open, a stat, a rule and a close per path) is a measurable part of
// a short exec. A ruleset holds the inodes it was built from, so a cached one is used only
// while every path still names the inode (or the absence) it named at build time: a grant
// replaced on disk (a project removed and cloned again, an /etc file replaced by rename)
// gets a new ruleset instead of a rule for the old inode, which would refuse the new one.
// Paths are checked by their parent directory where that says enough (see rulesetIDs).
// Callers get their own dup, so the bounded cache can close what it evicts.
func LandlockRuleset(l *Landlock) (int, error) { return rulesets.get(l) }

// BuildLandlockRuleset builds a ruleset fd for l outside the cache, for a thread with a
// private fd table (the cache keeps descriptor numbers of the process's shared table) or
// paths that only its view has. The caller closes it.
func BuildLandlockRuleset(l *Landlock) (int, error) {
	fd, _, err := buildRuleset(l)
	return fd, err
}

// RestrictLandlock enforces ruleset rfd (built for l) on the calling OS thread only. The
// caller must hold runtime.LockOSThread, have set no_new_privs on the same thread, and must
// let that thread die (exit the goroutine still locked) once it has started the child.
func RestrictLandlock(l *Landlock, rfd int) error { return restrictSelf(l, rfd) }

// maxCachedRulesets bounds the cache (each entry holds one fd).
const maxCachedRulesets = 16

type rulesetCache struct {
	mu    sync.Mutex
	fds   map[string]cachedRuleset
	order []string
}

type cachedRuleset struct {
	fd  int
	ids *rulesetIDs
}

var rulesets = &rulesetCache{fds: map[string]cachedRuleset{}}

func (c *rulesetCache) get(l *Landlock) (int, error) {
	keyb, err := json.Marshal(l)
	if err != nil {
		return -1, err
	}
	key := string(keyb)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.fds[key]
	if ok && !e.ids.current() {
		c.dropLocked(key)
		ok = false
	}
	if !ok {
		// The parents' stamps are taken before the build opens their entries: a change
		// after a stamp shows as a newer time later.
		dirs := stampParents(l)
		fd, ids, err := buildRuleset(l)
		if err != nil {
			return -1, err
		}
		if len(c.order) >= maxCachedRulesets {
			c.dropLocked(c.order[0])
		}
		e = cachedRuleset{fd: fd, ids: newRulesetIDs(dirs, ids)}
		c.fds[key] = e
		c.order = append(c.order, key)
	}
	dup, err := unix.FcntlInt(uintptr(e.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("dup landlock ruleset: %w", err)
	}
	return dup, nil
}

// dropLocked closes and forgets the cached ruleset of key.
func (c *rulesetCache) dropLocked(key string) {
	if e, ok := c.fds[key]; ok {
		unix.Close(e.fd)
		delete(c.fds, key)
	}
	for i, k := range c.order {
		if k == key {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
}

// A directory's mtime and ctime move whenever one of its entries is added, removed,
// renamed or replaced, so while a directory's stamp is unchanged, every name in it still
// names the inode (or the absence) it named — for a name that is not itself a symlink,
// which could be retargeted without touching the directory. A stamp is trusted only when
// both times are older than dirSettle when it is taken: a change within the filesystem's
// timestamp granularity after the stamp then still shows as a newer time. The parent is
// stat'ed by its path, so a directory replaced or a symlink on the way retargeted shows as
// another inode. (A mount placed over an entry leaves its directory's times alone: the
// cached rule then covers the hidden inode and not the mounted one, which is refused.)
const dirSettle = time.Second

type dirStamp struct {
	dev, ino     uint64
	mtime, ctime unix.Timespec
}

func stampDir(path string) (dirStamp, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return dirStamp{}, false
	}
	return dirStamp{dev: st.Dev, ino: st.Ino, mtime: st.Mtim, ctime: st.Ctim}, true
}

func (d dirStamp) settled(now time.Time) bool {
	limit := now.Add(-dirSettle)
	return time.Unix(d.mtime.Unix()).Before(limit) && time.Unix(d.ctime.Unix()).Before(limit)
}

// stampParents stamps the parent directory of every path of l that is settled.
func stampParents(l *Landlock) map[string]dirStamp {
	now := time.Now()
	out := map[string]dirStamp{}
	seen := map[string]bool{}
	for _, set := range [][]string{l.ReadExec, l.ReadOnly, l.ReadWrite} {
		for _, p := range set {
			dir := filepath.Dir(filepath.Clean(p))
			if seen[dir] {
				continue
			}
			seen[dir] = true
			if st, ok := stampDir(dir); ok && st.settled(now) {
				out[dir] = st
			}
		}
	}
	return out
}

// rulesetIDs is what a cached ruleset's paths named at build time: paths checked through
// their parent's stamp (byDir), and the rest one stat each.
type rulesetIDs struct {
	byDir map[string]*dirGroup
	each  []pathID
}

type dirGroup struct {
	stamp dirStamp
	ids   []pathID
}

// newRulesetIDs sorts ids into those their parent's stamp (from before the build) vouches
// for and those checked one by one.
func newRulesetIDs(dirs map[string]dirStamp, ids []pathID) *rulesetIDs {
	r := &rulesetIDs{byDir: map[string]*dirGroup{}}
	for _, id := range ids {
		dir := filepath.Dir(filepath.Clean(id.path))
		st, ok := dirs[dir]
		if !ok || !plainEntry(id) {
			r.each = append(r.each, id)
			continue
		}
		g := r.byDir[dir]
		if g == nil {
			g = &dirGroup{stamp: st}
			r.byDir[dir] = g
		}
		g.ids = append(g.ids, id)
	}
	return r
}

// plainEntry: id's path is a directory entry that is not a symlink (lstat agrees with what
// the build opened), or no entry at all.
func plainEntry(id pathID) bool {
	var st unix.Stat_t
	err := unix.Lstat(id.path, &st)
	if id.missing {
		return errors.Is(err, unix.ENOENT)
	}
	return err == nil && st.Mode&unix.S_IFMT != unix.S_IFLNK && st.Dev == id.dev && st.Ino == id.ino
}

// current: every path still names what it named at build time. A directory whose stamp
// moved has its entries checked one by one, and its new stamp kept when they all hold and
// it is settled. Called under the cache's lock.
func (r *rulesetIDs) current() bool {
	now := time.Now()
	for dir, g := range r.byDir {
		st, ok := stampDir(dir)
		if ok && st == g.stamp {
			continue
		}
		if !idsCurrent(g.ids) {
			return false
		}
		if ok && st.settled(now) {
			g.stamp = st
		} else {
			// Not trusted any more: its entries are checked one by one from now on.
			r.each = append(r.each, g.ids...)
			delete(r.byDir, dir)
		}
	}
	return idsCurrent(r.each)
}

func idsCurrent(ids []pathID) bool {
	for _, id := range ids {
		if !id.current() {
			return false
		}
	}
	return true
}

// denyChain is every inode a rule must not be added for: each denied path and every
// directory above it (by its lexical and its resolved form; for a path not there yet, the
// directories above it that are). A rule on any of them would cover the denied path.
// Identities, not names: a bind mount of a directory above a denied path covers it too.
type fileKey struct{ dev, ino uint64 }

func denyChain(deny []string) map[fileKey]string {
	if len(deny) == 0 {
		return nil
	}
	out := map[fileKey]string{}
	add := func(p, d string) {
		for {
			var st unix.Stat_t
			if unix.Stat(p, &st) == nil {
				if _, ok := out[fileKey{st.Dev, st.Ino}]; !ok {
					out[fileKey{st.Dev, st.Ino}] = d
				}
			}
			if p == "/" || p == "." || p == "" {
				return
			}
			p = filepath.Dir(p)
		}
	}
	for _, d := range deny {
		c := filepath.Clean(d)
		add(c, c)
		if r, err := filepath.EvalSymlinks(c); err == nil && r != c {
			add(r, c)
		}
	}
	return out
}

// writableRoot is a writable grant as named and as resolved when a ruleset is built.
type writableRoot struct{ name, real string }

func writableRoots(rw []string) []writableRoot {
	out := make([]writableRoot, 0, len(rw))
	for _, w := range rw {
		c := filepath.Clean(w)
		r, err := filepath.EvalSymlinks(c)
		if err != nil {
			r = c
		}
		out = append(out, writableRoot{name: c, real: r})
	}
	return out
}

// insideItsWritableRoots reports whether fd (opened from path) lies beneath every writable
// grant that path is named beneath (true when there is none). Its place comes from the
// kernel (the fd's link in /proc), else from resolving path again.
func insideItsWritableRoots(fd int, path string, roots []writableRoot) bool {
	c := filepath.Clean(path)
	real := ""
	for _, w := range roots {
		if c == w.name || !beneathOrAt(c, w.name) {
			continue
		}
		if real == "" {
			var buf [unix.PathMax]byte
			if n, err := unix.Readlink("/proc/thread-self/fd/"+strconv.Itoa(fd), buf[:]); err == nil && n > 0 && n < len(buf) && buf[0] == '/' {
				real = string(buf[:n])
			} else if r, err := filepath.EvalSymlinks(c); err == nil {
				real = r
			} else {
				return false
			}
		}
		if !beneathOrAt(real, w.real) {
			return false
		}
	}
	return true
}

// beneathOrAt reports whether p equals root or lies beneath it (both clean and absolute).
func beneathOrAt(p, root string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, root+"/")
}
