// SPDX-License-Identifier: MIT

package linux

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/sandbox/stub"
)

// The private view without root. An unprivileged fledge cannot make a mount namespace on a
// thread of its own (that needs CAP_SYS_ADMIN), but it can start a process in new user,
// mount and pid namespaces where it has that capability over those namespaces only. So
// every run goes through the re-exec stub, started with:
//
//   - CLONE_NEWUSER mapping the caller's uid and gid to the same ids inside (not to 0: files
//     the command creates belong to the user, and the command is no "root" anywhere), with
//     setgroups denied (the kernel requires it for an unprivileged gid map);
//   - CAP_SYS_ADMIN and CAP_SETPCAP as ambient capabilities: a non-zero uid loses every
//     capability at execve, ambient ones excepted, so this is how the re-executed stub
//     keeps them (over its own namespaces only) to build the view and drop its bounding
//     set; it clears them all again before the program runs;
//   - CLONE_NEWNS (the view), CLONE_NEWPID (the stub is pid 1, /proc shows the run's own
//     processes only, and when it exits the kernel kills everything left in the run),
//     CLONE_NEWIPC (SysV IPC and POSIX message queues of its own, gone with the run) and
//     CLONE_NEWNET when the spec denies the network.
//
// The stub then runs as an init (stub.Policy.Init): it forks the program from its confined
// thread, forwards signals, reaps orphans and reports the program's wait status.

// Capabilities the init stub keeps across its execve (numbers from linux/capability.h).
var userCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP}

// userProbeBound bounds the probe run in New.
const userProbeBound = 10 * time.Second

// KillPidNS is the tree kill of a run in its own pid namespace without a writable cgroup:
// SIGKILL to its init stub (reached through the process group, which nothing in the run
// can leave without leaving the namespace too) makes the kernel kill every process in it.
const KillPidNS = "pid-namespace"

// noCgroupKill is how a run's tree is killed when it has no cgroup.
func (s *Sandbox) noCgroupKill() string {
	if s.userView {
		return KillPidNS
	}
	return KillPgroup
}

// treeKill is how this sandbox kills a run's tree.
func (s *Sandbox) treeKill() string {
	if s.cg.writable() {
		return s.cg.killMethod()
	}
	return s.noCgroupKill()
}

// errNoStub: an unprivileged view needs the re-exec stub, which this executable is not.
var errNoStub = errors.New("no stub: the executable's main does not call stub.MaybeRun")

// statusBound bounds reading an exited init stub's status pipe.
const statusBound = 2 * time.Second

// userSys is the SysProcAttr an init stub starts with (sys is the one Start built: setsid,
// cgroup fd, network namespace flag).
func userSys(sys *syscall.SysProcAttr) {
	uid, gid := os.Getuid(), os.Getgid()
	sys.Cloneflags |= unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC
	sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	sys.GidMappingsEnableSetgroups = false
	sys.AmbientCaps = userCaps
}

// egressCaps adds what a user's stub needs to build its run's network by destination:
// CAP_NET_ADMIN over the network namespace it is born in (the capabilities it keeps across
// its own exec are the ambient ones; it drops them all before the program runs).
func egressCaps(sys *syscall.SysProcAttr) {
	sys.AmbientCaps = append(append([]uintptr{}, sys.AmbientCaps...), unix.CAP_NET_ADMIN)
}

// probeUserView starts the stub's probe the way a run's init stub is started (with a
// network namespace too when netns is set) and says why a view cannot be built, or nil.
func probeUserView(stubPath string, netns bool) error {
	return probeUser(stubPath, netns, false)
}

// probeUserEgress checks that a run's stub can build its network by destination in the
// user and network namespaces it is born in (a TUN device, its address and route).
func probeUserEgress(stubPath string) error { return probeUser(stubPath, true, true) }

func probeUser(stubPath string, netns, egress bool) error {
	if stubPath == "" {
		return errNoStub
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	sys := &syscall.SysProcAttr{Setsid: true}
	if netns {
		sys.Cloneflags |= unix.CLONE_NEWNET
	}
	userSys(sys)
	argv := []string{stubPath, stub.ProbeMarker}
	if egress {
		argv = append(argv, stub.ProbeEgress)
		egressCaps(sys)
	}
	proc, err := os.StartProcess(stubPath, argv, &os.ProcAttr{
		Files: []*os.File{null, null, w}, Env: []string{}, Sys: sys,
	})
	w.Close()
	if err != nil {
		return fmt.Errorf("start a process in new user namespaces: %w", err)
	}
	timer := time.AfterFunc(userProbeBound, func() { _ = proc.Kill() })
	defer timer.Stop()
	var out bytes.Buffer
	_ = r.SetReadDeadline(time.Now().Add(userProbeBound))
	_, _ = out.ReadFrom(io.LimitReader(r, 4096))
	st, err := proc.Wait()
	if err != nil {
		return err
	}
	if !st.Success() {
		msg := strings.TrimSpace(out.String())
		if msg == "" {
			msg = st.String()
		}
		return fmt.Errorf("in a user namespace: %s", msg)
	}
	return nil
}

// ownProc replaces the host's /proc bind of v by a fresh proc of the run's pid namespace.
func ownProc(v *kernel.View) {
	mounts := v.Mounts[:0]
	for _, m := range v.Mounts {
		if m.Path != "/proc" {
			mounts = append(mounts, m)
		}
	}
	v.Mounts = mounts
	v.ProcNew = true
}
