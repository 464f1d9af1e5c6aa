// SPDX-License-Identifier: MIT

package kernel

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// runBPF interprets the classic BPF subset the filter uses over one seccomp_data.
// It returns the answer and how many instructions ran.
func runBPF(t *testing.T, prog []unix.SockFilter, data []byte) (uint32, int) {
	t.Helper()
	var acc uint32
	for pc, steps := 0, 1; pc < len(prog); steps++ {
		if steps > len(prog) {
			t.Fatal("the program loops")
		}
		ins := prog[pc]
		switch ins.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.NativeEndian.Uint32(data[ins.K:])
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			acc &= ins.K
		case unix.BPF_RET | unix.BPF_K:
			return ins.K, steps
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			var taken bool
			switch ins.Code &^ (unix.BPF_JMP | unix.BPF_K) {
			case unix.BPF_JEQ:
				taken = acc == ins.K
			case unix.BPF_JGE:
				taken = acc >= ins.K
			case unix.BPF_JSET:
				taken = acc&ins.K != 0
			}
			if taken {
				pc += 1 + int(ins.Jt)
			} else {
				pc += 1 + int(ins.Jf)
			}
			continue
		default:
			t.Fatalf("instruction %d: code %#x not interpreted", pc, ins.Code)
		}
		pc++
	}
	t.Fatal("ran off the end of the program")
	return 0, 0
}

// TestSearchDispatchDecidesAsTheChain: the binary-search dispatch gives every syscall number
// (native and foreign ABI, x32) and every argument pattern the rules look at the same answer
// as the chain of comparisons it replaced, for every filter variant.
func TestSearchDispatchDecidesAsTheChain(t *testing.T) {
	build := func(f Filter, linear bool) []unix.SockFilter {
		linearDispatchForTest = linear
		defer func() { linearDispatchForTest = false }()
		p, err := buildFilter(f)
		require.NoError(t, err)
		return p
	}
	args := []uint64{0, 1, 2, 3, 5, 10, 16, ^uint64(0), unix.AF_UNIX, unix.AF_INET, unix.SOCK_STREAM, unix.SOCK_DGRAM,
		unix.SOCK_SEQPACKET, unix.SOCK_RAW, unix.O_CREAT, unix.O_CREAT | unix.O_WRONLY, unix.S_ISUID | 0o755, unix.S_ISGID | 0o755,
		0o755, unix.CLONE_NEWUSER, unix.CLONE_NEWNS, unix.CLONE_NEWNET | unix.CLONE_THREAD, unix.TIOCSTI, unix.TIOCLINUX, 0x5412,
		unix.AF_INET6, unix.AF_NETLINK, unix.AF_VSOCK, unix.AF_ALG, unix.AF_PACKET, 1<<32 | unix.AF_UNIX, 1<<32 | unix.AF_TIPC,
		unix.SOCK_STREAM | unix.SOCK_CLOEXEC, unix.SOCK_DGRAM | unix.SOCK_NONBLOCK,
		unix.NETLINK_CONNECTOR, unix.NETLINK_KOBJECT_UEVENT, 1<<32 | unix.NETLINK_CONNECTOR}
	variants := 0
	// Every Filter value (each of its five switches on or off).
	var filters []Filter
	for bits := range 32 {
		filters = append(filters, Filter{DenyUnix: bits&1 != 0, TCPOnly: bits&2 != 0, ConnectCheck: bits&4 != 0,
			Notify: bits&8 != 0, Trace: bits&16 != 0})
	}
	// Numbers past the table's range too: each side of every number the filter names, the
	// x32 boundary, the top of the range (-1, what a tracer's skipped call shows) and a
	// spread between.
	var far []uint32
	for _, r := range denyTable(Filter{DenyUnix: true}) {
		far = append(far, uint32(r.nr)-1, uint32(r.nr)+1)
	}
	for _, c := range traceCalls {
		far = append(far, uint32(c.nr)-1, uint32(c.nr)+1)
	}
	far = append(far, x32Bit-1, x32Bit, x32Bit+1, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff)
	for k := uint32(1); k < 64; k++ {
		far = append(far, k*0x3fffffff/63, k*0x9e3779b9)
	}
	for _, f := range filters {
		search, chain := build(f, false), build(f, true)
		require.NotEqual(t, search, chain, "the two dispatches differ in shape")
		variants++
		data := make([]byte, 64)
		nrs := append([]uint32{}, far...)
		for nr := uint32(0); nr < 1100; nr++ {
			nrs = append(nrs, nr)
		}
		for _, arch := range []uint32{auditArch, auditArch ^ 1, 0, ^uint32(0)} {
			binary.NativeEndian.PutUint32(data[offArch:], arch)
			for _, nr := range nrs {
				for _, n := range []uint32{nr, nr | x32Bit} {
					binary.NativeEndian.PutUint32(data[offNr:], n)
					for i, a0 := range args {
						if (arch != auditArch || n&x32Bit != 0) && i > 0 {
							break // refused before the dispatch, whatever the arguments
						}
						for j := range 6 {
							binary.NativeEndian.PutUint64(data[offArgs+8*j:], args[(i+j*3)%len(args)])
						}
						binary.NativeEndian.PutUint64(data[offArgs:], a0)
						got, _ := runBPF(t, search, data)
						want, _ := runBPF(t, chain, data)
						if got != want {
							t.Fatalf("%+v: nr %d arch %#x arg0 %#x: search says %#x, chain %#x", f, n, arch, a0, got, want)
						}
					}
				}
			}
		}
	}
	require.Equal(t, 32, variants)
	// The search is what makes installing cheap: the kernel runs the filter for every number
	// when it installs it, and the longest way an allowed number takes is a fraction of the
	// chain's.
	f := Filter{DenyUnix: true, Notify: true}
	search, chain := build(f, false), build(f, true)
	longest := func(prog []unix.SockFilter) int {
		data := make([]byte, 64)
		binary.NativeEndian.PutUint32(data[offArch:], auditArch)
		most := 0
		for nr := uint32(0); nr < 1100; nr++ {
			binary.NativeEndian.PutUint32(data[offNr:], nr)
			if ret, steps := runBPF(t, prog, data); ret == unix.SECCOMP_RET_ALLOW {
				most = max(most, steps)
			}
		}
		return most
	}
	ls, lc := longest(search), longest(chain)
	t.Logf("longest way of an allowed number: search %d instructions, chain %d", ls, lc)
	require.Less(t, ls*3, lc)
}

