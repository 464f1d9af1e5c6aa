// SPDX-License-Identifier: MIT

//go:build unix && !linux

package stub

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
)

func joinCgroups(procs []string) error {
	if len(procs) > 0 {
		return errors.New("cgroups exist only on Linux")
	}
	return nil
}

// setNoNewPrivs: there is no equivalent outside Linux; the sandbox reports it as degraded.
func setNoNewPrivs() error { return nil }

func getsid() (int, error) { return unix.Getsid(0) }

func fcntl(fd, cmd, arg int) (int, error) { return unix.FcntlInt(uintptr(fd), cmd, arg) }

func cloexecFrom(first int) error { return cloexecFromDir("/dev/fd", first) }

func handOffNet(*kernel.EgressNet) error {
	return errors.New("network by destination is built by the stub only on Linux")
}

// installFilter: no seccomp here (Notify is never set outside Linux).
func installFilter(pol *Policy) error {
	return kernel.InstallFilter(kernel.Filter{DenyUnix: pol.DenyUnix})
}
