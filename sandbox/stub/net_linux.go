// SPDX-License-Identifier: MIT

package stub

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/sandbox/kernel"
)

// netAck is the host's one-byte answer: it serves the namespace.
const netAck = 'k'

// handOffNet builds the run's egress namespace (the stub's own), sends its fds to the host
// on fdNet and waits for the host's ack. Every fd of it is closed here afterwards: only the
// host keeps them.
func handOffNet(n *kernel.EgressNet) error {
	defer unix.Close(fdNet)
	fds, err := kernel.BuildEgressNet(n)
	if err != nil {
		return err
	}
	all := fds.All()
	defer func() {
		for _, fd := range all {
			_ = unix.Close(fd)
		}
	}()
	if err := unix.Sendmsg(fdNet, []byte{byte(len(all))}, unix.UnixRights(all...), nil, 0); err != nil {
		return fmt.Errorf("send to the host: %w", err)
	}
	var b [1]byte
	for {
		m, err := unix.Read(fdNet, b[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("host's answer: %w", err)
		}
		if m != 1 || b[0] != netAck {
			return errors.New("the host does not serve the namespace")
		}
		return nil
	}
}
