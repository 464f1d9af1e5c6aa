package linux

import (
	"errors"
	"os"

	"github.com/fledgehq/fledge/egress"

	"github.com/fledgehq/fledge/egress/netstack"
	"github.com/fledgehq/fledge/sandbox"
)

// errEgressLauncher: only the thread launcher joins an existing namespace; the stub (and
// every unprivileged run, which is a stub in a user namespace of its own) cannot.
// errNoSession: Spec.Egress holds something other than a session.
var errNoSession = errors.New("no egress session")

var errEgressLauncher = errors.New("needs root and the thread launcher (unprivileged runs get no network)")

// egressNS returns the session's egress namespace, starting its engine on first use.
func (s *Sandbox) egressNS(spec *sandbox.Spec) (*os.File, error) {
	if s.launch == LaunchStub || s.userView {
		return nil, errEgressLauncher
	}
	eg, ok := spec.Egress.(*egress.Session)
	if !ok || eg == nil || eg.Policy == nil {
		return nil, errNoSession
	}
	st, err := eg.State(func() (any, func() error, error) {
		e, err := netstack.Start(netstack.Config{Policy: eg.Policy, Limits: eg.Limits, Record: eg.Record})
		if err != nil {
			return nil, nil, err
		}
		return e, e.Close, nil
	})
	if err != nil {
		return nil, err
	}
	return st.(*netstack.Engine).NetNS(), nil
}

// egressReport says how network by destination is enforced here (doctor).
func (s *Sandbox) egressReport() string {
	if s.launch == LaunchStub || s.userView {
		return "none: " + errEgressLauncher.Error()
	}
	if err := netstack.Supported(); err != nil {
		return "none: " + err.Error()
	}
	return "netns+tun: a namespace per plugin session whose only way out is fledge (DNS answered by fledge, every TCP connection decided by name and port, UDP/ICMP/IPv6 refused)"
}
