// SPDX-License-Identifier: MIT

package kernel

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// A root fledge's commands keep uid 0 when their capabilities are dropped, and a procfs
// file's owner bits need no capability: without more, a command reads what the kernel keeps
// from ordinary users with mode 0400 — /proc/slabinfo and /proc/vmallocinfo (the kernel
// heap's layout, allocation sites and physical addresses: exploit aids), /proc/timer_list
// (every CPU's timers: the host's activity), /proc/kpageflags, kpagecount and kpagecgroup
// (physical memory), /proc/pagetypeinfo — and /proc/keys lists every key root may view (the
// descriptions in root's keyrings, the NFS id mapper's user names). The system paths are
// shown as an ordinary user sees them (idmapped mounts); procfs cannot be idmapped, so the
// view covers these files instead, as container runtimes mask /proc/keys and
// /proc/timer_list: an empty file of mode 0 is bound read-only over each, and opening it
// fails with EACCES, as it does for an ordinary user.
//
// Which files: every regular file at the top of /proc that its owner may read and others may
// not (so a kernel's new one is covered without a list), plus keys and key-users (0444, but
// what they list depends on the reader). Nothing in /proc/<pid>: a command sees its own
// namespace's processes only, and the holder (pid 1) is not dumpable. Of /proc/sys, only the
// two network secrets below, when the run shares fledge's network namespace (granted the
// network: NetRootOnlyProc); with the network denied they are the run's own empty
// namespace's. Its other root-only entries refuse a reader without capabilities (bpf_jit_*)
// or are harmless (cad_pid, usermodehelper's capability sets, mmap_rnd_bits).

// procKeyFiles are covered whatever their mode: their content is the reader's keys.
var procKeyFiles = []string{"keys", "key-users"}

var rootOnlyProc struct {
	mu    sync.Mutex
	names []string // nil until found
}

// RootOnlyProc names the files at the top of this kernel's /proc to cover in a root
// fledge's views. The set is the kernel's (the same in every pid namespace), so it is
// found once per process: listing and statting /proc costs about 0.35 ms, more than the
// rest of a view's procfs. A failure is not kept (out of file descriptors for a moment
// would otherwise refuse every later run): the next run looks again.
func RootOnlyProc() ([]string, error) {
	rootOnlyProc.mu.Lock()
	defer rootOnlyProc.mu.Unlock()
	if rootOnlyProc.names == nil {
		names, err := scanRootOnlyProc("/proc")
		if err != nil {
			return nil, err
		}
		rootOnlyProc.names = slices.Clip(append([]string{}, names...))
	}
	return rootOnlyProc.names, nil
}

// inFullProc calls scan with proc, or, when proc is a procfs of the processes only
// (subset=pid: fledge run as a service with systemd's ProcSubset=pid), with a full procfs of
// our own, mounted nowhere: the views' own procfs shows the kernel's files all the same.
func inFullProc(proc string, scan func(proc string) ([]string, error)) ([]string, error) {
	root, err := fullProcOf(proc)
	if err != nil {
		return nil, err
	}
	return scan(root)
}

// keptProc is the procfs of fledge's own that fullProcOf makes once and keeps for the
// process's life (an fd, mounted nowhere): one made per call would be a new superblock
// each time, whose sysctl inodes are new each time, so a view template checked against
// them would be made again on every run.
var keptProc struct {
	mu   sync.Mutex
	made bool
	fd   int
}

// fullProcOf is proc, or, when proc is a procfs of the processes only (subset=pid), the
// root of a full procfs of fledge's own, kept.
func fullProcOf(proc string) (string, error) {
	if _, err := os.Lstat(proc + "/version"); !errors.Is(err, os.ErrNotExist) {
		return proc, nil
	}
	keptProc.mu.Lock()
	defer keptProc.mu.Unlock()
	if !keptProc.made {
		fd, err := DetachedProc()
		if err != nil {
			return "", fmt.Errorf("%s shows only processes, and a procfs of its own: %w", proc, err)
		}
		keptProc.made, keptProc.fd = true, fd
	}
	return fmt.Sprintf("/proc/self/fd/%d", keptProc.fd), nil
}

// FullProc is the path of a procfs with the kernel's files (/proc/sys among them) in
// fledge's pid namespace: /proc, or a procfs of fledge's own when /proc shows processes
// only (subset=pid). A view template checks the inodes of the network sysctls it covers
// there.
func FullProc() (string, error) { return fullProcOf("/proc") }

func scanRootOnlyProc(proc string) ([]string, error) {
	return inFullProc(proc, scanRootOnlyProcIn)
}

