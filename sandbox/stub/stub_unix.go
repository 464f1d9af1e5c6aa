// SPDX-License-Identifier: MIT

//go:build unix

package stub

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/fledgehq/fledge/sandbox/kernel"
)

// apply runs the stub steps in their security order, then execs. The order matters:
// cgroup first (every later step, and every process, is accounted), no_new_privs before
// Landlock (the kernel requires it), setsid before anything can open a terminal, the
// directory check before fds are closed, Landlock last so the stub itself can still read
// cgroup files and the policy's paths.
func apply(pol *Policy) error {
	if err := joinCgroups(pol.CgroupProcs); err != nil {
		return &StepError{Step: "cgroup", Msg: err.Error()}
	}
	if pol.Net != nil {
		if err := handOffNet(pol.Net); err != nil {
			return &StepError{Step: "network", Msg: err.Error()}
		}
	}
	if err := setNoNewPrivs(); err != nil {
		return &StepError{Step: "no_new_privs", Msg: err.Error()}
	}
	if err := setRlimits(pol); err != nil {
		return &StepError{Step: "rlimit", Msg: err.Error()}
	}
	// A new session has no controlling terminal, so /dev/tty cannot be opened and TIOCSTI
	// has no terminal to inject into; the host never passes a tty as stdio either.
	if _, err := syscall.Setsid(); err != nil && !(errors.Is(err, syscall.EPERM) && isSessionLeader()) {
		return &StepError{Step: "setsid", Msg: err.Error()}
	}
	if pol.View != nil {
		dirfd := -1
		if pol.HasDir && !pol.Init {
			dirfd = fdDir
		}
		if err := kernel.EnterView(pol.View, dirfd); err != nil {
			return &StepError{Step: "view", Msg: err.Error()}
		}
	} else if pol.HasDir {
		if err := enterDir(pol); err != nil {
			return &StepError{Step: "fchdir", Msg: err.Error()}
		}
	}
	if err := cloexecFrom(3); err != nil {
		return &StepError{Step: "close_fds", Msg: err.Error()}
	}
	path, err := lookPath(pol)
	if err != nil {
		return &StepError{Step: "exec", Msg: err.Error()}
	}
	if pol.Landlock != nil {
		if pol.AuditName != "" {
			_ = kernel.SetThreadName(pol.AuditName) // unnamed: the denials are not the run's records, still denied
		}
		if err := kernel.ApplyLandlock(pol.Landlock); err != nil {
			return &StepError{Step: "landlock", Msg: err.Error()}
		}
	}
	if err := kernel.DropExecCaps(); err != nil {
		return &StepError{Step: "capabilities", Msg: err.Error()}
	}
	if err := installFilter(pol); err != nil {
		return &StepError{Step: "seccomp", Msg: err.Error()}
	}
	if pol.Init {
		return runInit(path, pol)
	}
	// Tell the host we reached exec: a stub that dies before this point (a crash, the OOM
	// killer) leaves the pipe empty and the host reports launch_failed, not a run.
	if _, err := syscall.Write(fdErr, []byte{execMark}); err != nil {
		return &StepError{Step: "errpipe", Msg: err.Error()}
	}
	err = syscall.Exec(path, pol.Args, pol.Env)
	return &StepError{Step: "exec", Msg: fmt.Sprintf("%s: %v", path, err)}
}

func isSessionLeader() bool {
	sid, err := getsid()
	return err == nil && sid == os.Getpid()
}

func setRlimits(pol *Policy) error {
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{}); err != nil {
		return fmt.Errorf("core: %w", err)
	}
	n := pol.NoFile
	if n == 0 {
		n = DefaultNoFile
	}
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur); err != nil {
		return fmt.Errorf("nofile: %w", err)
	}
	if uint64(cur.Max) < n { // never try to raise the hard limit
		n = uint64(cur.Max)
	}
	lim := cur
	setLim(&lim.Cur, n)
	setLim(&lim.Max, n)
	// syscall.Setrlimit (not x/sys) so the Go runtime forgets the soft limit it saved at
	// start and exec passes ours on.
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("nofile: %w", err)
	}
	return nil
}

// enterDir changes into the inherited directory handle and proves it is the directory the
// host guarded: fchdir never re-resolves a path, and dev/ino catch a wrong fd.
func enterDir(pol *Policy) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fdDir, &st); err != nil {
		return err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return errors.New("working directory handle is not a directory")
	}
	if pol.DirDev != 0 || pol.DirIno != 0 {
		if uint64(st.Dev) != pol.DirDev || uint64(st.Ino) != pol.DirIno {
			return fmt.Errorf("working directory handle changed identity (dev %d ino %d, want %d/%d)",
				st.Dev, st.Ino, pol.DirDev, pol.DirIno)
		}
	}
	if err := syscall.Fchdir(fdDir); err != nil {
		return err
	}
	var cwd syscall.Stat_t
	if err := syscall.Stat(".", &cwd); err != nil {
		return err
	}
	if cwd.Dev != st.Dev || cwd.Ino != st.Ino {
		return errors.New("cwd differs from the directory handle after fchdir")
	}
	return nil
}

func markCloexec(fd int) error {
	_, err := fcntl(fd, syscall.F_SETFD, syscall.FD_CLOEXEC)
	return err
}

// setLim stores v in an rlimit field, which is uint64 on Linux/darwin and int64 on FreeBSD.
func setLim[T ~int64 | ~uint64](dst *T, v uint64) { *dst = T(v) }
