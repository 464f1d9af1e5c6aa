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
	if l.Dir != nil {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(l.Dir.Fd()), &st); err != nil {
			return nil, fmt.Errorf("%w: stat working directory: %w", sandbox.ErrLaunch, err)
		}
		l.Policy.HasDir = true
		// A caller that proved the directory's identity (pathguard) sets it; the stub then
		// checks the fd it got is that directory. Otherwise the handle's own identity.
		if l.Policy.DirDev == 0 && l.Policy.DirIno == 0 {
			l.Policy.DirDev, l.Policy.DirIno = uint64(st.Dev), uint64(st.Ino)
		}
	}
	// The view's idmapping namespace (an fd of the host) reaches the stub as fdIDMap.
	pol, idmap := l.Policy, (*os.File)(nil)
	if pol.View != nil && pol.View.IDMap > 2 {
		// A copy: the *os.File closes its fd when dropped, and the sandbox keeps its own.
		d, err := unix.FcntlInt(uintptr(pol.View.IDMap), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return nil, fmt.Errorf("%w: idmapping namespace: %w", sandbox.ErrLaunch, err)
		}
		idmap = os.NewFile(uintptr(d), "idmap")
		defer idmap.Close()
		cp, view := *pol, *pol.View
		view.IDMap = fdIDMap
		cp.View = &view
		pol = &cp
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

	files := []*os.File{l.Stdin, l.Stdout, l.Stderr, polR, errW, l.Dir}
	var statR, statW *os.File
	if l.Policy.Init {
		if statR, statW, err = os.Pipe(); err != nil {
			polR.Close()
			errW.Close()
			return nil, fmt.Errorf("%w: %w", sandbox.ErrLaunch, err)
		}
		files = append(files, statW) // fd 6 (fd 5 is closed when there is no Dir)
	} else if l.Dir == nil && idmap == nil && l.Notify == nil {
		files = files[:5]
	}
	if idmap != nil || l.Notify != nil {
		for len(files) < fdIDMap {
			files = append(files, nil) // closed in the stub
		}
		files = append(files, idmap) // nil: closed in the stub
	}
	if l.Notify != nil {
		files = append(files, l.Notify) // fdNotify
	}
	var netHost *os.File
	if l.Policy.Net != nil {
		if l.NetAttach == nil {
			polR.Close()
			errW.Close()
			if statW != nil {
				statR.Close()
				statW.Close()
			}
			return nil, fmt.Errorf("%w: a network namespace to hand off and nobody to take it", sandbox.ErrLaunch)
		}
		var netChild *os.File
		if netHost, netChild, err = netPair(); err != nil {
			polR.Close()
			errW.Close()
			if statW != nil {
				statR.Close()
				statW.Close()
			}
			return nil, fmt.Errorf("%w: %w", sandbox.ErrLaunch, err)
		}
		defer netHost.Close()
		defer netChild.Close()
		for len(files) < fdNet {
			files = append(files, nil) // closed in the stub
		}
		files = append(files, netChild)
	}
	argv := append(append([]string{}, l.Wrapper...), l.StubPath, Marker)
	proc, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Files: files,
		Sys:   l.Sys,
		// The stub needs no environment of its own; the program gets Policy.Env at exec.
		Env: []string{},
	})
	polR.Close()
	errW.Close()
	if statW != nil {
		statW.Close()
	}
	if err != nil {
		if statR != nil {
			statR.Close()
		}
		return nil, fmt.Errorf("%w: start stub %s: %w", sandbox.ErrLaunch, argv[0], err)
	}

	// A policy that fits the pipe buffer is written at once; a larger one (huge env) must
	// not block Start while the stub is still starting, so it goes through a goroutine.
	if len(data) <= 32<<10 {
		_, err = polW.Write(data)
		polW.Close()
	} else {
		go func(w *os.File) { _, _ = w.Write(data); w.Close() }(polW)
		polW = nil
	}
	if err != nil && !errors.Is(err, syscall.EPIPE) {
		_ = proc.Kill()
		_, _ = proc.Wait()
		return nil, fmt.Errorf("%w: send policy: %w", sandbox.ErrLaunch, err)
	}

	timeout := l.ConfirmTimeout
	if timeout <= 0 {
		timeout = DefaultConfirmTimeout
	}
	deadline := time.Now().Add(timeout)
	if netHost != nil {
		// The stub's copy must be gone here, or a stub that dies never gives EOF.
		files[fdNet].Close()
		if _, err := receiveNet(netHost, l.Policy.Net, l.NetAttach, deadline); err != nil {
			if statR != nil {
				statR.Close()
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
		l.Status = statR
		return proc, nil
	}
	// Failure (or a stub that hangs): make sure it is gone and reaped.
	if statR != nil {
		statR.Close()
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
