// SPDX-License-Identifier: MIT

package testutil

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel's audit can be switched only from the initial pid namespace (the kernel
// refuses AUDIT_GET/AUDIT_SET from any other), and the contained tests run in one of their
// own. So the harness's outer process serves the switch over a socket the contained test
// inherits, and puts the audit back as it found it when the contained run ends, however it
// ends. fledge itself never changes the host's audit state: only tests ask for it.

// containAuditEnv names the contained test's fd of that socket.
const containAuditEnv = "FLEDGE_CONTAIN_AUDIT_FD"

// auditService is the outer side: it remembers the state it found and restores it.
type auditService struct {
	mine, theirs *os.File
	mu           sync.Mutex
	changed      bool
	was          bool
}

func startAuditService() *auditService {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	s := &auditService{mine: os.NewFile(uintptr(fds[0]), "audit-service"), theirs: os.NewFile(uintptr(fds[1]), "audit-client")}
	go s.serve()
	return s
}

func (s *auditService) serve() {
	buf := make([]byte, 1)
	for {
		n, err := s.mine.Read(buf)
		if err != nil || n != 1 {
			return
		}
		err = s.set(buf[0] == '1')
		reply := []byte{'+'}
		if err != nil {
			reply = []byte("-" + err.Error())
		}
		if _, err := s.mine.Write(reply); err != nil {
			return
		}
	}
}

// set turns the audit on (on) or back to what it was.
func (s *auditService) set(on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		was, err := kernelAuditEnabled()
		if err != nil {
			return err
		}
		if !s.changed {
			s.was = was
		}
		if was {
			return nil
		}
		s.changed = true
		return setKernelAudit(true)
	}
	if !s.changed {
		return nil
	}
	s.changed = false
	return setKernelAudit(s.was)
}

// close restores the audit and ends the service (the contained run is over).
func (s *auditService) close() {
	if s == nil {
		return
	}
	_ = s.set(false)
	s.mine.Close()
	s.theirs.Close()
}

// setKernelAudit sends AUDIT_SET enabled=on (CAP_AUDIT_CONTROL, initial pid namespace).
func setKernelAudit(on bool) error {
	// struct audit_status's mask and enabled (the kernel reads only as much of the status
	// as was sent).
	st := make([]byte, 40)
	binary.NativeEndian.PutUint32(st[0:4], unix.AUDIT_STATUS_ENABLED)
	if on {
		binary.NativeEndian.PutUint32(st[4:8], 1)
	}
	_, err := auditRequest(unix.AUDIT_SET, st)
	return err
}

// kernelAuditEnabled asks AUDIT_GET (the tests' own copy of kernel.KernelAuditEnabled:
// this package may not import the sandbox, whose tests import it).
func kernelAuditEnabled() (bool, error) {
	st, err := auditRequest(unix.AUDIT_GET, nil)
	if err != nil {
		return false, err
	}
	if len(st) < 8 {
		return false, errors.New("AUDIT_GET: short status")
	}
	return binary.NativeEndian.Uint32(st[4:8]) != 0, nil
}

// auditRequest sends one audit netlink request and returns the reply's payload (AUDIT_GET:
// the status) once the kernel acknowledged it.
func auditRequest(typ uint16, payload []byte) ([]byte, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_AUDIT)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(time.Second.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, err
	}
	req := make([]byte, unix.NLMSG_HDRLEN+len(payload))
	binary.NativeEndian.PutUint32(req[0:4], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:6], typ)
	binary.NativeEndian.PutUint16(req[6:8], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(req[8:12], 1)
	copy(req[unix.NLMSG_HDRLEN:], payload)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	var got []byte
	acked := false
	buf := make([]byte, 8192)
	for range 4 { // the reply and the ack, in either order
		n, _, err := unix.Recvfrom(fd, buf, 0)
		for i := 0; err == unix.EINTR && i < 100; i++ {
			// A signal (Go's preemption among them) cut the wait short: not an answer.
			n, _, err = unix.Recvfrom(fd, buf, 0)
		}
		if err != nil {
			return nil, fmt.Errorf("audit request %d: %w", typ, err)
		}
		if n < unix.NLMSG_HDRLEN {
			continue
		}
		switch binary.NativeEndian.Uint16(buf[4:6]) {
		case unix.NLMSG_ERROR:
			if n < unix.NLMSG_HDRLEN+4 {
				return nil, errors.New("audit request: short ack")
			}
			if e := int32(binary.NativeEndian.Uint32(buf[16:20])); e != 0 {
				return nil, fmt.Errorf("audit request %d: %w", typ, unix.Errno(-e))
			}
			acked = true
		case typ:
			got = append([]byte(nil), buf[unix.NLMSG_HDRLEN:n]...)
		}
		if acked && (typ != unix.AUDIT_GET || got != nil) {
			return got, nil
		}
	}
	return nil, fmt.Errorf("audit request %d: no answer", typ)
}

var auditClientMu sync.Mutex

// auditClient is the harness's switch as one *os.File for the whole process: a File made
// per test would be closed by its finalizer once that test's cleanup let go of it, and the
// next test's write would meet a closed descriptor (or, reused, another file).
func auditClient(fd int) *os.File {
	auditClientOnce.Do(func() { auditClientFile = os.NewFile(uintptr(fd), "audit-client") })
	return auditClientFile
}

var (
	auditClientOnce sync.Once
	auditClientFile *os.File
)

// KernelAudit turns the kernel's audit on for the rest of the test and back to what it
// was at its end (through the harness's outer process). It skips (or fails under
// FLEDGE_REQUIRE_SANDBOX=1) outside the harness. While on, records also reach the
// kernel's ring buffer when no audit daemon runs (KERN_NOTICE: below a default console
// level, so not on the console).
func KernelAudit(t testing.TB) {
	t.Helper()
	RequireContained(t)
	var fd int
	_, err := fmt.Sscan(os.Getenv(containAuditEnv), &fd)
	SkipUnlessSupported(t, err == nil && fd > 2, "the harness's kernel audit switch")
	c := auditClient(fd)
	ask := func(on bool) error {
		auditClientMu.Lock()
		defer auditClientMu.Unlock()
		req := []byte{'0'}
		if on {
			req[0] = '1'
		}
		if _, err := c.Write(req); err != nil {
			return err
		}
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		if n < 1 || buf[0] != '+' {
			return fmt.Errorf("kernel audit switch: %s", buf[1:n])
		}
		return nil
	}
	if err := ask(true); err != nil {
		t.Fatalf("turn the kernel's audit on: %v", err)
	}
	t.Cleanup(func() {
		if err := ask(false); err != nil {
			t.Errorf("put the kernel's audit back: %v", err)
		}
	})
}
