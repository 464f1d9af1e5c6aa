// SPDX-License-Identifier: MIT

package kernel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"golang.org/x/sys/unix"
)

// verdict must refuse exactly what the filter refuses (it answers the notified calls).
func TestVerdictMatchesRows(t *testing.T) {
	if !SeccompSupported() {
		t.Skip("no filter on this architecture")
	}
	for _, tc := range []struct {
		name  string
		nr    int
		args  [6]uint64
		errno unix.Errno
	}{
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, [6]uint64{1}, unix.EPERM},
		{"unshare user", unix.SYS_UNSHARE, [6]uint64{unix.CLONE_NEWUSER}, unix.EPERM},
		{"unshare files", unix.SYS_UNSHARE, [6]uint64{unix.CLONE_FILES}, 0},
		{"ptrace attach", unix.SYS_PTRACE, [6]uint64{unix.PTRACE_ATTACH}, unix.EPERM},
		{"ptrace traceme", unix.SYS_PTRACE, [6]uint64{unix.PTRACE_TRACEME}, 0},
		{"personality query", unix.SYS_PERSONALITY, [6]uint64{0xffffffff}, 0},
		{"personality no-aslr", unix.SYS_PERSONALITY, [6]uint64{0x0040000}, unix.EPERM},
		{"socket unix", unix.SYS_SOCKET, [6]uint64{unix.AF_UNIX}, unix.EACCES},
		{"socket inet", unix.SYS_SOCKET, [6]uint64{unix.AF_INET}, 0},
		{"socket inet6", unix.SYS_SOCKET, [6]uint64{unix.AF_INET6}, 0},
		{"socket netlink", unix.SYS_SOCKET, [6]uint64{unix.AF_NETLINK}, 0},
		{"socket netlink sock_diag", unix.SYS_SOCKET, [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_SOCK_DIAG}, 0},
		{"socket netlink uevent", unix.SYS_SOCKET, [6]uint64{unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_KOBJECT_UEVENT}, 0},
		{"socket netlink connector", unix.SYS_SOCKET, [6]uint64{unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_CONNECTOR}, unix.EACCES},
		{"socket netlink xfrm", unix.SYS_SOCKET, [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_XFRM}, unix.EACCES},
		{"socket netlink route high bits", unix.SYS_SOCKET, [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW, 1 << 32}, 0},
		{"socket netlink connector high bits", unix.SYS_SOCKET, [6]uint64{unix.AF_NETLINK, unix.SOCK_RAW, 1<<32 | unix.NETLINK_CONNECTOR}, unix.EACCES},
		{"socket inet protocol 11", unix.SYS_SOCKET, [6]uint64{unix.AF_INET, unix.SOCK_DGRAM, 11}, 0},
		{"socketpair netlink connector", unix.SYS_SOCKETPAIR, [6]uint64{unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_CONNECTOR}, 0},
		{"socket vsock", unix.SYS_SOCKET, [6]uint64{unix.AF_VSOCK}, unix.EACCES},
		{"socket alg", unix.SYS_SOCKET, [6]uint64{unix.AF_ALG}, unix.EACCES},
		{"socket tipc high bits", unix.SYS_SOCKET, [6]uint64{1<<32 | unix.AF_TIPC}, unix.EACCES},
		{"socket inet high bits", unix.SYS_SOCKET, [6]uint64{1<<32 | unix.AF_INET}, 0},
		{"socketpair tipc", unix.SYS_SOCKETPAIR, [6]uint64{unix.AF_TIPC, unix.SOCK_SEQPACKET}, unix.EACCES},
		{"socketpair inet", unix.SYS_SOCKETPAIR, [6]uint64{unix.AF_INET, unix.SOCK_STREAM}, 0},
		{"socketpair seqpacket", unix.SYS_SOCKETPAIR, [6]uint64{unix.AF_UNIX, unix.SOCK_SEQPACKET}, 0},
		{"socketpair raw", unix.SYS_SOCKETPAIR, [6]uint64{unix.AF_UNIX, unix.SOCK_RAW}, unix.EACCES},
		{"kcmp", unix.SYS_KCMP, [6]uint64{1, 1}, unix.EPERM},
		{"fanotify_init", unix.SYS_FANOTIFY_INIT, [6]uint64{0x200}, unix.EPERM},
		{"io_setup", unix.SYS_IO_SETUP, [6]uint64{1}, unix.EPERM},
		{"io_submit", unix.SYS_IO_SUBMIT, [6]uint64{1}, 0},
		{"inotify_init1", unix.SYS_INOTIFY_INIT1, [6]uint64{}, 0},
		{"socketpair dgram", unix.SYS_SOCKETPAIR, [6]uint64{unix.AF_UNIX, unix.SOCK_DGRAM}, unix.EACCES},
		{"socketpair stream cloexec", unix.SYS_SOCKETPAIR, [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}, 0},
		{"openat setuid create", unix.SYS_OPENAT, [6]uint64{0, 0, unix.O_CREAT, 0o4755}, unix.EPERM},
		{"openat setuid no create", unix.SYS_OPENAT, [6]uint64{0, 0, unix.O_RDONLY, 0o4755}, 0},
		{"openat plain", unix.SYS_OPENAT, [6]uint64{0, 0, unix.O_CREAT, 0o644}, 0},
		{"clone3", unix.SYS_CLONE3, [6]uint64{}, unix.ENOSYS},
		{"read", unix.SYS_READ, [6]uint64{}, 0},
	} {
		_, got := verdict(tc.nr, tc.args)
		assert.Equal(t, tc.errno, got, tc.name)
	}
}

func TestGrantsAllows(t *testing.T) {
	g := &Grants{ReadWrite: []string{"/work/proj"}, ReadOnly: []string{"/etc/hosts"}, ReadExec: []string{"/usr"}}
	for _, tc := range []struct {
		path string
		acc  accessKind
		ok   bool
	}{
		{"/work/proj/a.txt", accessWrite, true},
		{"/work/proj/a.txt", accessOpen, true},
		{"/work/projX/a.txt", accessOpen, false},
		{"/etc/hosts", accessOpen, true},
		{"/etc/hosts", accessWrite, false},
		{"/etc/shadow", accessOpen, false},
		{"/usr/bin/git", accessExec, true},
		{"/usr/bin/git", accessWrite, false},
		{"/work", accessStat, true}, // leads to a granted path: the view shows it
		{"/work", accessOpen, false},
		{"/home/u/.ssh/id_rsa", accessStat, false},
		{"/proc/self/status", accessOpen, true},
	} {
		assert.Equal(t, tc.ok, g.allowsPath(tc.path, tc.acc), "%s %d", tc.path, tc.acc)
	}
}

func TestSockaddrString(t *testing.T) {
	b := []byte{unix.AF_INET, 0, 0x01, 0xbb, 203, 0, 113, 7, 0, 0, 0, 0, 0, 0, 0, 0}
	s, ok := sockaddrString(b)
	assert.True(t, ok)
	assert.Equal(t, "203.0.113.7:443", s)
	_, ok = sockaddrString([]byte{unix.AF_UNIX, 0, '/', 'x'})
	assert.False(t, ok)
}