func scanRootOnlyProcIn(proc string) ([]string, error) {
	ents, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", proc, err)
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", proc, e.Name(), err)
		}
		if m := fi.Mode().Perm(); m&0o400 != 0 && m&0o004 == 0 {
			out = append(out, e.Name())
		}
	}
	for _, name := range procKeyFiles {
		if _, err := os.Lstat(proc + "/" + name); err == nil {
			out = append(out, name)
		}
	}
	return out, nil
}

// A run granted the network shares fledge's network namespace, and /proc/sys/net shows the
// reader's namespace: two of its files are 0600 root and guarded by nothing else (the kernel
// checks no capability when they are read). net.ipv4.tcp_fastopen_key is the key of every
// TCP Fast Open cookie the namespace's servers hand out (with it a command forges cookies
// for any client address); net.ipv6.conf.<if>.stable_secret is the secret behind an
// interface's stable-privacy IPv6 addresses (with it the host's address in any network can
// be predicted). The others 0600 there refuse a reader without CAP_SYS_ADMIN (bpf_jit_*)
// or tell nothing (see above). These are named, not scanned: /proc/sys/net holds thousands
// of files per interface, and a run's covers are made on every launch.

// maxNetCovers bounds the covers of one run's network sysctls (one per interface, plus
// the "all" and "default" entries): a host with more interfaces is refused rather than
// given thousands of mounts per run.
const maxNetCovers = 4096

// ErrTooManyCovers: the namespace has more interfaces than maxNetCovers.
var ErrTooManyCovers = errors.New("too many network interfaces to cover their /proc/sys secrets")

// NetRootOnlyProc names, relative to /proc, the root-only network sysctls of the calling
// thread's network namespace to cover in a root fledge's view of a run that shares it. The
// interfaces are the namespace's now, so it is asked per run.
func NetRootOnlyProc() ([]string, error) { return scanNetRootOnlyProc("/proc") }

func scanNetRootOnlyProc(proc string) ([]string, error) {
	return inFullProc(proc, scanNetRootOnlyProcIn)
}

func scanNetRootOnlyProcIn(proc string) ([]string, error) {
	cands := []string{"sys/net/ipv4/tcp_fastopen_key"}
	ents, err := os.ReadDir(proc + "/sys/net/ipv6/conf")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("list %s/sys/net/ipv6/conf: %w", proc, err)
	}
	if len(ents) > maxNetCovers {
		return nil, fmt.Errorf("%w: %d (at most %d)", ErrTooManyCovers, len(ents), maxNetCovers)
	}
	for _, e := range ents {
		cands = append(cands, "sys/net/ipv6/conf/"+e.Name()+"/stable_secret")
	}
	var out []string
	for _, name := range cands {
		fi, err := os.Lstat(proc + "/" + name)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6, or an interface gone meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", proc, name, err)
		}
		if fi.Mode().IsRegular() && fi.Mode().Perm()&0o004 == 0 {
			out = append(out, name)
		}
	}
	return out, nil
}

// DetachedProc makes a read-only procfs of the caller's pid namespace, mounted nowhere (its
// fd is its root), with every file of the kernel's whatever options fledge's /proc was
// mounted with. The pid-namespace holder sends one to the host for the views; the host
// keeps one for lookups when its /proc shows processes only (FullProc).
func DetachedProc() (int, error) {
	fs, err := unix.Fsopen("proc", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fs)
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, err
	}
	return unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC,
		unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
}

// maskProc covers the names in the procfs mounted at proc (a path in the stage) with the
// empty file at mask (made here, mode 0, on the stage's tmpfs: it is detached with the
// stage, and the covers keep only that file). A name this procfs lacks is skipped. Names
// may lead below the top of /proc (sys/net/...): they are looked up in the calling thread's
// network namespace (/proc/sys/net shows the reader's), which must be the command's.
func maskProc(proc, mask string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(proc, &sfs); errors.Is(err, unix.ENOENT) || (err == nil && sfs.Type != unix.PROC_SUPER_MAGIC) {
		return nil // no /proc in this view
	} else if err != nil {
		// Not absent, and not known to be no procfs: covers skipped here would leave
		// root's files readable, so the view is refused.
		return fmt.Errorf("/proc cover: %w", err)
	}
	// mknod, not open(O_CREAT): no fd is ever open on it (see bindInto).
	if err := unix.Mknod(mask, unix.S_IFREG, 0); err != nil {
		return fmt.Errorf("/proc cover: %w", err)
	}
	// Made a read-only mount of its own first: a bind copies its source mount's flags, so
	// each cover below is read-only, nosuid, nodev and noexec in one call.
	if err := unix.Mount(mask, mask, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("/proc cover: %w", err)
	}
	if err := unix.Mount("", mask, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("read-only /proc cover: %w", err)
	}
	for _, name := range names {
		p := proc + "/" + name
		if err := unix.Mount(mask, p, "", unix.MS_BIND, ""); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("cover %s: %w", p, err)
		}
	}
	return nil
}
