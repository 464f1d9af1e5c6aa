// SPDX-License-Identifier: MIT

package stub

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
)

// The pid-namespace holder. The thread launcher forks every child of a session into one
// pid namespace whose init is this process (this executable again, with PidNSMarker as
// argv[1], started with CLONE_NEWPID; on amd64 fledge forks a holder that takes the same
// steps in assembly instead, sandbox/kernel/pidholder_amd64.go, and this one is the
// fallback): a child that were pid 1 itself would ignore every
// signal it has no handler for (the host's SIGTERM step would be lost) and would leave its
// orphans unreaped. The holder:
//   - makes one detached, read-only `proc` mount of its namespace (fsopen/fsmount, from
//     inside, so it shows only the namespace's processes) and sends it to the host over
//     its stdin socket; each launch attaches a clone of it at /proc of its view;
//   - leaves the host's mounts (after making the procfs: see runPidNS): it is cloned with
//     a mount namespace of its own and moves into an empty read-only root (emptyRoot), so
//     /proc/1/mountinfo, which any process of the namespace may read, lists nothing of
//     the host;
//   - reaps every orphan that is reparented to it;
//   - exits when the host's end of the socket closes (the host closed the sandbox, or died
//     by any signal): the kernel then kills every process left in the namespace, so
//     nothing a session started outlives it.

// PidNSMarker is argv[1] of the pid-namespace holder.
const PidNSMarker = "__fledge_sandbox_pidns__"

func isPidNS(args []string) bool { return len(args) > 1 && args[1] == PidNSMarker }

// Exit codes of the holder (the host reports them when the holder fails to start).
const (
	pidNSExitUsage = 2
	pidNSExitProc  = 3
)

func runPidNS() int {
	// Terminal and job signals are meant for fledge, not for the holder (it has its own
	// session too); only the socket ends it.
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGPIPE,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	if os.Getpid() != 1 {
		return pidNSExitUsage
	}
	// The namespace's commands see the holder as pid 1: not dumpable, its /proc entries
	// (root, cwd, fds, environ, mem: the host's filesystem behind /proc/1/root) need
	// CAP_SYS_PTRACE, which no command has. (A command without capabilities is refused
	// them anyway, as is one in a Landlock domain: three locks on the same door.)
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return pidNSExitUsage
	}
	// The procfs first, while the copy of the host's mounts (with its /proc) is still this
	// namespace's: in a user namespace other than the first (fledge as a container's root)
	// the kernel makes a procfs only where a fully visible one is already mounted, and
	// refuses it ("mount too revealing", EPERM) once emptyRoot has let the copy go.
	procFD, err := kernel.DetachedProc()
	if err != nil {
		_ = unix.Sendmsg(0, []byte("proc "+err.Error()), nil, nil, unix.MSG_NOSIGNAL)
		return pidNSExitProc
	}
	if err := emptyRoot(); err != nil {
		_ = unix.Sendmsg(0, []byte("proc mount namespace: "+err.Error()), nil, nil, unix.MSG_NOSIGNAL)
		return pidNSExitProc
	}
	if err := unix.Sendmsg(0, []byte("proc"), unix.UnixRights(procFD), nil, unix.MSG_NOSIGNAL); err != nil {
		return pidNSExitProc
	}
	unix.Close(procFD)

	// Reap orphans as they come; the socket read below ends the holder's life.
	sigchld := make(chan os.Signal, 16)
	signal.Notify(sigchld, syscall.SIGCHLD)
	go func() {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid > 0 {
				continue
			}
			if err == unix.EINTR {
				continue
			}
			<-sigchld
		}
	}()
	buf := make([]byte, 64)
	for {
		n, _, _, _, err := unix.Recvmsg(0, buf, nil, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return 0 // the host is gone: exiting kills the namespace
		}
	}
}

// emptyRoot makes the holder's root an empty, read-only tmpfs and lets go of every other
// mount of its namespace (a copy of the host's, made by CLONE_NEWNS). Every run of the
// namespace sees the holder as its pid 1, and /proc/<pid>/mountinfo needs no ptrace rights:
// with the copy, any command could list the host's mount table (home directories, volumes,
// container and cgroup paths) through /proc/1/mountinfo, mounts and mountstats.
//
// The copy's mounts are made private first, so nothing done here reaches the host's.
func emptyRoot() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	// /proc exists wherever this runs (the holder mounts a procfs next); the tmpfs only
	// stacks on it in the holder's own copy.
	const at = "/proc"
	if err := unix.Mount("fledge-pidns", at, "tmpfs",
		unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,nr_inodes=1,mode=0500"); err != nil {
		return fmt.Errorf("mount empty root: %w", err)
	}
	if err := unix.Chdir(at); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root on the new one; detaching it leaves the
	// tmpfs alone.
	if err := unix.PivotRoot(".", "."); err != nil {
		if err != unix.EINVAL {
			return fmt.Errorf("pivot_root: %w", err)
		}
		// A root that cannot be pivoted from (an initramfs): a chroot hides the rest as
		// well, /proc/<pid>/mountinfo shows only mounts beneath the process's root.
		if err := unix.Chroot("."); err != nil {
			return fmt.Errorf("chroot: %w", err)
		}
	} else if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	return unix.Chdir("/")
}
