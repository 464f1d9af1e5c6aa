package stub

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// The pid-namespace holder. The thread launcher forks every child of a session into one
// pid namespace whose init is this process (this executable again, with PidNSMarker as
// argv[1], started with CLONE_NEWPID): a child that were pid 1 itself would ignore every
// signal it has no handler for (the host's SIGTERM step would be lost) and would leave its
// orphans unreaped. The holder:
//   - makes one detached, read-only `proc` mount of its namespace (fsopen/fsmount, from
//     inside, so it shows only the namespace's processes) and sends it to the host over
//     its stdin socket; each launch attaches a clone of it at /proc of its view;
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
	procFD, err := detachedProc()
	if err != nil {
		_ = unix.Sendmsg(0, []byte("proc "+err.Error()), nil, nil, unix.MSG_NOSIGNAL)
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

// detachedProc makes a read-only procfs of this (the holder's) pid namespace, mounted
// nowhere.
func detachedProc() (int, error) {
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
