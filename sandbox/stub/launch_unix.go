// SPDX-License-Identifier: MIT

//go:build unix

package stub

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
)

// DefaultConfirmTimeout bounds how long Start waits for the stub to exec or fail.
const DefaultConfirmTimeout = 30 * time.Second

// Launch describes one stub start on the host side. The darwin and fallback sandboxes
// always start children this way; the Linux sandbox only with its LaunchStub method (its
// default thread launcher applies the same kernel steps, from sandbox/kernel, on a host
// thread and never re-executes).
type Launch struct {
	StubPath string   // absolute path of an executable whose main calls MaybeRun first
	Wrapper  []string // programs run before the stub (darwin: sandbox-exec -p PROFILE); Wrapper[0] absolute
	// Policy is sent to the stub as JSON. Start fills in HasDir and, unless the caller set
	// them, DirDev/DirIno from Dir.
	Policy *Policy
	Dir    *os.File // guarded working directory; nil = inherit the host's
	// Stdio for the child; all three must be set. Use the Files of OpenStdio, which never
	// hands a terminal to the child.
	Stdin, Stdout, Stderr *os.File
	Sys                   *syscall.SysProcAttr // clone flags, cgroup fd, setsid for the stub
	ConfirmTimeout        time.Duration        // 0 = DefaultConfirmTimeout

	// Notify is the stub's end of a socket on which it sends its seccomp listener
	// (Policy.Notify); it becomes the stub's fd 8. The caller closes its copy after Start.
	Notify *os.File

	// Status is set by a successful Start when Policy.Init is: the read end of the status
	// pipe, on which the init stub writes the program's wait status (ReadStatus) before it
	// exits. The returned process is then the stub, not the program. The caller closes it.
	Status *os.File

	// NetAttach takes the fds of the run's egress namespace (Policy.Net) from the stub and
	// serves them; it owns them from the call, also when it fails. The stub waits for it
	// before anything else runs, bounded by ConfirmTimeout.
	NetAttach func(*kernel.EgressFDs) error
}

// ReadStatus reads the program's wait status from an init stub's status pipe (Launch.Status)
// once the stub has exited. ok is false when the stub died without writing one (killed):
// its own wait status is then the run's. It waits at most bound for a stub that is gone
// yet whose pipe someone still holds.
func ReadStatus(f *os.File, bound time.Duration) (ws syscall.WaitStatus, ok bool) {
	_ = f.SetReadDeadline(time.Now().Add(bound))
	var b [4]byte
	if _, err := io.ReadFull(f, b[:]); err != nil {
		return 0, false
	}
	return syscall.WaitStatus(binary.LittleEndian.Uint32(b[:])), true
}

// Start starts the stub and returns once the stub has written its exec mark and the error
// pipe closed (close-on-exec: execve succeeded), so the returned process is the target
// program (exec keeps the pid). A failure before exec, or a stub that neither execs nor
// fails within ConfirmTimeout, comes back as sandbox.ErrLaunch wrapping ErrStubFailed
// (and the stub's *StepError when it reported one); the stub has then been killed and
// reaped.
func (l *Launch) Start() (*os.Process, error) {
	if l.Policy == nil || l.StubPath == "" {
		return nil, fmt.Errorf("%w: no policy or stub path", sandbox.ErrLaunch)
	}
	if l.Stdin == nil || l.Stdout == nil || l.Stderr == nil {
		return nil, fmt.Errorf("%w: stdio not set", sandbox.ErrLaunch)
	}
	if err := l.noteDir(); err != nil {
		return nil, err
	}
	pol, idmap, err := l.stubPolicy()
	if err != nil {
		return nil, err
	}
	if idmap != nil {
		defer idmap.Close()
	}
	data, err := json.Marshal(pol)
	if err != nil {
		return nil, fmt.Errorf("%w: encode policy: %w", sandbox.ErrLaunch, err)
	}
	if len(data) > MaxPolicyBytes {
		return nil, fmt.Errorf("%w: policy is %d bytes, limit %d", sandbox.ErrLaunch, len(data), MaxPolicyBytes)
	}
	polR, polW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrLaunch, err)
	}
	defer polW.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		polR.Close()
		return nil, fmt.Errorf("%w: %w", sandbox.ErrLaunch, err)
	}
	defer errR.Close()

	fs, err := l.childFiles(polR, errW, idmap)
	if err != nil {
		return nil, err
	}
	if fs.netHost != nil {
		defer fs.netHost.Close()
		defer fs.netChild.Close()
	}
	proc, err := l.startStub(fs, polR, errW)
	if err != nil {
		return nil, err
	}
	if err := sendPolicy(proc, polW, data); err != nil {
		return nil, err
	}
	return l.confirm(proc, errR, fs)
}

