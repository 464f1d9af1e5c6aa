// SPDX-License-Identifier: MIT

package linux

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/sandbox"
	"github.com/fledgehq/fledge/sandbox/kernel"
	"github.com/fledgehq/fledge/sandbox/netstack"
)

// errNoSession: Spec.Egress holds something other than a session.
var errNoSession = errors.New("no egress session")

// errEgressNoNetNS: the runs here get no network namespace of their own (unprivileged,
// the kernel refuses one in a user namespace), so nothing can be the only way out.
var errEgressNoNetNS = errors.New("no network namespace for a run here")

// errEgressMixed: one plugin session's network reached from a thread-launcher sandbox and
// a stub one; each builds its namespaces its own way.
var errEgressMixed = errors.New("the session's network was started by another launcher")

// runEgress is how one run gets its plugin session's network by destination: the thread
// launcher joins the session's namespace (ns); the stub builds a namespace of the run's
// own and hands it to the session's engine (eng, Plan and Attach).
type runEgress struct {
	ns    *os.File
	eng   *netstack.Engine
	proxy *netstack.Proxy // no namespace here: the session's proxy, the one port reachable
}

// egressFor returns the run's network by destination, starting the session's engine on
// first use. Root with the thread launcher: one namespace per plugin session, which the
// plugin and every command join. The stub (every unprivileged run: a stub in user and
// network namespaces of its own): a namespace per run, built by the run's stub where it
// holds CAP_NET_ADMIN, served by the same engine (one policy, one set of limits, one
// record stream per session); a command never gets more network than its plugin.
func (s *Sandbox) egressFor(spec *sandbox.Spec) (*runEgress, error) {
	stubBuilt := s.launch == LaunchStub || s.userView
	viaProxy := s.proxyEgress() == nil
	if stubBuilt && s.egressErr != nil && !viaProxy {
		return nil, s.egressErr
	}
	eg, ok := spec.Egress.(*egress.Session)
	if !ok || eg == nil || eg.Policy == nil {
		return nil, errNoSession
	}
	st, err := eg.State(func() (any, func() error, error) {
		ca, err := eg.CA()
		if err != nil {
			return nil, nil, fmt.Errorf("%w: session CA: %w", netstack.ErrSetup, err)
		}
		cfg := netstack.Config{Policy: eg.Policy, Limits: eg.Limits, Record: eg.Record, CA: ca}
		var e *netstack.Engine
		if stubBuilt || viaProxy {
			e, err = netstack.NewShared(cfg)
		} else {
			e, err = netstack.Start(cfg)
		}
		if err != nil {
			return nil, nil, err
		}
		if viaProxy {
			if _, err := e.StartProxy(); err != nil {
				e.Close()
				return nil, nil, err
			}
		}
		return e, e.Close, nil
	})
	if err != nil {
		return nil, err
	}
	e := st.(*netstack.Engine)
	if viaProxy {
		p, err := e.StartProxy() // the one the session started
		if err != nil {
			return nil, err
		}
		return &runEgress{proxy: p}, nil
	}
	if stubBuilt {
		if e.NetNS() != nil {
			return nil, errEgressMixed
		}
		return &runEgress{eng: e}, nil
	}
	if e.NetNS() == nil {
		return nil, errEgressMixed
	}
	return &runEgress{ns: e.NetNS()}, nil
}

// egressSupport says why the stub cannot build a run's network by destination here (nil:
// it can). Called once by New.
func (s *Sandbox) egressSupport() error {
	if !s.netns {
		return errEgressNoNetNS
	}
	if s.userView {
		if err := probeUserEgress(s.stubPath); err != nil {
			return fmt.Errorf("%w: %w", netstack.ErrSetup, err)
		}
	}
	return nil
}

// netstackSupported is netstack.Supported, asked once per process: it builds a network
// namespace and a TUN device to see whether it can, and Report is called at every session's
// start. What this process may do does not change while it runs.
var netstackSupported = sync.OnceValue(netstack.Supported)

// errNoProxyEgress: no namespace here, and the session's proxy cannot be the only way out
// either.
var errNoProxyEgress = errors.New("no network namespace here, and no Landlock TCP rules (ABI 4, Linux 6.7) or seccomp filter to make the session's proxy the only way out")

// proxyEgress says whether runs here get their network by destination through the
// session's proxy (nil) instead of a namespace: where no namespace can be made (no user
// namespaces, or none with a TUN device), Landlock's TCP rules let a run connect to the
// proxy's port only and the seccomp filter refuses every other IPv4/IPv6 socket (UDP, so
// DNS too: the proxy resolves). A namespace, where one can be made, is always preferred.
// Decided once per process: what it may do does not change while it runs.
func (s *Sandbox) proxyEgress() error {
	s.proxyOnce.Do(func() {
		switch {
		case s.launch == LaunchStub || s.userView:
			if s.egressErr == nil {
				s.proxyErr = errors.New("a namespace per run")
				return
			}
		case netstackSupported() == nil:
			s.proxyErr = errors.New("a namespace per session")
			return
		}
		switch {
		case s.noProxy:
			s.proxyErr = errors.New("the session's proxy is disabled")
		case s.abi < 4 || !kernel.SeccompSupported():
			s.proxyErr = errNoProxyEgress
		}
	})
	return s.proxyErr
}

// ProxyReport is the network_egress line of the proxy mode.
const ProxyReport = "proxy (no network namespace here): the plugin and its commands may connect to one TCP port only (Landlock), their plugin session's proxy on the host's loopback (HTTP CONNECT, plain HTTP and SOCKS5, each connection authenticated by the session's credential in the proxy variables they get), which decides every connection by name and port as the namespace does; UDP (so DNS: the proxy resolves) and every other IPv4/IPv6 socket refused (seccomp); programs that ignore HTTP_PROXY/HTTPS_PROXY/ALL_PROXY reach nothing"

// egressReport says how network by destination is enforced here (doctor).
func (s *Sandbox) egressReport() string {
	if s.proxyEgress() == nil {
		return ProxyReport
	}
	if s.launch == LaunchStub || s.userView {
		if s.egressErr != nil {
			return "none: " + s.egressErr.Error()
		}
		who := "as root"
		if s.userView {
			who = "unprivileged: in the user namespace the run is born in"
		}
		return "netns+tun per run (" + who + "): each run's stub builds a namespace of its own whose only way out is fledge, served by its plugin session's engine (one policy, one set of limits, one record stream per session; DNS answered by fledge, every TCP connection decided by name and port, UDP/ICMP/IPv6 refused)"
	}
	if err := netstackSupported(); err != nil {
		return "none: " + err.Error()
	}
	return "netns+tun: a namespace per plugin session whose only way out is fledge (DNS answered by fledge, every TCP connection decided by name and port, UDP/ICMP/IPv6 refused)"
}
