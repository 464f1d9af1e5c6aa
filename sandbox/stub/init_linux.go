// SPDX-License-Identifier: MIT

package stub

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
)

// ProbeMarker is argv[1] of the user-namespace probe: the host starts this executable the
// way it starts a Policy.Init stub and learns from its exit status whether a private view
// can be built there (see RunProbe).
const ProbeMarker = "__fledge_sandbox_userns_probe__"

// ProbeEgress, after ProbeMarker, makes the probe check the run's network by destination
// instead of the view: a TUN device with its address and route in the probe's namespace.
const ProbeEgress = "egress"

// forwarded are the signals the init stub passes on to the program: the ones a host, a
// terminal or a supervisor sends to ask a process to stop or to act.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// runInit is the end of a Policy.Init stub (pid 1 of the run's pid namespace): every
// confinement step is on this locked thread, so the program forked from it inherits the
// view, no_new_privs, the Landlock domain, the empty capability sets and the seccomp
// filter. It returns only when the program could not be started; otherwise it exits once
// the program has ended, after writing its wait status to fd 6.
func runInit(path string, pol *Policy) error {
	// Not dumpable: the stub keeps capabilities over the run's namespaces and threads
	// outside its view until it exits, so nothing in the run may open its /proc entries
	// (root, fds, memory) or attach to it. The program's execve makes it dumpable again.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return &StepError{Step: "init", Msg: "not dumpable: " + err.Error()}
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	// The program stays in the stub's session and process group, so the host's group
	// signal and its watchdog reach it without going through the stub.
	pid, err := syscall.ForkExec(path, pol.Args, &syscall.ProcAttr{Env: pol.Env, Files: []uintptr{0, 1, 2}})
	if err != nil {
		signal.Stop(sigs)
		return &StepError{Step: "exec", Msg: fmt.Sprintf("%s: %v", path, err)}
	}
	// ForkExec returns once the program's execve succeeded: confirm the launch and close
	// the error pipe so the host sees its end.
	if _, err := syscall.Write(fdErr, []byte{execMark}); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return &StepError{Step: "errpipe", Msg: err.Error()}
	}
	_ = syscall.Close(fdErr)
	// The program's stdio is its own from here: a program that closes its stdout must give
	// the host EOF then, as it would after an exec in place, not when the stub exits.
	releaseStdio()
	go func() {
		for s := range sigs {
			_ = syscall.Kill(pid, s.(syscall.Signal))
		}
	}()
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			// ECHILD before the program was reaped cannot happen; exit like a stub that
			// lost its program (the host then reports the stub's own status).
			os.Exit(exitStubFailed)
		}
		if wpid != pid {
			continue // an orphan re-parented to us: reaped, nothing more
		}
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], uint32(ws))
		_, _ = syscall.Write(fdStatus, b[:])
		// Exiting ends the pid namespace: the kernel kills whatever the program left.
		os.Exit(0)
	}
}

// releaseStdio points the stub's fds 0-2 at /dev/null (granted in every view), or closes
// them if it cannot be opened.
func releaseStdio() {
	null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	for fd := 0; fd < 3; fd++ {
		if err == nil && null != fd {
			_ = unix.Dup3(null, fd, 0)
		} else if err != nil {
			_ = unix.Close(fd)
		}
	}
	if err == nil && null > 2 {
		_ = unix.Close(null)
	}
}

// runProbe checks, in a process started like a Policy.Init stub, that the user namespace
// grants what a view needs: a mount namespace of its own, a tmpfs and a proc of its pid
// namespace. Exit 0 = yes; otherwise the reason is on stderr.
func runProbe() int {
	runtime.LockOSThread()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if os.Getpid() != 1 {
		return fail(fmt.Errorf("not pid 1 of a new pid namespace (pid %d)", os.Getpid()))
	}
	if len(os.Args) > 2 && os.Args[2] == ProbeEgress {
		fds, err := kernel.BuildEgressNet(&kernel.EgressNet{TUN: "tun0", Addr: [4]byte{10, 77, 0, 2}, MTU: 1500})
		if err != nil {
			return fail(err)
		}
		for _, fd := range fds.All() {
			_ = unix.Close(fd)
		}
		return 0
	}
	if err := kernel.ProbeView(); err != nil {
		return fail(err)
	}
	// The capability drop the stub does before the program runs must work too.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("clear ambient capabilities: %w", err))
	}
	return 0
}