// TestSocketFilterDecidesAsVerdict: the filter's socket and socketpair blocks refuse
// exactly the calls the listener's verdict refuses (the rule evaluated in Go), for every
// family, type and protocol pattern the blocks look at: high bits included (the kernel
// takes ints), and every netlink protocol.
func TestSocketFilterDecidesAsVerdict(t *testing.T) {
	fams := []uint64{0, unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK, unix.AF_PACKET, unix.AF_ALG,
		unix.AF_VSOCK, unix.AF_TIPC, unix.AF_MAX, 1<<32 | unix.AF_NETLINK, 1<<32 | unix.AF_TIPC, 0xffffffff}
	types := []uint64{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_RAW, unix.SOCK_SEQPACKET,
		unix.SOCK_DGRAM | unix.SOCK_CLOEXEC, 1<<32 | unix.SOCK_DGRAM}
	var protos []uint64
	for p := range uint64(34) {
		protos = append(protos, p, 1<<32|p)
	}
	protos = append(protos, 0xffffffff)
	for _, f := range []Filter{{DenyUnix: true}, {DenyUnix: true, Notify: true}, {DenyUnix: true, TCPOnly: true}} {
		prog, err := buildFilter(f)
		require.NoError(t, err)
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
						_, errno := verdictFor(f.TCPOnly, nr, args)
						if (ret != unix.SECCOMP_RET_ALLOW) != (errno != 0) {
							t.Fatalf("%+v: nr %d args %#x: filter %#x, verdict %v", f, nr, args[:3], ret, errno)
						}
					}
				}
			}
		}
	}
}