// noteDir puts the working directory's identity into the policy, so the stub can check the
// fd it got is that directory.
func (l *Launch) noteDir() error {
	if l.Dir == nil {
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(l.Dir.Fd()), &st); err != nil {
		return fmt.Errorf("%w: stat working directory: %w", sandbox.ErrLaunch, err)
	}
	l.Policy.HasDir = true
	// A caller that proved the directory's identity (pathguard) sets it; the stub then
	// checks the fd it got is that directory. Otherwise the handle's own identity.
	if l.Policy.DirDev == 0 && l.Policy.DirIno == 0 {
		l.Policy.DirDev, l.Policy.DirIno = uint64(st.Dev), uint64(st.Ino)
	}
	return nil
}

// stubPolicy is the policy as the stub gets it: the view's idmapping namespace (an fd of
// the host) renumbered to fdIDMap, and idmap the copy of that fd to hand over (nil: none).
// The caller closes idmap once the stub started.
func (l *Launch) stubPolicy() (*Policy, *os.File, error) {
	pol := l.Policy
	if pol.View == nil || pol.View.IDMap <= 2 {
		return pol, nil, nil
	}
	// A copy: the *os.File closes its fd when dropped, and the sandbox keeps its own.
	d, err := unix.FcntlInt(uintptr(pol.View.IDMap), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: idmapping namespace: %w", sandbox.ErrLaunch, err)
	}
	idmap := os.NewFile(uintptr(d), "idmap")
	cp, view := *pol, *pol.View
	view.IDMap = fdIDMap
	cp.View = &view
	return &cp, idmap, nil
}

// stubFiles are the files the stub starts with (files, by fd number) and the host's ends
// that go with them: the init stub's status pipe and the network hand-off socket.
type stubFiles struct {
	files             []*os.File
	statR, statW      *os.File
	netHost, netChild *os.File
}

// childFiles lays out the stub's fds: stdio, the policy and error pipes, the working
// directory, and the optional status pipe, idmapping namespace, listener socket and network
// hand-off socket at their fixed numbers. On an error it closes polR, errW and what it
// opened.
func (l *Launch) childFiles(polR, errW, idmap *os.File) (stubFiles, error) {
	var fs stubFiles
	var err error
	fs.files = []*os.File{l.Stdin, l.Stdout, l.Stderr, polR, errW, l.Dir}
	if l.Policy.Init {
		if fs.statR, fs.statW, err = os.Pipe(); err != nil {
			polR.Close()
			errW.Close()
			return stubFiles{}, fmt.Errorf("%w: %w", sandbox.ErrLaunch, err)
		}
		fs.files = append(fs.files, fs.statW) // fd 6 (fd 5 is closed when there is no Dir)
	} else if l.Dir == nil && idmap == nil && l.Notify == nil {
		fs.files = fs.files[:5]
	}
	if idmap != nil || l.Notify != nil {
		for len(fs.files) < fdIDMap {
			fs.files = append(fs.files, nil) // closed in the stub
		}
		fs.files = append(fs.files, idmap) // nil: closed in the stub
	}
	if l.Notify != nil {
		fs.files = append(fs.files, l.Notify) // fdNotify
	}
	if l.Policy.Net == nil {
		return fs, nil
	}
	if l.NetAttach == nil {
		polR.Close()
		errW.Close()
		if fs.statW != nil {
			fs.statR.Close()
			fs.statW.Close()
		}
		return stubFiles{}, fmt.Errorf("%w: a network namespace to hand off and nobody to take it", sandbox.ErrLaunch)
	}
	if fs.netHost, fs.netChild, err = netPair(); err != nil {
		polR.Close()
		errW.Close()
		if fs.statW != nil {
			fs.statR.Close()
			fs.statW.Close()
		}
		return stubFiles{}, fmt.Errorf("%w: %w", sandbox.ErrLaunch, err)
	}
	for len(fs.files) < fdNet {
		fs.files = append(fs.files, nil) // closed in the stub
	}
	fs.files = append(fs.files, fs.netChild)
	return fs, nil
}

