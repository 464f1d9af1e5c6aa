// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"net/netip"
	"sync"
)

// fakePool hands each granted name an address of its own from 198.18.0.0/15 (reserved for
// benchmarking, never routed): a connection to it names exactly one looked-up name, which a
// real address shared by many names (a CDN) could not.
type fakePool struct {
	mu     sync.Mutex
	max    int
	byName map[string]netip.Addr
	byAddr map[netip.Addr]string
	next   netip.Addr
}

var fakePrefix = netip.MustParsePrefix("198.18.0.0/15")

func newFakePool(max int) *fakePool {
	if max > 1<<16 {
		max = 1 << 16
	}
	return &fakePool{max: max, byName: map[string]netip.Addr{}, byAddr: map[netip.Addr]string{},
		next: netip.MustParseAddr("198.18.0.1")}
}

// assign returns name's address, making one if needed; false when the pool is full.
func (p *fakePool) assign(name string) (netip.Addr, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.byName[name]; ok {
		return a, true
	}
	if len(p.byName) >= p.max {
		return netip.Addr{}, false
	}
	a := p.next
	p.next = p.next.Next()
	p.byName[name], p.byAddr[a] = a, name
	return a, true
}

// name returns the name behind a and whether a is in the pool's range at all.
func (p *fakePool) name(a netip.Addr) (string, bool) {
	if !fakePrefix.Contains(a) {
		return "", false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byAddr[a], true
}
