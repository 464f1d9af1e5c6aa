package core

import (
	"github.com/fledgehq/fledge/audit"
	"github.com/fledgehq/fledge/egress"
	"github.com/fledgehq/fledge/reason"
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
		if ev.Suppressed > 0 {
			det["suppressed"] = ev.Suppressed
		}
		// An allowed connection's decision is durable before bytes flow (audit before act).
		rec.Record(ev.Kind, d, rc, det, ev.Kind == egress.EventConnect && ev.Allow)
	}
}
