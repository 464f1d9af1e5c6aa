package kernel

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

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
	for _, set := range []struct {
		paths  []string
		rights uint64
	}{
		{l.ReadExec, execRights},
		{l.ReadOnly, readRights},
		{l.ReadWrite, rw},
	} {
		for _, p := range set.paths {
			id, err := addPathRule(rfd, p, set.rights&fs)
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
	ok = true
	return rfd, ids, nil
}

// restrictSelf enforces the ruleset rfd on the calling thread only: no TSYNC flag.
func restrictSelf(l *Landlock, rfd int) error {
	var flags uint32
	if l.LogExec && min(l.ABI, MaxLandlockABI) >= 7 {
		flags |= ll.FlagRestrictSelfLogNewExecOn
	}
	if err := ll.LandlockRestrictSelf(rfd, flags); err != nil {
		return fmt.Errorf("restrict_self: %w", err)
	}
	return nil
}

// addFDRule allows rights beneath the directory fd refers to (name is for errors).
func addFDRule(rfd, fd int, rights uint64, name string) error {
	if err := ll.LandlockAddPathBeneathRule(rfd, &ll.PathBeneathAttr{AllowedAccess: rights, ParentFd: fd}, 0); err != nil {
		return fmt.Errorf("add rule %s: %w", name, err)
	}
	return nil
}

// addPathRule allows rights beneath path. Missing paths are skipped (PATH entries and
// optional system dirs come and go); a file gets only the rights that apply to files.
func addPathRule(rfd int, path string, rights uint64) (pathID, error) {
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
// while every path still names the inode (or the absence) it named at build time, one
// stat per path: a grant replaced on disk (a project removed and cloned again, an /etc
// file replaced by rename) gets a new ruleset instead of a rule for the old inode, which
// would refuse the new one. Callers get their own dup, so the bounded cache can close what
// it evicts.
func LandlockRuleset(l *Landlock) (int, error) { return rulesets.get(l) }

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
	ids []pathID
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
	if ok && !idsCurrent(e.ids) {
		c.dropLocked(key)
		ok = false
	}
	if !ok {
		fd, ids, err := buildRuleset(l)
		if err != nil {
			return -1, err
		}
		if len(c.order) >= maxCachedRulesets {
			c.dropLocked(c.order[0])
		}
		e = cachedRuleset{fd: fd, ids: ids}
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

func idsCurrent(ids []pathID) bool {
	for _, id := range ids {
		if !id.current() {
			return false
		}
	}
	return true
}
