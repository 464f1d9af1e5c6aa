package stub

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock is applied with raw syscalls on the one thread that execs next. go-landlock's
// Restrict enforces on every thread (through libpsx below ABI 8, which wraps pthread_create
// in the whole binary); a stub that execs immediately needs none of that, and the exec'd
// program inherits the calling thread's domain.

// Access rights per ABI (kernel Documentation/userspace-api/landlock.rst).
const (
	fsV1 = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM

	fileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE |
		unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	readRights = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	execRights = readRights | unix.LANDLOCK_ACCESS_FS_EXECUTE
)

// MaxLandlockABI is the newest ABI whose rights this code knows. A newer kernel is used at
// this level: everything newer stays unhandled (allowed), which is the kernel's own
// compatibility rule.
const MaxLandlockABI = 10

// LandlockABI returns the kernel's Landlock ABI (0 = unavailable, disabled or not built).
func LandlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// handledFS is every filesystem right the ABI can restrict.
func handledFS(abi int) uint64 {
	h := uint64(fsV1)
	if abi >= 2 {
		h |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		h |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		h |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	if abi >= 9 {
		h |= unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX
	}
	return h
}

func handledNet(abi int) uint64 {
	var h uint64
	if abi >= 4 {
		h |= unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	}
	if abi >= 10 {
		h |= unix.LANDLOCK_ACCESS_NET_BIND_UDP | unix.LANDLOCK_ACCESS_NET_CONNECT_SEND_UDP
	}
	return h
}

func applyLandlock(ll *Landlock) error {
	rfd, err := buildRuleset(ll)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	return restrictSelf(ll, rfd)
}

// buildRuleset creates the ruleset for ll and returns its fd (close-on-exec).
func buildRuleset(ll *Landlock) (int, error) {
	abi := min(ll.ABI, MaxLandlockABI)
	if abi < 1 {
		return -1, errors.New("no Landlock ABI")
	}
	fs := handledFS(abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: fs}
	size := unsafe.Sizeof(attr.Handled_access_fs)
	if ll.DenyNet && abi >= 4 {
		attr.Handled_access_net = handledNet(abi)
	}
	if abi >= 4 {
		size += unsafe.Sizeof(attr.Handled_access_net)
	}
	if ll.Scope && abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	if abi >= 6 {
		size += unsafe.Sizeof(attr.Scoped)
	}
	rfd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return -1, fmt.Errorf("create_ruleset (abi %d): %w", abi, errno)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(int(rfd))
		}
	}()

	// Read-write also gets REFER: renames inside a writable tree must keep working.
	// Device nodes are never needed in a project: creating one (with a capability a
	// regression left behind) would hand out raw disk or memory access.
	rw := fs &^ (unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR)
	for _, set := range []struct {
		paths  []string
		rights uint64
	}{
		{ll.ReadExec, execRights},
		{ll.ReadOnly, readRights},
		{ll.ReadWrite, rw},
	} {
		for _, p := range set.paths {
			if err := addPathRule(int(rfd), p, set.rights&fs); err != nil {
				return -1, err
			}
		}
	}
	if ll.DenyNet && abi >= 4 {
		for _, port := range ll.BindTCP {
			attr := landlockNetPortAttr{access: unix.LANDLOCK_ACCESS_NET_BIND_TCP, port: uint64(port)}
			if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, rfd,
				landlockRuleNetPort, uintptr(unsafe.Pointer(&attr)), 0, 0, 0); errno != 0 {
				return -1, fmt.Errorf("add rule bind tcp %d: %w", port, errno)
			}
		}
	}
	ok = true
	return int(rfd), nil
}

// landlockNetPortAttr is struct landlock_net_port_attr (linux/landlock.h), which x/sys
// does not define.
type landlockNetPortAttr struct {
	access uint64
	port   uint64
}

const landlockRuleNetPort = 2 // LANDLOCK_RULE_NET_PORT

// restrictSelf enforces the ruleset rfd on the calling thread.
func restrictSelf(ll *Landlock, rfd int) error {
	var flags uintptr
	if ll.LogExec && min(ll.ABI, MaxLandlockABI) >= 7 {
		flags |= unix.LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rfd), flags, 0); errno != 0 {
		return fmt.Errorf("restrict_self: %w", errno)
	}
	return nil
}

// addPathRule allows rights beneath path. Missing paths are skipped (PATH entries and
// optional system dirs come and go); a file gets only the rights that apply to files.
func addPathRule(rfd int, path string, rights uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil
		}
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		rights &= fileRights
	}
	if rights == 0 {
		return nil
	}
	attr := unix.LandlockPathBeneathAttr{Allowed_access: rights, Parent_fd: int32(fd)}
	if _, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rfd),
		unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&attr)), 0, 0, 0); errno != 0 {
		return fmt.Errorf("add rule %s: %w", path, errno)
	}
	return nil
}

// LandlockRuleset returns a ruleset fd for ll (close-on-exec; the caller closes it). The
// thread launcher gets it on the host side, before its launch thread unshares its fd
// table, and the thread enforces it with RestrictLandlock.
//
// Rulesets are cached per policy: a session's execs share one (the same paths and rights),
// and building one (an open and a rule per path) is a measurable part of a short exec. A
// ruleset holds the inodes it was built from; a path replaced afterwards is simply not
// covered by the cached rule (stricter, never looser). Callers get their own dup, so the
// bounded cache can close what it evicts.
func LandlockRuleset(ll *Landlock) (int, error) { return rulesets.get(ll) }

// RestrictLandlock enforces ruleset rfd (built for ll) on the calling OS thread only. The
// caller must hold runtime.LockOSThread, have set no_new_privs on the same thread, and must
// let that thread die (exit the goroutine still locked) once it has started the child.
func RestrictLandlock(ll *Landlock, rfd int) error { return restrictSelf(ll, rfd) }

// maxCachedRulesets bounds the cache (each entry holds one fd).
const maxCachedRulesets = 16

type rulesetCache struct {
	mu    sync.Mutex
	fds   map[string]int
	order []string
}

var rulesets = &rulesetCache{fds: map[string]int{}}

func (c *rulesetCache) get(ll *Landlock) (int, error) {
	keyb, err := json.Marshal(ll)
	if err != nil {
		return -1, err
	}
	key := string(keyb)
	c.mu.Lock()
	defer c.mu.Unlock()
	fd, ok := c.fds[key]
	if !ok {
		if fd, err = buildRuleset(ll); err != nil {
			return -1, err
		}
		if len(c.order) >= maxCachedRulesets {
			old := c.order[0]
			c.order = c.order[1:]
			unix.Close(c.fds[old])
			delete(c.fds, old)
		}
		c.fds[key] = fd
		c.order = append(c.order, key)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("dup landlock ruleset: %w", err)
	}
	return dup, nil
}
