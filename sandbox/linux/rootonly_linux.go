// SPDX-License-Identifier: MIT

package linux

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/sandbox/stub"
)

// Root-only files in system paths. As root, a command (uid 0 without capabilities) still
// passes the owner's permission bits of every root file: a 0600 key or config a package
// installed anywhere under /etc, /usr or /opt, whatever its name. The view therefore shows
// the system paths through an idmapped mount in which root's uid and gid are 65534
// (kernel/rootonly_linux.go): only what others may read or search is reachable. The
// mapping is one user namespace per sandbox, kept by an fd.

// systemRoots are the system paths: granted read-only or read+exec by policy to every
// plugin and command (policy.SystemPaths and /etc). A read-only grant of one is shown as an
// ordinary user sees it; other grants (the project, the plugin dir, PATH entries, policy
// extras, even beneath a system path: a project under /opt granted read-only) are what
// the user chose to give and are shown as they are.
var systemRoots = append([]string{"/etc", "/nix/store"}, SystemReadExec...)

// SystemFiles values of Report.SystemFiles.
const (
	// SystemFilesOthers: system paths show only what others may read (idmapped mounts).
	SystemFilesOthers = "others-only"
	// SystemFilesByName: only /etc's known secrets are left out, by name (Landlock).
	SystemFilesByName = "by-name"
)

// isSystemPath: p is one of systemRoots.
func isSystemPath(p string) bool {
	p = filepath.Clean(p)
	for _, r := range systemRoots {
		if p == r {
			return true
		}
	}
	return false
}

// markSystem flags v's read-only system mounts and gives v the mapping (userns -1: none).
func markSystem(v *kernel.View, userns int) {
	if userns < 0 {
		return
	}
	v.IDMap = userns
	for i := range v.Mounts {
		if !v.Mounts[i].Writable && isSystemPath(v.Mounts[i].Path) {
			v.Mounts[i].System = true
		}
	}
}

// errNoIDMap wraps why system paths cannot be shown through an idmapping here.
var errNoIDMap = errors.New("root-only files in system paths stay readable")

// hideRootNS makes the idmapping user namespace and checks that every existing system root
// can be shown through it (an overlayfs root, as in most containers, cannot: its files stay
// as they are, which the caller reports).
func hideRootNS() (int, error) {
	fd, err := newHideRootNS()
	if err != nil {
		return -1, fmt.Errorf("%w: idmapping namespace: %w", errNoIDMap, err)
	}
	for _, r := range systemRoots {
		if _, err := os.Stat(r); err != nil {
			continue
		}
		if err := kernel.IDMapSupported(r, fd); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("%w: %w", errNoIDMap, err)
		}
	}
	return fd, nil
}

// hideRootMap is the user namespace's mapping: 0 shows as 65534 (nobody, nogroup), every
// other id as itself (65534 on disk is left unmapped, which shows as 65534 too). A 32-bit
// build's SysProcIDMap cannot name ids past 2^31: those stay unmapped there (65534 too).
var hideRootMap = []syscall.SysProcIDMap{
	{ContainerID: 0, HostID: 65534, Size: 1},
	{ContainerID: 1, HostID: 1, Size: 65533},
	{ContainerID: 65535, HostID: 65535, Size: min(1<<32-1-65535, math.MaxInt-65535)},
}

// newHideRootNS returns an fd of a new user namespace with hideRootMap. Only a process can
// make one (unshare(CLONE_NEWUSER) refuses a multi-threaded caller). On amd64 a child is
// forked into it that only sleeps until it is killed (kernel.ForkUserNS); elsewhere, or should
// that fail, a child is started in it and stopped before it runs any code: PTRACE_TRACEME
// makes its execve stop it with SIGTRAP. Its namespace is opened, then it is killed. The
// launching thread is discarded: it was the tracer, and were it to exit first the child
// would go on (Pdeathsig kills it).
func newHideRootNS() (int, error) {
	var idMap strings.Builder
	for _, m := range hideRootMap {
		fmt.Fprintf(&idMap, "%d %d %d\n", m.ContainerID, m.HostID, m.Size)
	}
	if fd, err := kernel.ForkUserNS(idMap.String(), idMap.String()); err == nil {
		return fd, nil
	}
	return execHideRootNS()
}

// execHideRootNS makes newHideRootNS's namespace with a child that is fledge started again,
// stopped at its execve.
func execHideRootNS() (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return -1, err
	}
	fd := -1
	onDiscardedThread(func() {
		var proc *os.Process
		// argv[1] makes a stub-aware executable exit at once should it ever run (a holder
		// that is not pid 1).
		proc, err = os.StartProcess(exe, []string{exe, stub.PidNSMarker}, &os.ProcAttr{
			Env: []string{},
			Sys: &syscall.SysProcAttr{
				Cloneflags:  unix.CLONE_NEWUSER,
				UidMappings: hideRootMap, GidMappings: hideRootMap,
				Ptrace: true, Pdeathsig: unix.SIGKILL,
			},
		})
		if err != nil {
			return
		}
		fd, err = unix.Open(fmt.Sprintf("/proc/%d/ns/user", proc.Pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		_ = proc.Kill()
		_, _ = proc.Wait()
	})
	if err != nil {
		return -1, err
	}
	return fd, nil
}

// noSupplementaryGroups starts a root fledge's child without supplementary groups: the
// idmapping hides root's uid and gid, but a root process that is also in adm, disk or
// wheel (a container's root often is) would pass the group bits of those groups' files.
// The child sets them while it still holds CAP_SETGID, before its exec. An unprivileged
// fledge cannot (nor need: it has only the user's own groups, as the user has anyway).
func noSupplementaryGroups(sys *syscall.SysProcAttr) {
	if os.Geteuid() != 0 {
		return
	}
	sys.Credential = &syscall.Credential{Uid: 0, Gid: uint32(os.Getegid()), Groups: []uint32{}}
}
