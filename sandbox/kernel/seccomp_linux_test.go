// SPDX-License-Identifier: MIT

package kernel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/fledgehq/fledge/testkit/testutil"
)

func TestFilterAssembles(t *testing.T) {
	testutil.SkipUnlessSupported(t, SeccompSupported(), "no filter for this architecture")
	for _, f := range []Filter{{}, {DenyUnix: true}, {Notify: true, Trace: true}, {DenyUnix: true, TCPOnly: true, ConnectCheck: true, Notify: true, Trace: true}} {
		prog, err := buildFilter(f)
		require.NoError(t, err, "%+v", f)
		assert.Less(t, len(prog), unix.BPF_MAXINSNS)
	}
}

func TestDeniedSyscallsTable(t *testing.T) {
	testutil.SkipUnlessSupported(t, SeccompSupported(), "no filter for this architecture")
	rows := map[string]DeniedSyscall{}
	for _, d := range DeniedSyscalls(Filter{}) {
		assert.NotEmpty(t, d.Why, d.Name)
		assert.NotEmpty(t, d.When, d.Name)
		rows[d.Name] = d
	}
	assert.Equal(t, "domain is none of AF_INET, AF_INET6, AF_NETLINK, AF_UNIX, or is AF_NETLINK and protocol is none of NETLINK_ROUTE, NETLINK_SOCK_DIAG, NETLINK_AUDIT, NETLINK_NETFILTER, NETLINK_KOBJECT_UEVENT, NETLINK_GENERIC", rows["socket"].When, "a family allow-list, unix sockets refused only when DenyUnix, netlink by protocol")
	assert.Equal(t, "domain is none of AF_INET, AF_INET6, AF_NETLINK, AF_UNIX", rows["socketpair"].When, "pairs of the families socket refuses, every unix pair allowed")
	for _, name := range []string{"kcmp", "fanotify_init", "io_setup"} {
		assert.Equal(t, "EPERM", rows[name].Errno, name)
	}
	assert.Equal(t, "ENOSYS", rows["clone3"].Errno)
	assert.Equal(t, "EPERM", rows["io_uring_setup"].Errno)
	assert.Equal(t, "always", rows["keyctl"].When)
	assert.Contains(t, rows["clone"].When, "CLONE_NEW")
	withUnix := DeniedSyscalls(Filter{DenyUnix: true})
	assert.Equal(t, "EACCES", withUnix[0].Errno)
	assert.Equal(t, "domain is none of AF_INET, AF_INET6, AF_NETLINK, or is AF_NETLINK and protocol is none of NETLINK_ROUTE, NETLINK_SOCK_DIAG, NETLINK_AUDIT, NETLINK_NETFILTER, NETLINK_KOBJECT_UEVENT, NETLINK_GENERIC", withUnix[0].When)
	assert.Equal(t, "socketpair", withUnix[1].Name)
	assert.Equal(t, "EACCES", withUnix[1].Errno)
	assert.Equal(t, "domain is none of AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, or is AF_UNIX and type is neither SOCK_STREAM nor SOCK_SEQPACKET", withUnix[1].When)
}
