// SPDX-License-Identifier: MIT

//go:build linux

package netstack

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// hostResolve looks name up as the host would, keeping the answer's TTL where it has one:
// the nameservers of /etc/resolv.conf first (miekg/dns, so the TTL is known), then the
// system resolver (/etc/hosts, nsswitch) with the default cache time.
func hostResolve(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	if cfg, err := dns.ClientConfigFromFile("/etc/resolv.conf"); err == nil && len(cfg.Servers) > 0 {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeA)
		c := &dns.Client{Timeout: 3 * time.Second}
		for _, s := range cfg.Servers {
			r, _, err := c.ExchangeContext(ctx, m, net.JoinHostPort(s, cfg.Port))
			if err != nil || r.Rcode != dns.RcodeSuccess {
				continue
			}
			var out []netip.Addr
			ttl := time.Hour
			for _, rr := range r.Answer {
				if a, ok := rr.(*dns.A); ok {
					if ip, ok := netip.AddrFromSlice(a.A); ok {
						out = append(out, ip.Unmap())
						if t := time.Duration(a.Hdr.Ttl) * time.Second; t < ttl {
							ttl = t
						}
					}
				}
			}
			if len(out) > 0 {
				if ttl < time.Second {
					ttl = time.Second
				}
				return out, ttl, nil
			}
		}
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", name)
	return addrs, 0, err
}
