// SPDX-License-Identifier: MIT

// Package netstack enforces a plugin's network grant (package egress) on Linux: a network
// namespace of the plugin's own holding only its loopback and a TUN device, whose packets
// go to a userspace TCP/IP stack (gVisor's tcpip) in fledge. fledge answers DNS there
// itself, terminates every TCP connection in the stack, decides it by the name the program
// looked up (and by TLS SNI or HTTP Host), dials the destination from the host side and
// splices the bytes. Every other protocol goes nowhere. docs/guarantees.md ("Network by
// destination") says why this design.
package netstack

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/fledgehq/fledge/egress"
)

// ErrSetup is wrapped by every failure to build a plugin's network namespace.
var ErrSetup = errors.New("egress namespace setup failed")

// Config is one session's network.
type Config struct {
	Policy *egress.Policy
	Limits egress.Limits
	// Record receives every decision (called on the engine's goroutines; it must be safe
	// for concurrent use). Allow decisions are delivered before the destination is dialled.
	Record func(egress.Event)
	// Resolve looks a granted name up on the host (default: the host's resolv.conf
	// nameservers, then the system resolver); ttl 0 means the default cache time.
	Resolve func(ctx context.Context, name string) (addrs []netip.Addr, ttl time.Duration, err error)
	// CA signs the certificates of the destinations fledge reads (bound secrets, HTTP
	// rules); nil when there are none (egress.Session.CA).
	CA *egress.CA
	// RootCAs verifies those destinations' own certificates (nil: the host's trust store,
	// which honours SSL_CERT_FILE).
	RootCAs *x509.CertPool
	// Dial connects from the host side (default net.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}
