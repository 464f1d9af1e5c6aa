package kernel

import (
	"errors"
	"fmt"
	"os"
	"strconv"

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
// namespace's processes only, and the holder (pid 1) is not dumpable. /proc/sys is left: its
// root-only entries are per network namespace (net.ipv4.tcp_fastopen_key, the IPv6
// stable_secret: the run's own empty namespace when the network is denied) or harmless
// (cad_pid, usermodehelper's capability sets, mmap_rnd_bits).

// procKeyFiles are covered whatever their mode: their content is the reader's keys.
var procKeyFiles = []string{"keys", "key-users"}

// maskRootOnlyProc covers the root-only files of the procfs mounted at proc (a path in the
// stage; nothing happens when none is mounted there, or when this process is not root:
// a user's command is refused those files by their owner bits). stage is a writable
// directory of the stage where the mask's tmpfs is made for a moment.
func maskRootOnlyProc(proc, stage string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(proc, &sfs); err != nil || sfs.Type != unix.PROC_SUPER_MAGIC {
		return nil
	}
	targets, err := rootOnlyProc(proc)
	if err != nil || len(targets) == 0 {
		return err
	}
	if err := unix.Mkdir(stage, 0o700); err != nil {
		return fmt.Errorf("mask stage: %w", err)
	}
	if err := unix.Mount("fledge-masked", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
		"size=4k,nr_inodes=2,mode=0700"); err != nil {
		return fmt.Errorf("mask tmpfs: %w", err)
	}
	defer func() { _ = unix.Unmount(stage, unix.MNT_DETACH) }()
	// mknod, not open(O_CREAT): no fd is ever open on it (see bindInto).
	empty := stage + "/empty"
	if err := unix.Mknod(empty, unix.S_IFREG, 0); err != nil {
		return fmt.Errorf("mask file: %w", err)
	}
	for _, p := range targets {
		if err := unix.Mount(empty, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
		if err := unix.Mount("", p, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("read-only mask %s: %w", p, err)
		}
	}
	return nil
}

// rootOnlyProc lists the files of proc to cover.
func rootOnlyProc(proc string) ([]string, error) {
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
			out = append(out, proc+"/"+e.Name())
		}
	}
	for _, name := range procKeyFiles {
		if _, err := os.Lstat(proc + "/" + name); err == nil {
			out = append(out, proc+"/"+name)
		}
	}
	return out, nil
}
