// SPDX-License-Identifier: MIT

package core

import (
	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/policy"
	"github.com/fledgehq/fledge/reason"
	"github.com/fledgehq/fledge/sandbox"
)

// netRecorder turns the session network's decisions (package egress) into audit records:
// net_connect and net_dns decisions (an allow before the destination is dialled), and
// net_close with the bytes each way and the duration.
func netRecorder(rec *Recorder) func(egress.Event) {
	return func(ev egress.Event) {
		d, rc := audit.Deny, reason.CapabilityNotGranted
		switch {
		case ev.Kind == egress.EventClose && ev.Reason == egress.ReasonDialFailed:
			d, rc = audit.Error, reason.LaunchFailed
		case ev.Allow:
			d, rc = audit.Allow, reason.OK
		case ev.Reason == egress.ReasonLimit:
			rc = reason.LimitExceeded
		case ev.Reason == egress.ReasonResolveFailed:
			d, rc = audit.Error, reason.LaunchFailed
		}
		det := map[string]any{"proto": ev.Proto, "why": ev.Reason}
		if ev.Host != "" {
			det["host"] = ev.Host
		}
		if ev.Port != 0 {
			det["port"] = ev.Port
		}
		if ev.Address != "" {
			det["address"] = ev.Address
		}
		if ev.QType != "" {
			det["qtype"] = ev.QType
		}
		if ev.Kind == egress.EventClose {
			det["bytes_out"], det["bytes_in"] = ev.BytesOut, ev.BytesIn
			det["duration_ms"] = ev.Duration.Milliseconds()
		}
		if ev.Kind == egress.EventHTTP {
			if ev.Method != "" {
				det["method"], det["path"] = ev.Method, ev.Path
			}
			if ev.Status != 0 {
				det["status"] = ev.Status
			}
			det["bytes_out"], det["bytes_in"] = ev.BytesOut, ev.BytesIn
			if len(ev.Secrets) > 0 {
				det["secret"] = ev.Secrets
			}
			if ev.Reason == egress.ReasonUpstreamTLS || ev.Reason == egress.ReasonDialFailed {
				d, rc = audit.Error, reason.LaunchFailed
			}
		}
		if ev.Suppressed > 0 {
			det["suppressed"] = ev.Suppressed
		}
		// An allowed connection's decision is durable before bytes flow (audit before act).
		rec.Record(ev.Kind, d, rc, det, ev.Kind == egress.EventConnect && ev.Allow)
	}
}

// RecordNetwork makes a network by destination that is not a plugin session's (an install
// hook's) record its decisions through rec, as Spawn does for a session's.
func RecordNetwork(e sandbox.Egress, rec *Recorder) {
	if s, ok := e.(*egress.Session); ok && s != nil {
		s.SetRecord(netRecorder(rec))
	}
}

// announceNetworkOverride tells the user, on every session, that [sandbox] network =
// "allow" gives everything the whole network, and records it.
func announceNetworkOverride(c *policy.Config, r *Recorder, warn func(string)) {
	if c == nil || warn == nil { // warn nil: install, grant, remove records (no run)
		return
	}
	msg := c.NetworkOverride()
	if msg == "" {
		return
	}
	warn(msg)
	r.Record(audit.EventSandboxDegraded, audit.Allow, reason.OK, map[string]any{"network_override": "allow", "message": msg}, false)
}

// networkTo lists the destinations of a spec's network by destination ([] for none).
func networkTo(spec *sandbox.Spec) []string {
	s, ok := spec.Egress.(*egress.Session)
	if !ok || s == nil || s.Policy == nil {
		return []string{}
	}
	return egress.Strings(s.Policy.Dests)
}

// closeEgress ends a session's network (nil: nothing to end).
func closeEgress(e sandbox.Egress) {
	if e != nil {
		_ = e.Close()
	}
}
