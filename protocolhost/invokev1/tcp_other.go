// SPDX-License-Identifier: MIT

//go:build !linux

package invokev1

import (
	"net"
	"time"
)

// dialPlugin connects to a TCP plugin's loopback port (only Linux runs plugins in a
// network namespace of their own).
func dialPlugin(_ int, _ bool, addr *net.TCPAddr, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", addr.String(), timeout)
}

// exposedListener cannot tell here what the plugin bound ("": no check).
func exposedListener(int) string { return "" }
