// SPDX-License-Identifier: MIT

package kernel

// EgressNet is the network namespace of a run whose only way out is fledge (network by
// destination): the calling thread's namespace gets its loopback up and a TUN device whose
// address has netmask 0 and a default route, so every IPv4 destination that is not the
// namespace's loopback goes into the TUN device. Listening sockets on the namespace's own
// loopback stand in for the host's granted loopback ports and the host's loopback
// nameservers (127.0.0.53 of systemd-resolved), which inside the namespace would otherwise
// answer nothing. Whoever serves the namespace (fledge's userspace stack) gets every fd.
// It is JSON on the stub's policy pipe.
type EgressNet struct {
	TUN       string   `json:"tun"`
	Addr      [4]byte  `json:"addr"`
	MTU       uint32   `json:"mtu"`
	LoopPorts []uint16 `json:"loop_ports,omitempty"`
	// DNS are loopback IPv4 or IPv6 addresses: a UDP and a TCP socket on port 53 of each.
	DNS []string `json:"dns,omitempty"`
}

// TUNVnetHdrLen is the virtio-net header in front of every packet read from or written to
// the TUN device of an EgressNet (struct virtio_net_hdr, the kernel's default size).
const TUNVnetHdrLen = 10

// EgressFDs are the descriptors BuildEgressNet made, in the order they cross a socket.
type EgressFDs struct {
	TUN    int
	Loop   []int // TCP listeners, one per LoopPorts entry
	DNSUDP []int
	DNSTCP []int
}

// All lists every fd: the TUN device, then Loop, DNSUDP and DNSTCP.
func (f *EgressFDs) All() []int {
	out := append([]int{f.TUN}, f.Loop...)
	out = append(out, f.DNSUDP...)
	return append(out, f.DNSTCP...)
}

// Count is how many fds an EgressNet yields.
func (n *EgressNet) Count() int { return 1 + len(n.LoopPorts) + 2*len(n.DNS) }

// Split is the inverse of All for fds received for n.
func (n *EgressNet) Split(fds []int) (*EgressFDs, bool) {
	if len(fds) != n.Count() {
		return nil, false
	}
	l, d := len(n.LoopPorts), len(n.DNS)
	return &EgressFDs{TUN: fds[0], Loop: fds[1 : 1+l], DNSUDP: fds[1+l : 1+l+d], DNSTCP: fds[1+l+d:]}, true
}
