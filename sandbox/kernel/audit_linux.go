// SPDX-License-Identifier: MIT

package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel's own audit: Landlock (ABI 7 and later) logs its denials there as
// AUDIT_LANDLOCK_ACCESS / AUDIT_LANDLOCK_DOMAIN records when the audit subsystem is on.
// fledge reads them as root (llaudit_linux.go); doctor says whether this machine gives them.

// ErrAuditUnknown: the audit status could not be asked (not root, no audit support).
var ErrAuditUnknown = errors.New("kernel audit status unknown")

// auditQueryBound bounds the wait for the kernel's answer.
const auditQueryBound = time.Second

// KernelAuditEnabled asks the kernel over NETLINK_AUDIT (AUDIT_GET) whether its audit
// subsystem is enabled. It needs CAP_AUDIT_CONTROL (root); otherwise ErrAuditUnknown.
func KernelAuditEnabled() (bool, error) {
	on, _, err := KernelAuditStatus()
	return on, err
}

// KernelAuditStatus is KernelAuditEnabled with the kernel's backlog: how many records
// wait in its queue for the audit thread to send them (0: everything logged so far is on
// its way to the listeners).
func KernelAuditStatus() (enabled bool, backlog uint32, err error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return false, 0, fmt.Errorf("%w: %w", ErrAuditUnknown, err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(auditQueryBound.Nanoseconds())
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	req := make([]byte, unix.NLMSG_HDRLEN)
	binary.NativeEndian.PutUint32(req[0:4], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:6], unix.AUDIT_GET)
	binary.NativeEndian.PutUint16(req[6:8], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(req[8:12], 1)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return false, 0, fmt.Errorf("%w: %w", ErrAuditUnknown, err)
	}
	buf := make([]byte, 8192)
	for range 4 { // the status and the ack, in either order
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return false, 0, fmt.Errorf("%w: %w", ErrAuditUnknown, err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return false, 0, fmt.Errorf("%w: %w", ErrAuditUnknown, err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(binary.NativeEndian.Uint32(m.Data[:4])); e != 0 {
						return false, 0, fmt.Errorf("%w: %w", ErrAuditUnknown, unix.Errno(-e))
					}
				}
			case unix.AUDIT_GET:
				// struct audit_status: mask, enabled, failure, pid, rate_limit,
				// backlog_limit, lost, backlog, ...
				if len(m.Data) < 32 {
					return false, 0, fmt.Errorf("%w: short status", ErrAuditUnknown)
				}
				return binary.NativeEndian.Uint32(m.Data[4:8]) != 0, binary.NativeEndian.Uint32(m.Data[28:32]), nil
			}
		}
	}
	return false, 0, fmt.Errorf("%w: no status", ErrAuditUnknown)
}
