// SPDX-License-Identifier: MIT

package stub

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
)

// ErrNetHandOff wraps every failure to take over a run's egress namespace from its stub.
var ErrNetHandOff = errors.New("network hand-off from the stub failed")

// maxNetFDs bounds what one hand-off may carry (TUN, 64 loopback ports, 3 nameservers).
const maxNetFDs = 1 + 64 + 2*3

// netPair makes the hand-off socket: the host's end and the stub's (fd 8 there).
func netPair() (host, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNetHandOff, err)
	}
	return os.NewFile(uintptr(fds[0]), "net-host"), os.NewFile(uintptr(fds[1]), "net-stub"), nil
}

// receiveNet waits (until deadline) for the stub's fds, gives them to attach and acks.
// done=false: the stub closed its end without sending (it failed; its error pipe says why).
func receiveNet(host *os.File, n *kernel.EgressNet, attach func(*kernel.EgressFDs) error, deadline time.Time) (done bool, err error) {
	want := n.Count()
	if want > maxNetFDs {
		return false, fmt.Errorf("%w: %d descriptors, limit %d", ErrNetHandOff, want, maxNetFDs)
	}
	fd := int(host.Fd())
	for {
		ms := time.Until(deadline).Milliseconds()
		if ms <= 0 {
			return false, fmt.Errorf("%w: the stub sent nothing in time", ErrNetHandOff)
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, int(min(ms, 1<<30))); err != nil && err != unix.EINTR {
			return false, fmt.Errorf("%w: %w", ErrNetHandOff, err)
		}
		if pfd[0].Revents != 0 {
			break
		}
	}
	buf := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(maxNetFDs*4))
	m, oobn, flags, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrNetHandOff, err)
	}
	var fds []int
	if oobn > 0 {
		cms, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return false, fmt.Errorf("%w: %w", ErrNetHandOff, err)
		}
		for _, cm := range cms {
			got, err := unix.ParseUnixRights(&cm)
			if err == nil {
				fds = append(fds, got...)
			}
		}
	}
	if m == 0 && len(fds) == 0 {
		return false, nil
	}
	split, ok := n.Split(fds)
	if !ok || flags&unix.MSG_CTRUNC != 0 {
		for _, f := range fds {
			_ = unix.Close(f)
		}
		return false, fmt.Errorf("%w: got %d descriptors, want %d", ErrNetHandOff, len(fds), want)
	}
	if err := attach(split); err != nil {
		return false, fmt.Errorf("%w: %w", ErrNetHandOff, err)
	}
	if _, err := unix.Write(fd, []byte{netAck}); err != nil {
		return false, fmt.Errorf("%w: %w", ErrNetHandOff, err)
	}
	return true, nil
}