// startStub starts the stub (behind the wrapper) with fs's files and closes the stub's ends
// of the pipes that only it uses.
func (l *Launch) startStub(fs stubFiles, polR, errW *os.File) (*os.Process, error) {
	argv := append(append([]string{}, l.Wrapper...), l.StubPath, Marker)
	proc, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Files: fs.files,
		Sys:   l.Sys,
		// The stub needs no environment of its own; the program gets Policy.Env at exec.
		Env: []string{},
	})
	polR.Close()
	errW.Close()
	if fs.statW != nil {
		fs.statW.Close()
	}
	if err != nil {
		if fs.statR != nil {
			fs.statR.Close()
		}
		return nil, fmt.Errorf("%w: start stub %s: %w", sandbox.ErrLaunch, argv[0], err)
	}
	return proc, nil
}

// sendPolicy writes the policy to the stub; a stub that could not take it is killed and
// reaped. The caller's deferred close of polW stays (a second close after the write's).
func sendPolicy(proc *os.Process, polW *os.File, data []byte) error {
	var err error
	// A policy that fits the pipe buffer is written at once; a larger one (huge env) must
	// not block Start while the stub is still starting, so it goes through a goroutine.
	if len(data) <= 32<<10 {
		_, err = polW.Write(data)
		polW.Close()
	} else {
		go func(w *os.File) { _, _ = w.Write(data); w.Close() }(polW)
	}
	if err != nil && !errors.Is(err, syscall.EPIPE) {
		_ = proc.Kill()
		_, _ = proc.Wait()
		return fmt.Errorf("%w: send policy: %w", sandbox.ErrLaunch, err)
	}
	return nil
}

// confirm waits, bounded by ConfirmTimeout, for the stub to hand over the run's network (when
// it has one) and to exec: the exec mark, then EOF on the error pipe. Anything else kills
// and reaps the stub and returns why it failed.
func (l *Launch) confirm(proc *os.Process, errR *os.File, fs stubFiles) (*os.Process, error) {
	timeout := l.ConfirmTimeout
	if timeout <= 0 {
		timeout = DefaultConfirmTimeout
	}
	deadline := time.Now().Add(timeout)
	if fs.netHost != nil {
		// The stub's copy must be gone here, or a stub that dies never gives EOF.
		fs.files[fdNet].Close()
		if _, err := receiveNet(fs.netHost, l.Policy.Net, l.NetAttach, deadline); err != nil {
			if fs.statR != nil {
				fs.statR.Close()
			}
			_ = proc.Kill()
			_, _ = proc.Wait()
			return nil, fmt.Errorf("%w: %w", sandbox.ErrLaunch, err)
		}
		// Not done: the stub failed before sending; its error pipe says why (below).
	}
	_ = errR.SetReadDeadline(deadline)
	msg, rerr := io.ReadAll(io.LimitReader(errR, maxErrBytes+2))
	reached := len(msg) > 0 && msg[0] == execMark
	if reached {
		msg = msg[1:]
	}
	if reached && len(msg) == 0 && rerr == nil {
		// The mark, then EOF as the pipe closed at exec (an init stub closes it once its
		// program's execve succeeded).
		l.Status = fs.statR
		return proc, nil
	}
	// Failure (or a stub that hangs): make sure it is gone and reaped.
	if fs.statR != nil {
		fs.statR.Close()
	}
	_ = proc.Kill()
	st, _ := proc.Wait()
	if len(msg) == 0 {
		why := "stub exited before exec"
		if rerr != nil {
			why = rerr.Error()
		}
		return nil, fmt.Errorf("%w: %w: %s (%v)", sandbox.ErrLaunch, ErrStubFailed, why, st)
	}
	return nil, fmt.Errorf("%w: %w: %w", sandbox.ErrLaunch, ErrStubFailed, parseStepError(msg))
}

func parseStepError(msg []byte) *StepError {
	step, text, ok := bytes.Cut(msg, []byte{0})
	if !ok {
		return &StepError{Step: "stub", Msg: strings.TrimSpace(string(msg))}
	}
	return &StepError{Step: string(step), Msg: string(text)}
}
