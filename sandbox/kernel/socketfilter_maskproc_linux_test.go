// SPDX-License-Identifier: MIT

package kernel

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestSocketFilterDecidesAsRowAllFilters: for every filter a launch installs (unix sockets
// denied or allowed; plain, recorded or traced), the socket and socketpair blocks refuse
// exactly what the row, evaluated in Go for that filter, refuses, and a refusal is either
// the row's errno (EACCES) or the listener, whose verdict is EACCES too: a command sees
// one answer with and without recording.
func TestSocketFilterDecidesAsRowAllFilters(t *testing.T) {
	fams := []uint64{0, unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK, unix.AF_PACKET, unix.AF_ALG,
		unix.AF_VSOCK, unix.AF_TIPC, unix.AF_MAX, 1<<32 | unix.AF_UNIX, 1<<32 | unix.AF_NETLINK, 1<<32 | unix.AF_TIPC, 0xffffffff}
	types := []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_RAW, unix.SOCK_SEQPACKET,
		unix.SOCK_DGRAM | unix.SOCK_CLOEXEC, unix.SOCK_RAW | unix.SOCK_CLOEXEC, 1<<32 | unix.SOCK_DGRAM}
	var protos []uint64
	for p := range uint64(34) {
		protos = append(protos, p, 1<<32|p)
	}
	protos = append(protos, 0xffffffff)
	for _, deny := range []bool{true, false} {
		for _, f := range []Filter{{DenyUnix: deny}, {DenyUnix: deny, Notify: true}, {DenyUnix: deny, Trace: true}} {
			prog, err := buildFilter(f)
			require.NoError(t, err)
			rows := map[int]rule{}
			for _, r := range denyTable(f) {
				rows[r.nr] = r
			}
			data := make([]byte, 64)
			binary.NativeEndian.PutUint32(data[offArch:], auditArch)
			for _, nr := range []int{unix.SYS_SOCKET, unix.SYS_SOCKETPAIR} {
				binary.NativeEndian.PutUint32(data[offNr:], uint32(nr))
				for _, fam := range fams {
					for _, typ := range types {
						for _, proto := range protos {
							args := [6]uint64{fam, typ, proto}
							for j, a := range args {
								binary.NativeEndian.PutUint64(data[offArgs+8*j:], a)
							}
							ret, _ := runBPF(t, prog, data)
							refused := rows[nr].matches(args)
							switch {
							case !refused:
								require.Equal(t, uint32(unix.SECCOMP_RET_ALLOW), ret, "%+v nr %d args %#x", f, nr, args[:3])
							case ret == unix.SECCOMP_RET_USER_NOTIF:
								require.True(t, f.Notify || f.Trace, "%+v nr %d args %#x: notified without a listener", f, nr, args[:3])
								_, errno := verdict(nr, args)
								require.Equal(t, unix.EACCES, errno, "%+v nr %d args %#x: the listener's answer", f, nr, args[:3])
							default:
								require.Equal(t, uint32(unix.SECCOMP_RET_ERRNO)|uint32(unix.EACCES), ret, "%+v nr %d args %#x", f, nr, args[:3])
							}
						}
					}
				}
			}
		}
	}
}

// TestMaskProcRefusesUnexaminableProc: a view's /proc that cannot be examined (anything
// but absent) refuses the view: the covers must not be skipped in silence.
func TestMaskProcRefusesUnexaminableProc(t *testing.T) {
	dir := t.TempDir()
	loop := dir + "/proc"
	require.NoError(t, os.Symlink(loop, loop)) // statfs: ELOOP
	err := maskProc(loop, dir+"/cover", []string{"slabinfo"})
	require.ErrorIs(t, err, unix.ELOOP)
	// Absent: no /proc in this view, nothing to cover.
	require.NoError(t, maskProc(dir+"/none", dir+"/cover", []string{"slabinfo"}))
}
